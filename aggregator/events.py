"""What the round state machine (``aggregator/coordinator.py``) hands its driver, sans-I/O
(DESIGN.md section 5): messages to publish and events to act on.

- :class:`Outgoing`: publish ``message`` to ``exchange`` with ``routing_key``.
- :class:`RoundOpened`: a round was announced; persist ``model`` (its ``next_round`` is
  already past this round) *before* publishing, so a restart never reuses the number.
- :class:`RoundCompleted`: the step was taken; persist ``model``, append ``record``.
- :class:`RoundAborted`: the round gave up (``reason``); append ``record``, model unchanged.
- :class:`MessageRejected`: a message was refused; log ``reason`` (already counted).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from aggregator.roundlog import RoundRecord
from broker.codec import WireMessage

if TYPE_CHECKING:
    from aggregator.coordinator import ModelState


@dataclass(frozen=True, slots=True)
class Outgoing:
    exchange: str
    routing_key: str
    message: WireMessage


@dataclass(frozen=True, slots=True)
class RoundOpened:
    round: int
    version: int
    model: ModelState


@dataclass(frozen=True, slots=True)
class RoundCompleted:
    record: RoundRecord
    model: ModelState


@dataclass(frozen=True, slots=True)
class RoundAborted:
    record: RoundRecord
    reason: str
    model: ModelState


@dataclass(frozen=True, slots=True)
class MessageRejected:
    kind: str
    participant_id: str | None
    user_id: str | None
    reason: str


Event = RoundOpened | RoundCompleted | RoundAborted | MessageRejected


@dataclass(frozen=True, slots=True)
class Output:
    """Messages to publish, in order, and events (act on events first: persist, log)."""

    messages: tuple[Outgoing, ...] = ()
    events: tuple[Event, ...] = ()
