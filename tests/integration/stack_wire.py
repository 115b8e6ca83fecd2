"""Test-side access to the wire of the running stack (the harness of
tests/integration/stack.py; DESIGN.md section 5, the topology):

- :class:`DirectTap` puts the test between the aggregator and chosen participants on
  ``fedrank.direct`` (to kill a participant exactly when a phase opens for it, or just to
  watch what it is sent) and keeps a copy of every submission (for replays);
- :func:`bindings` lists a vhost's bindings (``rabbitmqctl``);
- :func:`declare_core_topology` declares the exchanges and the aggregator's queue, so
  participants can start before the aggregator.

Tests may use pika directly; the project's packages may not (only broker/rabbitmq.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from tests.integration.stack import run_rabbitmqctl


class DirectTap:
    """Puts the test between the aggregator and chosen participants on ``fedrank.direct``.

    For each victim ``participant id -> kind`` (None: only watch), the victim's queue is
    unbound from ``fedrank.direct`` and a tap queue bound with its routing key; a thread
    forwards every message the aggregator sends it to its queue (default exchange), until
    the first message of ``kind`` (e.g. ``secagg-masked-input-request``): then
    ``on_drop(victim)`` runs (the test kills the victim's process) and nothing more is
    forwarded. So a victim is killed exactly in the phase that message opens, however fast
    the protocol runs. Also keeps a copy of everything the participants submit
    (``submitted``), for replays. Install it before the aggregator starts and after the
    victims bound their queues (:func:`wait_bound`).
    """

    def __init__(
        self,
        amqp_url: str,
        victims: dict[str, str | None],
        on_drop: Callable[[str], None],
    ) -> None:
        import pika  # tests may use pika directly; the project's packages may not

        self._pika = pika
        self.victims = dict(victims)
        self.on_drop = on_drop
        #: victim -> the round in which it was dropped
        self.dropped: dict[str, int] = {}
        #: (kind, round) of every message forwarded to each victim, in order
        self.forwarded: dict[str, list[tuple[str, int]]] = {v: [] for v in victims}
        self.submitted: list[bytes] = []
        self._parameters = pika.URLParameters(amqp_url)
        self._stop = False
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def _tap_queue(self, victim: str) -> str:
        return f"test.tap.{victim}"

    def install(self) -> None:
        from broker.topology import (
            DIRECT_EXCHANGE,
            SUBMIT_EXCHANGE,
            SUBMIT_ROUTING_KEY,
            participant_queue,
        )

        connection = self._pika.BlockingConnection(self._parameters)
        channel = connection.channel()
        for victim in self.victims:
            channel.queue_declare(self._tap_queue(victim), durable=False, auto_delete=False)
            channel.queue_bind(self._tap_queue(victim), DIRECT_EXCHANGE, routing_key=victim)
            channel.queue_unbind(participant_queue(victim), DIRECT_EXCHANGE, routing_key=victim)
        channel.queue_declare("test.tap.submitted", durable=False)
        channel.queue_bind("test.tap.submitted", SUBMIT_EXCHANGE, routing_key=SUBMIT_ROUTING_KEY)
        self._thread = threading.Thread(target=self._forward, args=(channel,), daemon=True)
        self._thread.start()

    def _forward(self, channel: Any) -> None:
        from broker.codec import DecodeError, decode
        from broker.topology import participant_queue

        def on_message(victim: str) -> Callable[..., None]:
            def handle(_ch: Any, method: Any, properties: Any, body: bytes) -> None:
                channel.basic_ack(method.delivery_tag)
                if victim in self.dropped:
                    return
                try:
                    message = decode(body)
                    kind, round_number = message.kind, message.round
                except DecodeError:
                    kind, round_number = "undecodable", -1
                if kind == self.victims[victim]:
                    self.dropped[victim] = round_number
                    self.on_drop(victim)
                    return
                self.forwarded[victim].append((kind, round_number))
                channel.basic_publish("", participant_queue(victim), body, properties)

            return handle

        def on_submitted(_ch: Any, method: Any, _properties: Any, body: bytes) -> None:
            channel.basic_ack(method.delivery_tag)
            self.submitted.append(body)

        try:
            for victim in self.victims:
                channel.basic_consume(self._tap_queue(victim), on_message(victim))
            channel.basic_consume("test.tap.submitted", on_submitted)
            connection = channel.connection
            while not self._stop:
                connection.process_data_events(time_limit=0.05)
            connection.close()
        except BaseException as exc:  # reported by close()
            self._error = exc

    def close(self) -> None:
        self._stop = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._error is not None:
            raise AssertionError(f"the direct tap failed: {self._error!r}") from self._error


def bindings(vhost: str) -> set[tuple[str, str, str]]:
    """(exchange, queue, routing key) of every binding in ``vhost``."""
    out = run_rabbitmqctl(
        "list_bindings", "-p", vhost, "source_name", "destination_name", "routing_key"
    )
    found = set()
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[0]:
            found.add((parts[0], parts[1], parts[2]))
    return found


def declare_core_topology(amqp_url: str) -> None:
    """Declare the exchanges and the aggregator's queue, as the aggregator will: lets
    participants start (and ask for the model) before the aggregator does."""
    from broker.rabbitmq import RabbitMQSettings, RabbitMQTransport
    from broker.topology import declare_core

    transport = RabbitMQTransport(RabbitMQSettings.from_url(amqp_url))
    try:
        declare_core(transport)
    finally:
        transport.close()
