"""Broker permissions of deploy/ definitions and broker.provision (DESIGN.md section 7):
a participant may only publish to fedrank.submit and read its own queue."""

from __future__ import annotations

import pytest

from broker.messages import ModelRequest
from broker.rabbitmq import RabbitMQSettings, RabbitMQTransport
from broker.topology import (
    DIRECT_EXCHANGE,
    MODEL_EXCHANGE,
    SUBMIT_EXCHANGE,
    SUBMIT_ROUTING_KEY,
    BindingSpec,
    QueueSpec,
    declare_core,
    participant_queue,
)
from broker.transport import AccessRefused, Transport

from .conftest import PrivateNode

pytestmark = pytest.mark.broker


def _request(participant_id: str) -> ModelRequest:
    return ModelRequest(round=0, participant_id=participant_id)


@pytest.fixture(scope="module")
def enrolled(private_rabbitmq: PrivateNode) -> dict[str, RabbitMQSettings]:
    return {
        "alice": private_rabbitmq.enroll("alice", "alice-secret"),
        "bob": private_rabbitmq.enroll("bob", "bob-secret"),
    }


@pytest.fixture()
def aggregator(private_rabbitmq: PrivateNode) -> Transport:
    transport = RabbitMQTransport(private_rabbitmq.aggregator_settings())
    declare_core(transport)
    yield transport
    transport.close()


def _drain(transport: Transport, queue: str) -> list[bytes]:
    bodies = []
    while (delivery := transport.get(queue, timeout=0.5)) is not None:
        transport.ack(delivery)
        bodies.append(delivery.body)
    return bodies


def test_participant_reads_own_queue_and_submits(
    enrolled: dict[str, RabbitMQSettings], aggregator: Transport
) -> None:
    _drain(aggregator, "fedrank.aggregator")
    with RabbitMQTransport(enrolled["alice"]) as alice:
        _drain(alice, participant_queue("alice"))
        alice.publish(SUBMIT_EXCHANGE, SUBMIT_ROUTING_KEY, _request("alice"))
        received = aggregator.get("fedrank.aggregator", timeout=5)
        assert received is not None
        assert received.user_id == "participant-alice"
        aggregator.ack(received)
        aggregator.publish(DIRECT_EXCHANGE, "alice", _request("alice"))
        aggregator.publish(MODEL_EXCHANGE, "", _request("everyone"))
        assert len(_drain(alice, participant_queue("alice"))) == 2
    with RabbitMQTransport(enrolled["bob"]) as bob:
        assert len(_drain(bob, participant_queue("bob"))) == 1  # the fanout only


def test_participant_cannot_publish_to_model_exchange(
    enrolled: dict[str, RabbitMQSettings],
) -> None:
    with RabbitMQTransport(enrolled["alice"]) as alice:
        with pytest.raises(AccessRefused):
            alice.publish(MODEL_EXCHANGE, "", _request("alice"))
        with pytest.raises(AccessRefused):
            alice.publish(DIRECT_EXCHANGE, "bob", _request("alice"))


def test_participant_cannot_read_another_participants_queue(
    enrolled: dict[str, RabbitMQSettings],
) -> None:
    with RabbitMQTransport(enrolled["alice"]) as alice:
        with pytest.raises(AccessRefused):
            alice.get(participant_queue("bob"), timeout=0.5)
        with pytest.raises(AccessRefused):
            alice.get("fedrank.aggregator", timeout=0.5)


def test_participant_cannot_declare_or_bind(enrolled: dict[str, RabbitMQSettings]) -> None:
    with RabbitMQTransport(enrolled["alice"]) as alice:
        with pytest.raises(AccessRefused):
            alice.bind(BindingSpec(DIRECT_EXCHANGE, participant_queue("alice"), "bob"))
        with pytest.raises(AccessRefused):
            alice.declare_queue(QueueSpec("fedrank.participant.alice2"))


def test_aggregator_cannot_read_participant_queue(
    enrolled: dict[str, RabbitMQSettings], aggregator: Transport
) -> None:
    with pytest.raises(AccessRefused):
        aggregator.get(participant_queue("alice"), timeout=0.5)


def test_wrong_password_is_refused(private_rabbitmq: PrivateNode) -> None:
    with pytest.raises(AccessRefused):
        RabbitMQTransport(private_rabbitmq.settings("participant-demo", "not-the-password"))


def test_shipped_demo_participant_can_connect(private_rabbitmq: PrivateNode) -> None:
    settings = private_rabbitmq.settings("participant-demo", "demo-dev-only")
    with RabbitMQTransport(settings) as demo:
        demo.publish(SUBMIT_EXCHANGE, SUBMIT_ROUTING_KEY, _request("demo"))
