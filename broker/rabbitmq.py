"""The RabbitMQ transport over pika (DESIGN.md sections 5 and 7); the ONLY module that
imports pika.

- One ``pika.BlockingConnection`` per transport, one transport per thread (checked),
  with three channels: one publishes and declares, one consumes and acks, so that a
  refused publish (which closes its channel) leaves unacked deliveries valid, and one in
  transaction mode for batches (a channel is either in confirm or in tx mode).
- Publisher confirms (``confirm_delivery``), ``mandatory=True``, persistent messages
  (delivery mode 2; every queue of the topology is durable), ``user_id`` set to the login
  so the broker vouches for the sender.
- Batches (``publish_many``: a phase's fan-out) go out in one AMQP transaction:
  ``basic.publish`` x N then ``tx.commit``, one round trip per batch instead of one
  confirm per message (BlockingChannel waits for each confirm; it has no asynchronous
  confirms). Still ``mandatory`` and persistent: the broker sends ``basic.return`` for
  each unroutable item before ``commit-ok`` on the same channel, so the returns are
  collected when the commit returns and raised as one ``PublishRejected``. Measured in
  docs/architecture.md ("The wire").
- Consumption by ``basic_consume`` with manual acks and ``basic_qos(prefetch)``;
  deliveries are buffered and handed out by ``get`` (a pull interface for sans-I/O).
- Heartbeats: pika's blocking connection answers heartbeats only inside its own calls.
  ``get`` and ``keep_alive`` pump the connection; ``call_keeping_alive(work)`` runs a
  long computation in a worker thread while this thread keeps pumping, so a long
  cryptographic step cannot make the broker drop the connection.
- Reconnect: a lost connection is reopened with exponential backoff (with jitter),
  every declaration made through this transport is replayed and consumers restarted;
  an operation interrupted by the loss is retried once connected (publish is therefore
  at-least-once; receivers must tolerate duplicates). Deliveries from the lost
  connection cannot be acked any more (the broker redelivers them): acking one is a
  logged no-op.
- Every pika exception is translated here into ``broker.transport`` errors.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import pika
import pika.exceptions as pe

from broker.settings import RabbitMQSettings
from broker.topology import BindingSpec, ExchangeSpec, QueueSpec
from broker.transport import (
    AccessRefused,
    BrokerError,
    BrokerUnavailable,
    Delivery,
    NotFound,
    PublishRejected,
    TopologyMismatch,
    Transport,
    unroutable_items,
)

__all__ = ["RabbitMQSettings", "RabbitMQTransport"]

T = TypeVar("T")
logger = logging.getLogger("fedrank.broker")
_jitter = secrets.SystemRandom()


_Declaration = ExchangeSpec | QueueSpec | BindingSpec
_CONNECTION_LOST = (
    pe.AMQPConnectionError,  # includes ConnectionClosed, StreamLostError, heartbeat timeout
    pe.ConnectionWrongStateError,
    pe.ChannelWrongStateError,
    ConnectionError,
    OSError,
)


def _translate_closed(code: int, text: str) -> BrokerError:
    if code in (403, 530):
        return AccessRefused(f"access refused ({code}): {text}")
    if code == 404:
        return NotFound(f"not found ({code}): {text}")
    if code == 406 and "size" in text:
        return PublishRejected(f"message refused ({code}): {text}")
    if code == 406:
        return TopologyMismatch(f"precondition failed ({code}): {text}")
    return BrokerError(f"channel closed by broker ({code}): {text}")


class RabbitMQTransport(Transport):
    """A transport over one pika blocking connection; connects on construction."""

    def __init__(self, settings: RabbitMQSettings) -> None:
        self.settings = settings
        self._thread = threading.get_ident()
        self._declared: list[_Declaration] = []
        self._consuming: list[str] = []
        self._buffers: dict[str, collections.deque[Delivery]] = {}
        self._generation = 0
        self._connection: Any = None
        self._publisher: Any = None  # confirm mode; publishes and declarations
        self._consumer: Any = None  # qos, consumers, acks
        self._batcher: Any = None  # tx mode; publish_many
        self._returned: list[tuple[str, str]] = []  # basic.return seen on the batcher
        self._closed = False
        self._connect_with_backoff()

    # -- connection management -------------------------------------------------------
    # Two channels, so that a publish or declaration the broker refuses (which closes
    # its channel) does not void the unacked deliveries of the consuming channel.

    def _parameters(self) -> Any:
        s = self.settings
        return pika.ConnectionParameters(
            host=s.host,
            port=s.port,
            virtual_host=s.vhost,
            credentials=pika.PlainCredentials(s.username, s.password),
            heartbeat=s.heartbeat,
            blocked_connection_timeout=s.blocked_connection_timeout,
            socket_timeout=s.socket_timeout,
            connection_attempts=1,
        )

    def _connect_once(self) -> None:
        try:
            self._connection = pika.BlockingConnection(self._parameters())
        except (pe.ProbableAuthenticationError, pe.AuthenticationError) as exc:
            raise AccessRefused(f"login refused for {self.settings.username!r}: {exc!r}") from exc
        except pe.ProbableAccessDeniedError as exc:
            raise AccessRefused(
                f"{self.settings.username!r} may not use vhost {self.settings.vhost!r}: {exc!r}"
            ) from exc
        except pe.ConnectionClosedByBroker as exc:
            if exc.reply_code in (403, 530):
                raise AccessRefused(f"connection refused: {exc!r}") from exc
            raise
        self._open_channels()

    def _open_publisher(self) -> None:
        """Open the publishing channel and replay every declaration made so far."""
        self._publisher = self._connection.channel()
        self._publisher.confirm_delivery()
        for declaration in self._declared:
            self._apply(declaration)

    def _open_consumer(self) -> None:
        """Open the consuming channel and restart consumers; older deliveries go stale."""
        self._generation += 1
        self._buffers = {queue: collections.deque() for queue in self._consuming}
        self._consumer = self._connection.channel()
        self._consumer.basic_qos(prefetch_count=self.settings.prefetch)
        for queue in self._consuming:
            self._start_consumer(queue)

    def _open_batcher(self) -> None:
        """Open the transactional publishing channel; it records what is returned."""
        self._batcher = self._connection.channel()
        self._batcher.tx_select()
        self._batcher.add_on_return_callback(
            lambda _channel, method, _properties, _body: self._returned.append(
                (method.exchange, method.routing_key)
            )
        )

    def _open_channels(self) -> None:
        try:
            if self._publisher is None or not self._publisher.is_open:
                self._open_publisher()
            if self._consumer is None or not self._consumer.is_open:
                self._open_consumer()
            if self._batcher is not None and not self._batcher.is_open:
                self._batcher = None  # reopened by the next batch
        except pe.ChannelClosedByBroker as exc:
            self._forget_closed_channels()
            raise _translate_closed(exc.reply_code, exc.reply_text) from exc

    def _forget_closed_channels(self) -> None:
        if self._publisher is not None and not self._publisher.is_open:
            self._publisher = None
        if self._consumer is not None and not self._consumer.is_open:
            self._consumer = None
        if self._batcher is not None and not self._batcher.is_open:
            self._batcher = None

    def _connect_with_backoff(self) -> None:
        delay = self.settings.reconnect_initial_delay
        last: BaseException | None = None
        for attempt in range(1, self.settings.reconnect_attempts + 1):
            try:
                self._connect_once()
                if attempt > 1 or self._generation > 1:
                    logger.info(
                        "connected to %s:%d vhost %s (attempt %d), %d declarations replayed",
                        self.settings.host,
                        self.settings.port,
                        self.settings.vhost,
                        attempt,
                        len(self._declared),
                    )
                return
            except _CONNECTION_LOST as exc:
                last = exc
                self._drop_connection()
                logger.warning("broker connection attempt %d failed: %r", attempt, exc)
                if attempt < self.settings.reconnect_attempts:
                    time.sleep(delay * _jitter.uniform(0.5, 1.0))
                    delay = min(delay * 2, self.settings.reconnect_max_delay)
            except pe.AMQPError as exc:
                self._drop_connection()
                raise BrokerError(f"cannot set up the broker connection: {exc!r}") from exc
        raise BrokerUnavailable(
            f"no broker at {self.settings.host}:{self.settings.port} vhost "
            f"{self.settings.vhost!r} after {self.settings.reconnect_attempts} attempts: {last!r}"
        )

    def _drop_connection(self) -> None:
        connection, self._connection = self._connection, None
        self._publisher = self._consumer = self._batcher = None
        if connection is not None and connection.is_open:
            try:
                connection.close()
            except Exception:  # already broken: nothing else to release
                logger.debug("closing a broken connection failed", exc_info=True)

    def _check(self) -> None:
        if threading.get_ident() != self._thread:
            raise BrokerError("a RabbitMQTransport is used only by the thread that made it")
        if self._closed:
            raise BrokerUnavailable("transport is closed")

    def _run(self, operation: Callable[[], T], *, retry: bool = True) -> T | None:
        """Run ``operation`` on live channels, translating pika errors; on a lost
        connection, reconnect (replaying topology) and retry it if ``retry``."""
        self._check()
        for _ in range(2):
            try:
                if self._connection is None or not self._connection.is_open:
                    self._connect_with_backoff()
                else:
                    self._open_channels()
                return operation()
            except pe.UnroutableError as exc:
                raise PublishRejected(f"unroutable (mandatory): {exc!r}") from exc
            except pe.NackError as exc:
                raise PublishRejected(f"nacked by the broker: {exc!r}") from exc
            except pe.ChannelClosedByBroker as exc:
                self._forget_closed_channels()
                raise _translate_closed(exc.reply_code, exc.reply_text) from exc
            except pe.ConnectionClosedByBroker as exc:
                self._drop_connection()
                if exc.reply_code in (403, 530):
                    raise AccessRefused(f"connection closed: {exc!r}") from exc
                logger.warning("broker closed the connection: %r; reconnecting", exc)
            except _CONNECTION_LOST as exc:
                self._drop_connection()
                logger.warning("broker connection lost: %r; reconnecting", exc)
            except pe.AMQPError as exc:  # anything else pika raises stays behind this edge
                self._forget_closed_channels()
                raise BrokerError(f"broker operation failed: {exc!r}") from exc
            if not retry:
                self._connect_with_backoff()
                return None
        raise BrokerUnavailable("connection lost again right after reconnecting")

    # -- declarations -----------------------------------------------------------------

    def _apply(self, declaration: _Declaration) -> None:
        channel = self._publisher
        if isinstance(declaration, ExchangeSpec):
            channel.exchange_declare(
                exchange=declaration.name,
                exchange_type=declaration.type,
                durable=declaration.durable,
            )
        elif isinstance(declaration, QueueSpec):
            channel.queue_declare(
                queue=declaration.name,
                durable=declaration.durable,
                arguments=declaration.argument_map() or None,
            )
        else:
            channel.queue_bind(
                queue=declaration.queue,
                exchange=declaration.exchange,
                routing_key=declaration.routing_key,
            )

    def _declare(self, declaration: _Declaration) -> None:
        self._run(lambda: self._apply(declaration))
        if declaration not in self._declared:
            self._declared.append(declaration)

    def declare_exchange(self, spec: ExchangeSpec) -> None:
        self._declare(spec)

    def declare_queue(self, spec: QueueSpec) -> None:
        self._declare(spec)

    def bind(self, binding: BindingSpec) -> None:
        self._declare(binding)

    # -- publish ----------------------------------------------------------------------

    def _properties(self) -> Any:
        return pika.BasicProperties(
            delivery_mode=pika.DeliveryMode.Persistent,
            content_type="application/msgpack",
            user_id=self.settings.username,
        )

    def publish_bytes(self, exchange: str, routing_key: str, body: bytes) -> None:
        properties = self._properties()
        self._run(
            lambda: self._publisher.basic_publish(
                exchange=exchange,
                routing_key=routing_key,
                body=body,
                properties=properties,
                mandatory=True,
            )
        )

    def publish_many_bytes(self, items: Sequence[tuple[str, str, bytes]]) -> None:
        if not items:
            return
        properties = self._properties()

        def publish_batch() -> list[tuple[str, str]]:
            # a batch interrupted by a lost connection is rolled back or not: _run
            # retries it whole, receivers drop duplicates
            if self._batcher is None:
                self._open_batcher()
            self._returned = []
            for exchange, routing_key, body in items:
                self._batcher.basic_publish(
                    exchange=exchange,
                    routing_key=routing_key,
                    body=body,
                    properties=properties,
                    mandatory=True,
                )
            self._batcher.tx_commit()
            # the returns arrived before commit-ok; dispatch their callbacks now
            self._connection.process_data_events(time_limit=0)
            return self._returned

        returned = self._run(publish_batch)
        if returned:
            raise unroutable_items(returned)

    # -- consume ----------------------------------------------------------------------

    def _start_consumer(self, queue: str) -> None:
        generation = self._generation
        buffer = self._buffers.setdefault(queue, collections.deque())

        def on_message(_channel: Any, method: Any, properties: Any, body: bytes) -> None:
            buffer.append(
                Delivery(
                    queue=queue,
                    body=body,
                    tag=method.delivery_tag,
                    redelivered=bool(method.redelivered),
                    user_id=properties.user_id,
                    generation=generation,
                )
            )

        self._consumer.basic_consume(queue=queue, on_message_callback=on_message, auto_ack=False)

    def _ensure_consuming(self, queue: str) -> None:
        if queue in self._consuming:
            return
        self._run(lambda: self._start_consumer(queue))
        self._consuming.append(queue)

    def get(self, queue: str, timeout: float = 0.0) -> Delivery | None:
        self._ensure_consuming(queue)
        deadline = time.monotonic() + timeout
        while True:
            buffer = self._buffers.get(queue)
            if buffer:
                return buffer.popleft()
            remaining = deadline - time.monotonic()
            self.keep_alive(time_limit=max(0.0, min(remaining, 1.0)))
            if remaining <= 0 and not self._buffers.get(queue):
                return None

    def _settle(self, delivery: Delivery, requeue: bool | None) -> None:
        """Ack (``requeue`` None) or nack a delivery, unless its channel is gone."""

        def settle() -> None:
            # checked after _run reopened what was closed: a delivery of an older
            # consuming channel cannot be settled; the broker redelivers it
            if delivery.generation != self._generation:
                logger.info(
                    "%s of a delivery from a closed channel skipped (queue %s): the broker "
                    "redelivers it",
                    "ack" if requeue is None else "reject",
                    delivery.queue,
                )
            elif requeue is None:
                self._consumer.basic_ack(delivery.tag)
            else:
                self._consumer.basic_nack(delivery.tag, requeue=requeue)

        self._run(settle, retry=False)

    def ack(self, delivery: Delivery) -> None:
        self._settle(delivery, None)

    def reject(self, delivery: Delivery, *, requeue: bool) -> None:
        self._settle(delivery, requeue)

    # -- liveness ---------------------------------------------------------------------

    def keep_alive(self, time_limit: float = 0.0) -> None:
        self._run(lambda: self._connection.process_data_events(time_limit=time_limit))

    def call_keeping_alive(self, work: Callable[[], T]) -> T:
        self._check()
        connection = self._connection
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            future = pool.submit(work)
            if connection is not None:
                # wake process_data_events as soon as the work is done
                future.add_done_callback(lambda _f: _call_threadsafe(connection, lambda: None))
            while not future.done():
                self.keep_alive(time_limit=1.0)
            return future.result()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._drop_connection()

    @property
    def generation(self) -> int:
        """Increases each time the channel or connection is reopened."""
        return self._generation


def _call_threadsafe(connection: Any, callback: Callable[[], None]) -> None:
    try:
        connection.add_callback_threadsafe(callback)
    except Exception:  # connection closed meanwhile: the pump loop will notice
        logger.debug("could not wake the connection", exc_info=True)
