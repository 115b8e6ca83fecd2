"""The transport interface under the protocol (DESIGN.md sections 1, 5 and 7).

A :class:`Transport` moves encoded messages between exchanges and queues. It is a
*pull* interface so that a sans-I/O protocol core can be driven by a plain loop that
owns the clock: ``get(queue, timeout)`` returns the next :class:`Delivery` (or ``None``),
the loop decodes and hands it to the core with ``now``, publishes what the core returns,
then ``ack``s the delivery (``broker/receive.py`` is that step). Acks are manual and come
only after the message is handled, so nothing valid is lost when a process dies.

Two implementations: ``broker/rabbitmq.py`` (pika, the only module importing it) and
``broker/memory.py`` (in-process, for the simulation and unit tests). Both encode on
publish and return raw bytes on get, so the codec's size and schema checks always run.

Errors are translated at the implementation's edge into the types below; no pika
exception escapes the broker package.

``publish_many`` sends a batch (one phase's fan-out, one message per member) with one
confirmation for the whole batch where the broker allows it (RabbitMQ: a transaction,
see ``broker/rabbitmq.py``); every item is encoded before anything is sent.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from broker.codec import WireMessage, encode
from broker.topology import BindingSpec, ExchangeSpec, QueueSpec

T = TypeVar("T")


class BrokerError(Exception):
    """Base of every error a transport raises."""


class BrokerUnavailable(BrokerError):
    """The broker cannot be reached (after the reconnect attempts, if any)."""


class PublishRejected(BrokerError):
    """The broker did not take a message: unroutable (``mandatory``), nacked, too large.

    From ``publish_many``: ``returned`` lists the ``(exchange, routing_key)`` of the items
    the broker returned as unroutable, every other item of the batch was taken; empty
    ``returned`` means the batch was refused as a whole (nothing of it was taken).
    """

    def __init__(self, message: str, *, returned: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(message)
        self.returned = returned


def unroutable_items(returned: Sequence[tuple[str, str]]) -> PublishRejected:
    """The error for a batch of which ``returned`` items were unroutable."""
    named = ", ".join(f"{exchange!r}/{key!r}" for exchange, key in returned)
    return PublishRejected(
        f"unroutable (mandatory): {len(returned)} item(s) of the batch, exchange/routing key "
        f"{named}",
        returned=tuple(returned),
    )


class AccessRefused(BrokerError):
    """The credentials do not allow this operation (AMQP 403, or login refused)."""


class NotFound(BrokerError):
    """An exchange or queue named by the operation does not exist (AMQP 404)."""


class TopologyMismatch(BrokerError):
    """A declaration conflicts with what exists (AMQP 406 PRECONDITION_FAILED)."""


@dataclass(frozen=True, slots=True)
class Delivery:
    """One message taken from a queue, not yet acknowledged.

    ``user_id`` is the publisher's user name as validated by the broker (RabbitMQ checks
    the ``user_id`` property against the connection's login), or ``None`` if unset.
    ``generation`` identifies the connection/channel that delivered it: after a
    reconnect, older deliveries can no longer be acked (the broker redelivers them).
    """

    queue: str
    body: bytes
    tag: int
    redelivered: bool
    user_id: str | None
    generation: int = 0


class Transport(ABC):
    """A connection to a broker. Not thread-safe: one transport per thread."""

    @abstractmethod
    def declare_exchange(self, spec: ExchangeSpec) -> None: ...

    @abstractmethod
    def declare_queue(self, spec: QueueSpec) -> None: ...

    @abstractmethod
    def bind(self, binding: BindingSpec) -> None: ...

    @abstractmethod
    def publish_bytes(self, exchange: str, routing_key: str, body: bytes) -> None:
        """Publish already-encoded bytes: persistent, ``mandatory``, confirmed.

        Returns once the broker has taken the message; raises :class:`PublishRejected`
        if no queue was bound to receive it or the broker refused it.
        """

    def publish(self, exchange: str, routing_key: str, message: WireMessage) -> None:
        """Encode ``message`` (its size cap applies) and publish it."""
        self.publish_bytes(exchange, routing_key, encode(message))

    def publish_many(self, items: Sequence[tuple[str, str, WireMessage]]) -> None:
        """Publish ``(exchange, routing_key, message)`` items, in order.

        Every message is encoded first, so one above its size cap raises ``EncodeError``
        before anything is sent. Unroutable items raise one :class:`PublishRejected`
        naming them (``returned``) after the others were taken.
        """
        encoded = [(exchange, key, encode(message)) for exchange, key, message in items]
        self.publish_many_bytes(encoded)

    def publish_many_bytes(self, items: Sequence[tuple[str, str, bytes]]) -> None:
        """Publish already-encoded items, as ``publish_many``. This default publishes
        (and is confirmed) one item at a time; transports override it to batch."""
        returned: list[tuple[str, str]] = []
        for exchange, routing_key, body in items:
            try:
                self.publish_bytes(exchange, routing_key, body)
            except PublishRejected:
                returned.append((exchange, routing_key))
        if returned:
            raise unroutable_items(returned)

    @abstractmethod
    def get(self, queue: str, timeout: float = 0.0) -> Delivery | None:
        """The next delivery from ``queue``, waiting up to ``timeout`` seconds, or None.

        At most ``prefetch`` deliveries per queue are outstanding (unacked) at a time.
        """

    @abstractmethod
    def ack(self, delivery: Delivery) -> None:
        """The message is handled: the broker forgets it."""

    @abstractmethod
    def reject(self, delivery: Delivery, *, requeue: bool) -> None:
        """The message was not handled: requeue it (redelivered later) or drop it."""

    @abstractmethod
    def keep_alive(self, time_limit: float = 0.0) -> None:
        """Service the connection (heartbeats, incoming deliveries) for up to
        ``time_limit`` seconds. Call it from long loops that do not call ``get``."""

    def call_keeping_alive(self, work: Callable[[], T]) -> T:
        """Run ``work()`` (e.g. a long cryptographic step) while keeping the connection
        alive; returns its result or raises its exception."""
        return work()

    @abstractmethod
    def close(self) -> None:
        """Close the connection; unacked deliveries go back to their queues."""

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
