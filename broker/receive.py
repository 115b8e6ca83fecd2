"""The consuming edge: decode, check, hand over, then ack (DESIGN.md section 7).

"Every message is size-limited, schema-validated (pydantic, strict) and checked against
the current round and phase; anything else is rejected, logged and acked away."

:func:`receive_one` takes one delivery from a queue and:

1. decodes it (``broker.codec.decode``: size caps, version, kind, strict schema);
2. checks it against the caller's current :class:`Expectation` (kinds the phase
   accepts, round, session);
3. on either failure logs one warning on logger ``fedrank.broker`` with the reason,
   queue, size and kind, **acks it away** and returns :attr:`Outcome.REJECTED`;
4. otherwise calls ``handler(message, delivery)`` and acks only after it returns.

Handler exceptions (a bug or a transient failure of the caller, not bad input): the
delivery is rejected with ``requeue=True`` the first time, so it is retried (by this
process or, after a crash, the next); a delivery that was already redelivered is
dropped (``requeue=False``) and logged, so a poison message cannot loop forever. The
exception is re-raised either way.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass

from broker.codec import DecodeError, WireMessage, decode
from broker.transport import Delivery, Transport

logger = logging.getLogger("fedrank.broker")

Handler = Callable[[WireMessage, Delivery], None]


class Outcome(enum.Enum):
    EMPTY = "empty"
    HANDLED = "handled"
    REJECTED = "rejected"


@dataclass(frozen=True, slots=True)
class Expectation:
    """What the current round and phase accept: message kinds, round, session.

    ``round`` / ``session`` of ``None`` accept any value (e.g. a ``ModelRequest`` may
    come from a participant that knows no round yet).
    """

    kinds: tuple[type[WireMessage], ...]
    round: int | None = None
    session: bytes | None = None

    def mismatch(self, message: WireMessage) -> str | None:
        """Why ``message`` is not accepted now, or None if it is."""
        if self.round is not None and message.round != self.round:
            return f"{message.kind} is for round {message.round}, current round is {self.round}"
        if self.session is not None and message.session != self.session:
            return (
                f"{message.kind} is for session {message.session.hex()[:16] or '(none)'}, "
                f"current session is {self.session.hex()[:16] or '(none)'}"
            )
        return None


def receive_one(
    transport: Transport,
    queue: str,
    handler: Handler,
    expectation: Expectation,
    timeout: float = 0.0,
) -> Outcome:
    """Take at most one delivery from ``queue`` and decode, check, handle and ack it."""
    delivery = transport.get(queue, timeout)
    if delivery is None:
        return Outcome.EMPTY
    try:
        message = decode(delivery.body, expected=expectation.kinds)
    except DecodeError as error:
        _reject(transport, delivery, error.reason, error.kind)
        return Outcome.REJECTED
    reason = expectation.mismatch(message)
    if reason is not None:
        _reject(transport, delivery, reason, message.kind)
        return Outcome.REJECTED
    try:
        handler(message, delivery)
    except BaseException:
        requeue = not delivery.redelivered
        logger.exception(
            "handler failed on %s from queue %s (user %s); %s",
            message.kind,
            queue,
            delivery.user_id,
            "requeued for one retry" if requeue else "dropped: it had failed before",
        )
        transport.reject(delivery, requeue=requeue)
        raise
    transport.ack(delivery)
    return Outcome.HANDLED


def drain(
    transport: Transport,
    queue: str,
    handler: Handler,
    expectation: Expectation,
    max_messages: int,
) -> dict[Outcome, int]:
    """Receive without waiting until ``queue`` is empty or ``max_messages`` are taken."""
    counts = dict.fromkeys(Outcome, 0)
    for _ in range(max_messages):
        outcome = receive_one(transport, queue, handler, expectation, timeout=0.0)
        counts[outcome] += 1
        if outcome is Outcome.EMPTY:
            break
    return counts


def _reject(transport: Transport, delivery: Delivery, reason: str, kind: str | None) -> None:
    logger.warning(
        "rejected message from queue %s (%d bytes, kind %s, user %s, redelivered %s): %s",
        delivery.queue,
        len(delivery.body),
        kind or "unknown",
        delivery.user_id,
        delivery.redelivered,
        reason,
    )
    transport.ack(delivery)
