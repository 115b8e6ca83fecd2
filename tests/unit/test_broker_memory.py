"""broker/memory.py and broker/topology.py: what only the in-memory broker shows (the
shared behaviour runs against both transports in tests/integration/test_broker_contract.py),
and the late-joiner fix over the real topology."""

from __future__ import annotations

import threading

import pytest

from broker.codec import decode
from broker.memory import MemoryBroker, MemoryTransport
from broker.messages import ModelAnnouncement, ModelRequest, PhaseDeadlines, RoundParameters
from broker.receive import Expectation, Outcome, drain, receive_one
from broker.topology import (
    AGGREGATOR_QUEUE,
    DIRECT_EXCHANGE,
    MODEL_EXCHANGE,
    SUBMIT_EXCHANGE,
    SUBMIT_ROUTING_KEY,
    BindingSpec,
    ExchangeSpec,
    QueueSpec,
    check_participant_id,
    declare_core,
    declare_participant,
    participant_queue,
)
from broker.transport import BrokerUnavailable, Delivery, PublishRejected, Transport

ANNOUNCEMENT = ModelAnnouncement(
    round=4,
    model_version=3,
    spec="firefox-2018",
    weights=(4.0, 14.0),
    params=RoundParameters(
        cohort_size=10,
        quorum=6,
        deadlines=PhaseDeadlines(
            check_in=1.0, share_keys=2.0, masked_input=3.0, consistency_check=4.0, unmask=5.0
        ),
    ),
)


def test_late_joiner_gets_the_current_model_by_asking() -> None:
    broker = MemoryBroker()
    aggregator = broker.connect("aggregator")
    declare_core(aggregator)
    declare_participant(aggregator, "early")
    aggregator.publish(MODEL_EXCHANGE, "", ANNOUNCEMENT)

    declare_participant(aggregator, "late")  # enrolled after the fanout
    late = broker.connect("participant-late")
    assert late.get(participant_queue("late")) is None  # fanout missed it
    late.publish(SUBMIT_EXCHANGE, SUBMIT_ROUTING_KEY, ModelRequest(round=0, participant_id="late"))

    def answer(message: object, delivery: Delivery) -> None:
        assert isinstance(message, ModelRequest)
        assert delivery.user_id == f"participant-{message.participant_id}"
        aggregator.publish(DIRECT_EXCHANGE, message.participant_id, ANNOUNCEMENT)

    outcome = receive_one(aggregator, AGGREGATOR_QUEUE, answer, Expectation((ModelRequest,)))
    assert outcome is Outcome.HANDLED
    got = late.get(participant_queue("late"))
    assert got is not None and decode(got.body) == ANNOUNCEMENT
    early = broker.connect("participant-early")
    first = early.get(participant_queue("early"))
    assert first is not None and decode(first.body) == ANNOUNCEMENT
    assert early.get(participant_queue("early")) is None  # the direct answer went to "late"


def test_core_topology_routes_submissions_to_the_aggregator_queue() -> None:
    broker = MemoryBroker()
    transport = broker.connect()
    declare_core(transport)
    declare_core(transport)  # idempotent
    request = ModelRequest(round=0, participant_id="p")
    transport.publish(SUBMIT_EXCHANGE, SUBMIT_ROUTING_KEY, request)
    assert broker.queue_length(AGGREGATOR_QUEUE) == 1
    with pytest.raises(PublishRejected):
        transport.publish(SUBMIT_EXCHANGE, "elsewhere", request)


def test_participant_queue_keeps_only_the_newest_messages() -> None:
    broker = MemoryBroker()
    transport = broker.connect()
    transport.declare_exchange(ExchangeSpec("x", "fanout"))
    transport.declare_queue(
        QueueSpec("q", arguments=(("x-max-length", 2), ("x-overflow", "drop-head")))
    )
    transport.bind(BindingSpec("x", "q"))
    for pid in ("a", "b", "c"):
        transport.publish("x", "", ModelRequest(round=0, participant_id=pid))
    assert drain(transport, "q", lambda m, d: None, Expectation((ModelRequest,)), 10) == {
        Outcome.HANDLED: 2,
        Outcome.REJECTED: 0,
        Outcome.EMPTY: 1,
    }


def test_broker_refuses_messages_above_its_max_size() -> None:
    broker = MemoryBroker(max_message_bytes=100)
    transport = broker.connect()
    transport.declare_exchange(ExchangeSpec("x", "fanout"))
    transport.declare_queue(QueueSpec("q"))
    transport.bind(BindingSpec("x", "q"))
    transport.publish_bytes("x", "", b"\x00" * 100)
    with pytest.raises(PublishRejected, match="101 bytes above the broker's max of 100"):
        transport.publish_bytes("x", "", b"\x00" * 101)
    assert broker.queue_length("q") == 1


def test_get_waits_for_a_message_published_by_another_thread() -> None:
    broker = MemoryBroker()
    consumer = broker.connect()
    consumer.declare_exchange(ExchangeSpec("x", "direct"))
    consumer.declare_queue(QueueSpec("q"))
    consumer.bind(BindingSpec("x", "q", "k"))
    publisher = broker.connect()
    thread = threading.Thread(
        target=lambda: publisher.publish("x", "k", ModelRequest(round=0, participant_id="p"))
    )
    thread.start()
    delivery = consumer.get("q", timeout=10)
    thread.join()
    assert delivery is not None
    assert decode(delivery.body) == ModelRequest(round=0, participant_id="p")


def test_closed_transport_is_unavailable_and_double_ack_is_an_error() -> None:
    broker = MemoryBroker()
    transport = broker.connect()
    transport.declare_exchange(ExchangeSpec("x", "fanout"))
    transport.declare_queue(QueueSpec("q"))
    transport.bind(BindingSpec("x", "q"))
    transport.publish("x", "", ModelRequest(round=0, participant_id="p"))
    delivery = transport.get("q")
    assert delivery is not None
    transport.ack(delivery)
    with pytest.raises(Exception, match="unknown delivery tag"):
        transport.ack(delivery)
    transport.close()
    with pytest.raises(BrokerUnavailable):
        transport.get("q")


def test_call_keeping_alive_runs_the_work() -> None:
    assert MemoryBroker().connect().call_keeping_alive(lambda: 7) == 7


@pytest.mark.parametrize("bad", ["", "a.b", "a b", "x" * 65, "p*", "ü"])
def test_participant_ids_that_could_escape_names_or_regexes_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        check_participant_id(bad)
    with pytest.raises(ValueError):
        ModelRequest(round=0, participant_id=bad)


def test_participant_queue_name() -> None:
    assert participant_queue("p-1_A") == "fedrank.participant.p-1_A"


def _direct_queues(transport: MemoryTransport, *keys: str) -> None:
    transport.declare_exchange(ExchangeSpec("x", "direct"))
    for key in keys:
        transport.declare_queue(QueueSpec(key))
        transport.bind(BindingSpec("x", key, key))


def _waiting(transport: MemoryTransport, queue: str) -> list[str]:
    ids = []
    while (delivery := transport.get(queue)) is not None:
        message = decode(delivery.body)
        assert isinstance(message, ModelRequest)
        ids.append(message.participant_id)
        transport.ack(delivery)
    return ids


def test_batch_with_an_item_above_the_brokers_max_size_is_refused_whole() -> None:
    transport = MemoryBroker(max_message_bytes=200).connect()
    _direct_queues(transport, "a")
    small = ModelRequest(round=0, participant_id="p")
    with pytest.raises(PublishRejected, match="above the broker's max") as raised:
        transport.publish_many([("x", "a", small), ("x", "a", ANNOUNCEMENT)])
    assert raised.value.returned == ()
    assert _waiting(transport, "a") == []


class OneByOne(MemoryTransport):
    """A transport that keeps ``Transport``'s default ``publish_many_bytes``."""

    publish_many_bytes = Transport.publish_many_bytes

    def __init__(self, broker: MemoryBroker) -> None:
        super().__init__(broker, "guest", prefetch=64)
        self.published: list[str] = []

    def publish_bytes(self, exchange: str, routing_key: str, body: bytes) -> None:
        self.published.append(routing_key)
        super().publish_bytes(exchange, routing_key, body)


def test_default_batch_publishes_one_by_one_and_names_the_unroutable() -> None:
    transport = OneByOne(MemoryBroker())
    _direct_queues(transport, "a", "b")
    keys = ["a", "nobody", "b", "a", "gone"]
    with pytest.raises(PublishRejected, match="nobody") as raised:
        transport.publish_many(
            [
                ("x", key, ModelRequest(round=0, participant_id=f"{key}{i}"))
                for i, key in enumerate(keys)
            ]
        )
    assert raised.value.returned == (("x", "nobody"), ("x", "gone"))
    assert transport.published == keys
    assert _waiting(transport, "a") == ["a0", "a3"]
    assert _waiting(transport, "b") == ["b2"]
