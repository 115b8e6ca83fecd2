"""RabbitMQ-only behaviour of broker/rabbitmq.py: reconnect with topology replayed,
heartbeats kept alive during long work, error translation at the pika edge."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest

from broker.codec import decode
from broker.messages import ModelRequest
from broker.rabbitmq import RabbitMQSettings, RabbitMQTransport
from broker.topology import BindingSpec, ExchangeSpec, QueueSpec
from broker.transport import AccessRefused, BrokerUnavailable

pytestmark = pytest.mark.broker


@pytest.fixture()
def names() -> Callable[[str], str]:
    prefix = f"t{uuid.uuid4().hex[:10]}"
    return lambda name: f"{prefix}.{name}"


@pytest.fixture()
def fresh_vhost(amqp_vhost: str) -> str:
    """The session's vhost: tests run one at a time and close their transports, so when
    a test here closes every connection of the vhost, only its own are there. (A vhost
    per test would cost four rabbitmqctl runs, seconds each on a loaded machine.)"""
    return amqp_vhost


def _settings(base: RabbitMQSettings, **changes: object) -> RabbitMQSettings:
    fields = {name: getattr(base, name) for name in base.__dataclass_fields__}
    return RabbitMQSettings(**{**fields, **changes})  # type: ignore[arg-type]


def test_reconnects_after_forced_close_and_redeclares_topology(
    rabbitmqctl: Callable[..., str],
    rabbitmq_settings: RabbitMQSettings,
    fresh_vhost: str,
    names: Callable[[str], str],
) -> None:
    with RabbitMQTransport(_settings(rabbitmq_settings, vhost=fresh_vhost)) as transport:
        exchange = ExchangeSpec(names("x"), "direct")
        transport.declare_exchange(exchange)
        transport.declare_queue(QueueSpec(names("q")))
        transport.bind(BindingSpec(exchange.name, names("q"), "k"))
        generation = transport.generation
        # the queue (and its binding) vanish, and the connection is closed under us
        rabbitmqctl("delete_queue", "-p", fresh_vhost, names("q"))
        rabbitmqctl("close_all_connections", "-p", fresh_vhost, "--limit", "100", "test")
        # publish is mandatory: it succeeds only if queue and binding were redeclared
        transport.publish(exchange.name, "k", ModelRequest(round=1, participant_id="p"))
        assert transport.generation > generation
        delivery = transport.get(names("q"), timeout=5)
        assert delivery is not None
        assert decode(delivery.body) == ModelRequest(round=1, participant_id="p")
        transport.ack(delivery)


def test_ack_of_a_delivery_from_a_lost_connection_is_skipped_and_redelivered(
    rabbitmqctl: Callable[..., str],
    rabbitmq_settings: RabbitMQSettings,
    fresh_vhost: str,
    names: Callable[[str], str],
) -> None:
    with RabbitMQTransport(_settings(rabbitmq_settings, vhost=fresh_vhost)) as transport:
        exchange = ExchangeSpec(names("x"), "direct")
        transport.declare_exchange(exchange)
        transport.declare_queue(QueueSpec(names("q")))
        transport.bind(BindingSpec(exchange.name, names("q"), "k"))
        transport.publish(exchange.name, "k", ModelRequest(round=1, participant_id="p"))
        stale = transport.get(names("q"), timeout=5)
        assert stale is not None
        rabbitmqctl("close_all_connections", "-p", fresh_vhost, "--limit", "100", "test")
        again = transport.get(names("q"), timeout=5)  # reconnects; the broker redelivers
        assert again is not None and again.redelivered and again.body == stale.body
        transport.ack(stale)  # a no-op: its channel is gone
        transport.ack(again)
        assert transport.get(names("q"), timeout=0.3) is None


def _sleep_then(value: int, seconds: float) -> Callable[[], int]:
    def work() -> int:
        time.sleep(seconds)  # stands for a long cryptographic step that never yields
        return value

    return work


def test_heartbeats_are_kept_alive_during_long_work(
    rabbitmq_settings: RabbitMQSettings,
) -> None:
    with RabbitMQTransport(_settings(rabbitmq_settings, heartbeat=1)) as transport:
        generation = transport.generation
        assert transport.call_keeping_alive(_sleep_then(42, 4.0)) == 42
        transport.keep_alive()
        assert transport.generation == generation  # never reconnected


def test_without_keeping_alive_the_broker_drops_a_silent_connection(
    rabbitmq_settings: RabbitMQSettings,
) -> None:
    """The control for the test above: the same work without pumping loses the
    connection (heartbeat 1 s), and the transport reconnects on next use."""
    with RabbitMQTransport(_settings(rabbitmq_settings, heartbeat=1)) as transport:
        generation = transport.generation
        assert _sleep_then(42, 4.0)() == 42
        transport.keep_alive(0.5)
        transport.keep_alive()
        assert transport.generation > generation


def test_call_keeping_alive_propagates_the_works_exception(
    rabbitmq_settings: RabbitMQSettings,
) -> None:
    def failing() -> int:
        raise ValueError("crypto failed")

    with (
        RabbitMQTransport(rabbitmq_settings) as transport,
        pytest.raises(ValueError, match="crypto failed"),
    ):
        transport.call_keeping_alive(failing)


def test_unknown_vhost_or_user_is_access_refused(rabbitmq_settings: RabbitMQSettings) -> None:
    with pytest.raises(AccessRefused):
        RabbitMQTransport(_settings(rabbitmq_settings, vhost=f"missing-{uuid.uuid4().hex}"))
    with pytest.raises(AccessRefused):
        RabbitMQTransport(_settings(rabbitmq_settings, password="wrong"))


def test_no_broker_is_broker_unavailable_after_backoff(
    rabbitmq_settings: RabbitMQSettings,
) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    settings = _settings(
        rabbitmq_settings, port=closed_port, reconnect_attempts=3, reconnect_initial_delay=0.05
    )
    with pytest.raises(BrokerUnavailable, match="after 3 attempts"):
        RabbitMQTransport(settings)


def test_transport_refuses_use_from_another_thread(rabbitmq_settings: RabbitMQSettings) -> None:
    import threading

    from broker.transport import BrokerError

    errors: list[BaseException] = []
    with RabbitMQTransport(rabbitmq_settings) as transport:

        def use() -> None:
            try:
                transport.keep_alive()
            except BrokerError as exc:
                errors.append(exc)

        thread = threading.Thread(target=use)
        thread.start()
        thread.join()
    assert len(errors) == 1 and "thread" in str(errors[0])
