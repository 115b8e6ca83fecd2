"""One behaviour, two transports: the in-memory broker and RabbitMQ (through pika) must
route, confirm, ack, redeliver and reject alike (broker/transport.py)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator

import msgpack
import pytest

from broker.codec import EncodeError, WireMessage, decode, encode
from broker.memory import MemoryBroker
from broker.messages import ModelAnnouncement, ModelRequest, PhaseDeadlines, RoundParameters
from broker.rabbitmq import RabbitMQSettings, RabbitMQTransport
from broker.receive import Expectation, Outcome, receive_one
from broker.topology import BindingSpec, ExchangeSpec, QueueSpec
from broker.transport import (
    Delivery,
    NotFound,
    PublishRejected,
    TopologyMismatch,
    Transport,
)

Connect = Callable[..., Transport]


@pytest.fixture(params=["memory", pytest.param("rabbitmq", marks=pytest.mark.broker)])
def connect(request: pytest.FixtureRequest) -> Iterator[Connect]:
    """``connect(prefetch=16) -> Transport`` on a broker private to the test session."""
    opened: list[Transport] = []
    if request.param == "memory":
        broker = MemoryBroker()

        def connect_memory(prefetch: int = 16) -> Transport:
            transport = broker.connect("guest", prefetch=prefetch)
            opened.append(transport)
            return transport

        yield connect_memory
    else:
        settings: RabbitMQSettings = request.getfixturevalue("rabbitmq_settings")

        def connect_rabbitmq(prefetch: int = 16) -> Transport:
            transport = RabbitMQTransport(
                RabbitMQSettings(**{**_fields(settings), "prefetch": prefetch})
            )
            opened.append(transport)
            return transport

        yield connect_rabbitmq
    for transport in opened:
        transport.close()


def _fields(settings: RabbitMQSettings) -> dict[str, object]:
    return {name: getattr(settings, name) for name in settings.__dataclass_fields__}


@pytest.fixture()
def names() -> Callable[[str], str]:
    """Unique exchange/queue names per test (tests share one vhost)."""
    prefix = f"t{uuid.uuid4().hex[:10]}"
    return lambda name: f"{prefix}.{name}"


ANNOUNCEMENT = ModelAnnouncement(
    round=0,
    model_version=1,
    spec="firefox-2018",
    weights=(4.0,),
    params=RoundParameters(
        cohort_size=3,
        quorum=2,
        deadlines=PhaseDeadlines(
            check_in=1.0, share_keys=2.0, masked_input=3.0, consistency_check=4.0, unmask=5.0
        ),
    ),
)


def _request(pid: str, round_: int = 0) -> ModelRequest:
    return ModelRequest(round=round_, participant_id=pid)


def _queue_with_binding(
    transport: Transport, exchange: ExchangeSpec, queue: str, key: str = ""
) -> None:
    transport.declare_exchange(exchange)
    transport.declare_queue(QueueSpec(queue))
    transport.bind(BindingSpec(exchange.name, queue, key))


def _get(transport: Transport, queue: str) -> Delivery:
    delivery = transport.get(queue, timeout=5)
    assert delivery is not None, f"nothing arrived on {queue}"
    return delivery


def test_published_message_arrives_decoded_with_sender(connect: Connect, names) -> None:
    transport = connect()
    exchange = ExchangeSpec(names("x"), "direct")
    _queue_with_binding(transport, exchange, names("q"), "k")
    transport.publish(exchange.name, "k", _request("p1", 7))
    delivery = _get(transport, names("q"))
    assert decode(delivery.body) == _request("p1", 7)
    assert delivery.user_id == "guest"
    assert not delivery.redelivered
    transport.ack(delivery)
    assert transport.get(names("q"), timeout=0.2) is None


def test_direct_routes_by_key_and_fanout_to_queues_bound_at_publish(
    connect: Connect, names
) -> None:
    transport = connect()
    direct = ExchangeSpec(names("direct"), "direct")
    fanout = ExchangeSpec(names("fanout"), "fanout")
    _queue_with_binding(transport, direct, names("a"), "a")
    _queue_with_binding(transport, direct, names("b"), "b")
    transport.declare_exchange(fanout)
    transport.bind(BindingSpec(fanout.name, names("a")))
    transport.publish(direct.name, "b", _request("to-b"))
    transport.publish(fanout.name, "", _request("early"))
    transport.bind(BindingSpec(fanout.name, names("b")))  # bound after the fanout
    transport.publish(fanout.name, "", _request("late"))
    got_a = [decode(_get(transport, names("a")).body) for _ in range(2)]
    got_b = [decode(_get(transport, names("b")).body) for _ in range(2)]
    assert [m.participant_id for m in got_a] == ["early", "late"]  # type: ignore[attr-defined]
    assert [m.participant_id for m in got_b] == ["to-b", "late"]  # type: ignore[attr-defined]
    assert transport.get(names("a"), timeout=0.2) is None
    assert transport.get(names("b"), timeout=0.2) is None


def test_unroutable_message_is_rejected(connect: Connect, names) -> None:
    transport = connect()
    direct = ExchangeSpec(names("direct"), "direct")
    _queue_with_binding(transport, direct, names("q"), "known")
    with pytest.raises(PublishRejected):
        transport.publish(direct.name, "unknown", _request("p"))
    fanout = ExchangeSpec(names("fanout"), "fanout")
    transport.declare_exchange(fanout)
    with pytest.raises(PublishRejected):
        transport.publish(fanout.name, "", _request("p"))
    # the transport stays usable
    transport.publish(direct.name, "known", _request("p"))
    transport.ack(_get(transport, names("q")))


def test_missing_exchange_or_queue_is_not_found(connect: Connect, names) -> None:
    transport = connect()
    with pytest.raises(NotFound):
        transport.publish(names("nowhere"), "", _request("p"))
    with pytest.raises(NotFound):
        transport.get(names("no-queue"), timeout=0.2)


def test_conflicting_redeclaration_is_a_topology_mismatch(connect: Connect, names) -> None:
    transport = connect()
    transport.declare_exchange(ExchangeSpec(names("x"), "direct"))
    with pytest.raises(TopologyMismatch):
        transport.declare_exchange(ExchangeSpec(names("x"), "fanout"))
    transport.declare_queue(QueueSpec(names("q"), arguments=(("x-max-length", 5),)))
    with pytest.raises(TopologyMismatch):
        transport.declare_queue(QueueSpec(names("q"), arguments=(("x-max-length", 6),)))


def test_unacked_message_is_redelivered_after_the_consumer_closes(connect: Connect, names) -> None:
    first = connect()
    exchange = ExchangeSpec(names("x"), "direct")
    _queue_with_binding(first, exchange, names("q"), "k")
    first.publish(exchange.name, "k", _request("p"))
    taken = _get(first, names("q"))
    assert not taken.redelivered
    first.close()
    second = connect()
    again = _get(second, names("q"))
    assert again.redelivered
    assert again.body == taken.body
    second.ack(again)
    assert second.get(names("q"), timeout=0.2) is None


def test_a_refused_publish_leaves_unacked_deliveries_valid(connect: Connect, names) -> None:
    transport = connect()
    exchange = ExchangeSpec(names("x"), "direct")
    _queue_with_binding(transport, exchange, names("q"), "k")
    transport.publish(exchange.name, "k", _request("p"))
    held = _get(transport, names("q"))
    with pytest.raises(NotFound):
        transport.publish(names("missing"), "k", _request("p"))
    with pytest.raises(PublishRejected):
        transport.publish(exchange.name, "nobody", _request("p"))
    transport.ack(held)
    transport.close()
    assert connect().get(names("q"), timeout=0.3) is None  # acked, not redelivered


def test_reject_requeues_or_drops(connect: Connect, names) -> None:
    transport = connect()
    exchange = ExchangeSpec(names("x"), "direct")
    _queue_with_binding(transport, exchange, names("q"), "k")
    transport.publish(exchange.name, "k", _request("p"))
    transport.reject(_get(transport, names("q")), requeue=True)
    again = _get(transport, names("q"))
    assert again.redelivered
    transport.reject(again, requeue=False)
    assert transport.get(names("q"), timeout=0.3) is None


def test_prefetch_bounds_unacked_deliveries(connect: Connect, names) -> None:
    transport = connect(prefetch=1)
    exchange = ExchangeSpec(names("x"), "direct")
    _queue_with_binding(transport, exchange, names("q"), "k")
    for i in range(2):
        transport.publish(exchange.name, "k", _request(f"p{i}"))
    first = _get(transport, names("q"))
    assert transport.get(names("q"), timeout=0.3) is None
    transport.ack(first)
    second = _get(transport, names("q"))
    assert decode(second.body) == _request("p1")
    transport.ack(second)


def test_bad_input_is_acked_away_and_logged_while_good_input_is_handled(
    connect: Connect, names, caplog: pytest.LogCaptureFixture
) -> None:
    transport = connect()
    exchange = ExchangeSpec(names("x"), "direct")
    _queue_with_binding(transport, exchange, names("q"), "k")
    good_wire = encode(_request("p"))
    bad_inputs = {
        b"\xc1 not msgpack": "not a msgpack message envelope",
        good_wire[:-3]: "body is not valid msgpack",
        good_wire[:-1] + b"\xc1" * 2000: "exceeds its cap of 1024",
        msgpack.packb([1, "model-request", {"round": 0}]): "field 'participant_id'",
        msgpack.packb([9, "model-request", {}]): "protocol version 9 not supported",
        encode(ANNOUNCEMENT): "unexpected message kind 'model-announcement'",
        encode(_request("p", round_=3)): "round 3, current round is 0",
    }
    for body in bad_inputs:
        transport.publish_bytes(exchange.name, "k", body)
    transport.publish(exchange.name, "k", _request("good"))
    handled: list[WireMessage] = []
    expectation = Expectation(kinds=(ModelRequest,), round=0)
    with caplog.at_level(logging.WARNING, logger="fedrank.broker"):
        outcomes = [
            receive_one(
                transport, names("q"), lambda m, d: handled.append(m), expectation, timeout=5
            )
            for _ in range(len(bad_inputs) + 1)
        ]
    assert outcomes == [Outcome.REJECTED] * len(bad_inputs) + [Outcome.HANDLED]
    assert handled == [_request("good")]
    rejections = [r.getMessage() for r in caplog.records if r.name == "fedrank.broker"]
    assert len(rejections) == len(bad_inputs)
    for logged, (body, reason) in zip(rejections, bad_inputs.items(), strict=True):
        assert reason in logged
        assert f"({len(body)} bytes" in logged
    assert transport.get(names("q"), timeout=0.3) is None  # all acked away


def test_handler_failure_requeues_once_then_drops(connect: Connect, names) -> None:
    transport = connect()
    exchange = ExchangeSpec(names("x"), "direct")
    _queue_with_binding(transport, exchange, names("q"), "k")
    transport.publish(exchange.name, "k", _request("p"))
    expectation = Expectation(kinds=(ModelRequest,))

    def failing(message: WireMessage, delivery: Delivery) -> None:
        raise RuntimeError("handler bug")

    for _ in range(2):
        with pytest.raises(RuntimeError, match="handler bug"):
            receive_one(transport, names("q"), failing, expectation, timeout=5)
    assert transport.get(names("q"), timeout=0.3) is None


# --- publish_many: a phase's fan-out as one batch -----------------------------------------


def _ids(transport: Transport, queue: str) -> list[str]:
    """Participant ids of every ModelRequest waiting in ``queue``, acked, in order."""
    ids: list[str] = []
    while (delivery := transport.get(queue, timeout=0.3)) is not None:
        message = decode(delivery.body)
        assert isinstance(message, ModelRequest)
        ids.append(message.participant_id)
        transport.ack(delivery)
    return ids


def test_batch_is_delivered_in_order_per_queue(connect: Connect, names) -> None:
    transport = connect()
    exchange = ExchangeSpec(names("x"), "direct")
    _queue_with_binding(transport, exchange, names("a"), "a")
    _queue_with_binding(transport, exchange, names("b"), "b")
    keys = ["a", "b", "a", "a", "b", "a"]
    transport.publish_many(
        [(exchange.name, key, _request(f"{key}{i}")) for i, key in enumerate(keys)]
    )
    assert _ids(transport, names("a")) == ["a0", "a2", "a3", "a5"]
    assert _ids(transport, names("b")) == ["b1", "b4"]
    transport.publish_many([(exchange.name, "a", _request("again"))])
    delivery = _get(transport, names("a"))
    assert delivery.user_id == "guest"
    assert not delivery.redelivered


def test_batch_names_unroutable_items_and_delivers_the_others(connect: Connect, names) -> None:
    transport = connect()
    exchange = ExchangeSpec(names("x"), "direct")
    fanout = ExchangeSpec(names("fanout"), "fanout")
    _queue_with_binding(transport, exchange, names("a"), "a")
    transport.declare_exchange(fanout)
    batch = [
        (exchange.name, "a", _request("first")),
        (exchange.name, "nobody", _request("lost")),
        (fanout.name, "", _request("unbound")),
        (exchange.name, "a", _request("last")),
    ]
    with pytest.raises(PublishRejected, match="nobody") as raised:
        transport.publish_many(batch)
    assert raised.value.returned == ((exchange.name, "nobody"), (fanout.name, ""))
    assert _ids(transport, names("a")) == ["first", "last"]
    transport.publish_many([(exchange.name, "a", _request("after"))] * 2)  # still usable
    assert _ids(transport, names("a")) == ["after", "after"]


def test_batch_with_an_oversized_item_sends_nothing(connect: Connect, names) -> None:
    transport = connect()
    exchange = ExchangeSpec(names("x"), "direct")
    _queue_with_binding(transport, exchange, names("a"), "a")
    oversized = ANNOUNCEMENT.model_copy(update={"weights": (1.5,) * 20_000})
    with pytest.raises(EncodeError, match="above its cap"):
        transport.publish_many(
            [(exchange.name, "a", _request("before")), (exchange.name, "a", oversized)]
        )
    assert _ids(transport, names("a")) == []


def test_batch_to_a_missing_exchange_is_refused_whole(connect: Connect, names) -> None:
    transport = connect()
    exchange = ExchangeSpec(names("x"), "direct")
    _queue_with_binding(transport, exchange, names("a"), "a")
    transport.publish(exchange.name, "a", _request("held"))
    held = _get(transport, names("a"))
    with pytest.raises(NotFound):
        transport.publish_many(
            [(exchange.name, "a", _request("p")), (names("missing"), "a", _request("p"))]
        )
    transport.ack(held)  # the consuming side is unaffected
    assert _ids(transport, names("a")) == []
    transport.publish_many(
        [(exchange.name, "a", _request("p1")), (exchange.name, "a", _request("p2"))]
    )
    assert _ids(transport, names("a")) == ["p1", "p2"]
