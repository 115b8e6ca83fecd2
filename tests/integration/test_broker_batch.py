"""RabbitMQ-only behaviour of ``publish_many`` (broker/rabbitmq.py, the transactional
batch channel): after the connection is lost, the next batch reconnects, reopens the
channel in tx mode and is delivered whole, in order. The batch contract shared with the
in-memory broker is in test_broker_contract.py."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from broker.codec import decode
from broker.messages import ModelRequest
from broker.rabbitmq import RabbitMQSettings, RabbitMQTransport
from broker.topology import BindingSpec, ExchangeSpec, QueueSpec

pytestmark = pytest.mark.broker


def _settings(base: RabbitMQSettings, vhost: str) -> RabbitMQSettings:
    fields = {name: getattr(base, name) for name in base.__dataclass_fields__}
    return RabbitMQSettings(**{**fields, "vhost": vhost})  # type: ignore[arg-type]


def test_batch_after_a_lost_connection_reconnects_and_is_delivered_whole(
    rabbitmqctl: Callable[..., str], rabbitmq_settings: RabbitMQSettings, amqp_vhost: str
) -> None:
    prefix = f"t{uuid.uuid4().hex[:10]}"
    exchange = ExchangeSpec(f"{prefix}.x", "direct")
    queue = f"{prefix}.q"
    with RabbitMQTransport(_settings(rabbitmq_settings, amqp_vhost)) as transport:
        transport.declare_exchange(exchange)
        transport.declare_queue(QueueSpec(queue))
        transport.bind(BindingSpec(exchange.name, queue, "k"))

        def batch(tag: str) -> list[tuple[str, str, ModelRequest]]:
            return [
                (exchange.name, "k", ModelRequest(round=i, participant_id=tag)) for i in range(5)
            ]

        transport.publish_many(batch("before"))  # opens the transactional channel
        generation = transport.generation
        rabbitmqctl("close_all_connections", "-p", amqp_vhost, "--limit", "100", "test")
        transport.publish_many(batch("after"))
        assert transport.generation > generation
        received = []
        while (delivery := transport.get(queue, timeout=2)) is not None:
            message = decode(delivery.body)
            assert isinstance(message, ModelRequest)
            received.append((message.participant_id, message.round))
            transport.ack(delivery)
    # nothing was consumed before the loss, so each batch is there once, in order
    assert received == [(tag, i) for tag in ("before", "after") for i in range(5)]
