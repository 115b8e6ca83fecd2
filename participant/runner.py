"""The participant runtime: N participant sessions over one broker connection
(DESIGN.md sections 1 and 5; the lead's decision "--count N participants in one process
over one connection, polling their N queues").

One thread, one :class:`broker.transport.Transport`. The loop takes deliveries from each
participant's queue ``fedrank.participant.<id>`` with ``broker.receive.receive_one``
(decode, size and schema checks, rejects logged and acked away), hands each message to
its :class:`participant.session.ParticipantSession`, publishes the replies to
``fedrank.submit`` and only then acks. Between polls it ticks the sessions (round
deadlines) and waits for the next delivery (:meth:`ParticipantRunner._idle`).

- **Start / late join**: with trusted credentials (any user not named
  ``participant-<id>``, e.g. the dev user guest) it declares the exchanges and each
  participant's queue and bindings (``broker.topology``); with per-participant
  credentials they exist already (``broker.provision``). Every session then sends a
  ``ModelRequest`` so that a participant joining mid-round gets the current model.
- **Reconnects**: the RabbitMQ transport reconnects by itself; when it reports a new
  connection generation, or gives up (``BrokerUnavailable``) and the runner opens a new
  transport with backoff, every session asks for the model again.
- **Stopping**: :meth:`ParticipantRunner.stop` (called from SIGTERM / SIGINT handlers)
  ends the loop after the current message; ``rounds`` ends it once every session has
  finished that many rounds.
- **What is sent is logged** on ``fedrank.participant``: kind and size in bytes, never
  contents; ``stats`` keeps the totals.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from broker.codec import EncodeError, WireMessage, encode
from broker.memory import MemoryTransport
from broker.messages import PARTICIPANT_INBOX_TYPES
from broker.receive import Expectation, Outcome, receive_one
from broker.topology import (
    SUBMIT_EXCHANGE,
    SUBMIT_ROUTING_KEY,
    declare_core,
    declare_participant,
    participant_queue,
)
from broker.transport import BrokerError, BrokerUnavailable, Delivery, PublishRejected, Transport
from participant.session import ParticipantSession

logger = logging.getLogger("fedrank.participant")

INBOX = Expectation(kinds=PARTICIPANT_INBOX_TYPES)


@dataclass(frozen=True, slots=True)
class RunnerConfig:
    """How the loop runs: ``rounds`` None runs until stopped."""

    rounds: int | None = None
    declare_queues: bool = True
    poll_interval: float = 0.05
    messages_per_poll: int = 32
    reconnect_initial_delay: float = 0.5
    reconnect_max_delay: float = 10.0

    def __post_init__(self) -> None:
        if self.rounds is not None and self.rounds < 1:
            raise ValueError("rounds must be >= 1")
        if self.poll_interval <= 0 or self.messages_per_poll < 1:
            raise ValueError("poll_interval > 0 and messages_per_poll >= 1")


@dataclass(slots=True)
class SendStats:
    """Messages and bytes published, per participant id."""

    messages: dict[str, int] = field(default_factory=dict)
    bytes: dict[str, int] = field(default_factory=dict)

    def add(self, participant_id: str, size: int) -> None:
        self.messages[participant_id] = self.messages.get(participant_id, 0) + 1
        self.bytes[participant_id] = self.bytes.get(participant_id, 0) + size


class ParticipantRunner:
    """Runs ``sessions`` over transports made by ``connect`` (see the module docstring)."""

    def __init__(
        self,
        sessions: Sequence[ParticipantSession],
        connect: Callable[[], Transport],
        config: RunnerConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not sessions:
            raise ValueError("no participants to run")
        self.sessions = tuple(sessions)
        self.config = config or RunnerConfig()
        self.stats = SendStats()
        self._connect = connect
        self._clock = clock
        self._stop = threading.Event()
        self._transport: Transport | None = None
        self._generation = 0
        self._turn = 0

    def stop(self) -> None:
        """Ask the loop to end (safe from a signal handler or another thread)."""
        self._stop.set()

    @property
    def done(self) -> bool:
        rounds = self.config.rounds
        return rounds is not None and all(s.rounds_finished >= rounds for s in self.sessions)

    def open(self) -> None:
        """Connect, declare what the credentials may declare, ask for the model.
        Raises ``BrokerError`` (e.g. ``BrokerUnavailable``) if that fails."""
        transport = self._connect()
        try:
            if self.config.declare_queues:
                declare_core(transport)
                for session in self.sessions:
                    declare_participant(transport, session.participant_id)
        except BaseException:
            transport.close()
            raise
        self._transport = transport
        self._generation = _generation(transport)
        for session in self.sessions:
            self._publish(transport, session, session.start())

    def run(self) -> None:
        """Open (if not yet) and loop until stopped or ``rounds`` are done."""
        if self._transport is None:
            self.open()
        try:
            while not self._stop.is_set() and not self.done:
                try:
                    self._poll_once()
                except BrokerUnavailable as error:
                    logger.warning("broker unavailable: %s; reconnecting", error)
                    self._reopen()
        finally:
            self.close()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    # --- the loop -------------------------------------------------------------------

    def _poll_once(self) -> None:
        transport = self._transport
        assert transport is not None
        busy = False
        for session in self.sessions:
            for _ in range(self.config.messages_per_poll):
                outcome = self._receive(transport, session, 0.0)
                if outcome is Outcome.EMPTY:
                    break
                busy = True
        now = self._clock()
        for session in self.sessions:
            self._publish(transport, session, session.tick(now))
        generation = _generation(transport)
        if generation != self._generation:
            self._generation = generation
            logger.info("reconnected to the broker: asking for the current model again")
            for session in self.sessions:
                self._publish(transport, session, session.start())
        if not busy:
            self._idle(transport)

    def _idle(self, transport: Transport) -> None:
        """Wait up to ``poll_interval`` for the next message. RabbitMQ's keep-alive
        returns as soon as any delivery arrives, for any queue; the in-memory transport's
        does not wait at all, so there the loop waits on one queue at a time, in turn."""
        if not isinstance(transport, MemoryTransport):
            transport.keep_alive(self.config.poll_interval)
            return
        waiting = self.sessions[self._turn % len(self.sessions)]
        self._turn += 1
        self._receive(transport, waiting, self.config.poll_interval)

    def _receive(
        self, transport: Transport, session: ParticipantSession, timeout: float
    ) -> Outcome | None:
        """One message for ``session``; None if handling it failed (a bug, not bad input:
        ``receive_one`` logged it with its traceback and requeued it once), so that one
        participant's failure does not stop the others."""
        queue = participant_queue(session.participant_id)
        try:
            return receive_one(transport, queue, self._handler(transport, session), INBOX, timeout)
        except BrokerError:
            raise
        except Exception:
            return None

    def _handler(
        self, transport: Transport, session: ParticipantSession
    ) -> Callable[[WireMessage, Delivery], None]:
        def handle(message: WireMessage, _delivery: Delivery) -> None:
            self._publish(transport, session, session.receive(message, self._clock()))

        return handle

    def _publish(
        self, transport: Transport, session: ParticipantSession, messages: list[WireMessage]
    ) -> None:
        for message in messages:
            try:
                body = encode(message)
                transport.publish_bytes(SUBMIT_EXCHANGE, SUBMIT_ROUTING_KEY, body)
            except (EncodeError, PublishRejected) as error:
                logger.warning(
                    "%s: %s of round %d not sent: %s",
                    session.participant_id,
                    message.kind,
                    message.round,
                    error,
                )
                continue
            self.stats.add(session.participant_id, len(body))
            logger.info(
                "%s: sent %s of round %d (%d bytes)",
                session.participant_id,
                message.kind,
                message.round,
                len(body),
            )

    def _reopen(self) -> None:
        self.close()
        delay = self.config.reconnect_initial_delay
        while not self._stop.is_set():
            try:
                self.open()
                logger.info("connected again; %d participants resume", len(self.sessions))
                return
            except BrokerError as error:
                logger.warning("reconnect failed: %s; retrying in %.1f s", error, delay)
                self._stop.wait(delay)
                delay = min(delay * 2, self.config.reconnect_max_delay)


def _generation(transport: Transport) -> int:
    generation = getattr(transport, "generation", 0)
    return generation if isinstance(generation, int) else 0
