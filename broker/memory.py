"""An in-memory broker with RabbitMQ's routing semantics (DESIGN.md section 1: the same
code runs over RabbitMQ and over this, for the fast simulation and unit tests).

:class:`MemoryBroker` holds exchanges, queues and bindings; :meth:`MemoryBroker.connect`
returns a :class:`MemoryTransport`, one per user of the broker (thread or simulated
process). Semantics kept from RabbitMQ:

- fanout exchanges copy a message to every queue bound *at publish time*; direct
  exchanges to the queues bound with the exact routing key;
- ``mandatory``: a message no queue receives raises ``PublishRejected``; messages above
  the broker's ``max_message_bytes`` too (RabbitMQ's ``max_message_size``);
- ``publish_many`` behaves as RabbitMQ's transactional batch: a missing exchange or an
  item above the size limit refuses the whole batch (nothing routed); otherwise every
  routable item is delivered, in order, and the unroutable ones are named in one
  ``PublishRejected``;
- deliveries stay unacked until ``ack``; ``reject(requeue=True)`` and ``close`` put
  them back at the head of their queue, marked redelivered; at most ``prefetch``
  unacked deliveries per queue and connection;
- redeclaring with other properties raises ``TopologyMismatch``, naming a missing
  exchange or queue ``NotFound``.

Messages are stored as encoded bytes, so every message goes through the codec.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from broker.codec import GLOBAL_MAX_BYTES
from broker.topology import BindingSpec, ExchangeSpec, QueueSpec
from broker.transport import (
    BrokerError,
    BrokerUnavailable,
    Delivery,
    NotFound,
    PublishRejected,
    TopologyMismatch,
    Transport,
    unroutable_items,
)


@dataclass(slots=True)
class _Stored:
    body: bytes
    user_id: str | None
    redelivered: bool = False


@dataclass(slots=True)
class _Queue:
    spec: QueueSpec
    messages: deque[_Stored] = field(default_factory=deque)

    def append(self, stored: _Stored) -> None:
        self.messages.append(stored)
        max_length = self.spec.argument_map().get("x-max-length")
        if isinstance(max_length, int):
            while len(self.messages) > max_length:
                self.messages.popleft()


class MemoryBroker:
    """Shared broker state; thread-safe."""

    def __init__(self, max_message_bytes: int = GLOBAL_MAX_BYTES) -> None:
        self.max_message_bytes = max_message_bytes
        self._lock = threading.Condition()
        self._exchanges: dict[str, ExchangeSpec] = {}
        self._queues: dict[str, _Queue] = {}
        self._bindings: set[BindingSpec] = set()

    def connect(self, user: str = "guest", prefetch: int = 64) -> MemoryTransport:
        return MemoryTransport(self, user, prefetch)

    def queue_length(self, queue: str) -> int:
        """Ready (not delivered) messages in ``queue``."""
        with self._lock:
            return len(self._require_queue(queue).messages)

    def _require_queue(self, name: str) -> _Queue:
        queue = self._queues.get(name)
        if queue is None:
            raise NotFound(f"no queue {name!r}")
        return queue

    def _declare_exchange(self, spec: ExchangeSpec) -> None:
        with self._lock:
            existing = self._exchanges.setdefault(spec.name, spec)
            if existing != spec:
                raise TopologyMismatch(f"exchange {spec.name!r} exists as {existing}, not {spec}")

    def _declare_queue(self, spec: QueueSpec) -> None:
        with self._lock:
            existing = self._queues.setdefault(spec.name, _Queue(spec)).spec
            if existing != spec:
                raise TopologyMismatch(f"queue {spec.name!r} exists as {existing}, not {spec}")

    def _bind(self, binding: BindingSpec) -> None:
        with self._lock:
            if binding.exchange not in self._exchanges:
                raise NotFound(f"no exchange {binding.exchange!r}")
            self._require_queue(binding.queue)
            self._bindings.add(binding)

    def _route(self, exchange: str, routing_key: str, stored: _Stored) -> None:
        with self._lock:
            spec = self._exchanges.get(exchange)
            if spec is None:
                raise NotFound(f"no exchange {exchange!r}")
            if len(stored.body) > self.max_message_bytes:
                raise PublishRejected(
                    f"message of {len(stored.body)} bytes above the broker's max of "
                    f"{self.max_message_bytes}"
                )
            targets = sorted(
                b.queue
                for b in self._bindings
                if b.exchange == exchange
                and (spec.type == "fanout" or b.routing_key == routing_key)
            )
            if not targets:
                raise PublishRejected(
                    f"unroutable: no queue bound to {exchange!r} with key {routing_key!r}"
                )
            for name in targets:
                self._queues[name].append(_Stored(stored.body, stored.user_id))
            self._lock.notify_all()

    def _route_many(self, items: Sequence[tuple[str, str, bytes]], user_id: str) -> None:
        """Route a batch atomically: checked whole first (exchanges, sizes), then each
        routable item delivered; the unroutable ones raised together."""
        with self._lock:
            for exchange, _key, body in items:
                if exchange not in self._exchanges:
                    raise NotFound(f"no exchange {exchange!r} (batch refused)")
                if len(body) > self.max_message_bytes:
                    raise PublishRejected(
                        f"message of {len(body)} bytes above the broker's max of "
                        f"{self.max_message_bytes} (batch refused)"
                    )
            returned: list[tuple[str, str]] = []
            for exchange, key, body in items:
                try:
                    self._route(exchange, key, _Stored(bytes(body), user_id))
                except PublishRejected:
                    returned.append((exchange, key))
            if returned:
                raise unroutable_items(returned)

    def _take(self, queue: str, timeout: float, may_take: threading.Event) -> _Stored | None:
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                messages = self._require_queue(queue).messages
                if messages and may_take.is_set():
                    return messages.popleft()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._lock.wait(remaining)

    def _requeue(self, queue: str, stored: _Stored) -> None:
        with self._lock:
            target = self._queues.get(queue)
            if target is not None:
                target.messages.appendleft(_Stored(stored.body, stored.user_id, redelivered=True))
                self._lock.notify_all()

    def _wake(self) -> None:
        with self._lock:
            self._lock.notify_all()


class MemoryTransport(Transport):
    """One connection to a :class:`MemoryBroker`."""

    def __init__(self, broker: MemoryBroker, user: str, prefetch: int) -> None:
        if prefetch < 1:
            raise ValueError("prefetch must be at least 1")
        self._broker = broker
        self._user = user
        self._prefetch = prefetch
        self._tags = itertools.count(1)
        self._unacked: dict[int, tuple[str, _Stored]] = {}
        self._closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise BrokerUnavailable("transport is closed")

    def declare_exchange(self, spec: ExchangeSpec) -> None:
        self._check_open()
        self._broker._declare_exchange(spec)

    def declare_queue(self, spec: QueueSpec) -> None:
        self._check_open()
        self._broker._declare_queue(spec)

    def bind(self, binding: BindingSpec) -> None:
        self._check_open()
        self._broker._bind(binding)

    def publish_bytes(self, exchange: str, routing_key: str, body: bytes) -> None:
        self._check_open()
        self._broker._route(exchange, routing_key, _Stored(bytes(body), self._user))

    def publish_many_bytes(self, items: Sequence[tuple[str, str, bytes]]) -> None:
        self._check_open()
        self._broker._route_many(items, self._user)

    def _outstanding(self, queue: str) -> int:
        return sum(1 for name, _ in self._unacked.values() if name == queue)

    def get(self, queue: str, timeout: float = 0.0) -> Delivery | None:
        self._check_open()
        may_take = threading.Event()
        if self._outstanding(queue) < self._prefetch:
            may_take.set()
        stored = self._broker._take(queue, timeout, may_take)
        if stored is None:
            return None
        tag = next(self._tags)
        self._unacked[tag] = (queue, stored)
        return Delivery(queue, stored.body, tag, stored.redelivered, stored.user_id)

    def _settle(self, delivery: Delivery) -> tuple[str, _Stored]:
        self._check_open()
        settled = self._unacked.pop(delivery.tag, None)
        if settled is None:
            raise BrokerError(f"unknown delivery tag {delivery.tag} (already settled?)")
        return settled

    def ack(self, delivery: Delivery) -> None:
        self._settle(delivery)

    def reject(self, delivery: Delivery, *, requeue: bool) -> None:
        queue, stored = self._settle(delivery)
        if requeue:
            self._broker._requeue(queue, stored)

    def keep_alive(self, time_limit: float = 0.0) -> None:
        self._check_open()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for queue, stored in reversed(list(self._unacked.values())):
            self._broker._requeue(queue, stored)
        self._unacked.clear()
        self._broker._wake()
