"""One participant's side of a round, sans-I/O (DESIGN.md section 5, phases 1-6; the
lead's round flow in broker/messages.py).

:class:`ParticipantSession` is fed decoded wire messages and ``now`` and returns the
wire messages to publish to ``fedrank.submit``; it knows no broker, socket or clock.

1. ``ModelAnnouncement``: refused unless signed by the pinned aggregator key, for this
   participant's model spec, and newer than anything seen. A new round lets the person
   browse under the announced weights (``HistorySource.observe``); the participant then
   sends a ``CheckIn`` only if it has interactions not yet contributed and its privacy
   ledger can pay for the round (``participant.privacy``), else it logs why not.
2. ``CohortInvitation`` (signed too): the vote and metrics of the pending interactions
   under the announced weights (``participant.signal``), privatized as the announcement
   says, encoded with ``broker.payload.encode_input``, become the input of a
   ``crypto.secagg.SecAggClient`` with this participant's Ed25519 identity and the
   invitation's directory; its ``AdvertiseKeys`` is the reply.
3. ``ShareKeysRequest`` / ``MaskedInputRequest`` / ``ConsistencyCheckRequest`` /
   ``UnmaskRequest``: answered by the client. Just before the masked input leaves, the
   round's privacy cost is spent and the interactions are marked contributed, and the
   record is persisted (``persist`` callback), so a crash cannot replay them. A refusal
   (``RemoteProtocolError``) abandons the round with a logged reason; the client's own
   state already makes revealing both shares of one peer impossible.

A repeated request (a redelivery) is ignored, never answered twice. A round ends for
this participant when it declines, contributes (unmask response sent), abandons, is
superseded by a newer announcement, or passes its deadline (:meth:`tick`).
"""

from __future__ import annotations

import enum
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from broker.codec import WireMessage
from broker.messages import (
    AdvertiseKeys,
    CheckIn,
    CohortInvitation,
    ConsistencyCheckRequest,
    MaskedInputRequest,
    ModelAnnouncement,
    ModelRequest,
    SecAggRequest,
    ShareKeysRequest,
    UnmaskRequest,
    submission_from_crypto,
    verify_message,
)
from broker.payload import PayloadError, encode_input, input_length
from crypto.accountant import RdpCurve
from crypto.dp import SYSTEM_RANDOM, RandomSource
from crypto.hazmat import primitives
from crypto.secagg import (
    LocalProtocolError,
    MaskedInput,
    RemoteProtocolError,
    SecAggClient,
    UnmaskResponse,
)
from participant.history import HistorySource, PlacesSource
from participant.privacy import privatize, refusal, round_cost
from participant.signal import compute_contribution
from participant.state import ParticipantRecord

logger = logging.getLogger("fedrank.participant")
FloatArray = NDArray[np.float64]
SECAGG_REQUESTS = (ShareKeysRequest, MaskedInputRequest, ConsistencyCheckRequest, UnmaskRequest)


class Stage(enum.Enum):
    """Where this participant is in the current round."""

    DECLINED = "declined"
    CHECKED_IN = "checked-in"
    AGGREGATING = "aggregating"
    CONTRIBUTED = "contributed"
    ENDED = "ended"


@dataclass(slots=True)
class _Round:
    announcement: ModelAnnouncement
    weights: FloatArray
    ends_at: float
    stage: Stage
    cost: RdpCurve | None = None
    client: SecAggClient | None = None
    member: int = 0
    answered: set[str] = field(default_factory=set)

    @property
    def number(self) -> int:
        return self.announcement.round

    @property
    def finished(self) -> bool:
        return self.stage in (Stage.DECLINED, Stage.CONTRIBUTED, Stage.ENDED)


@dataclass(frozen=True, slots=True)
class SessionConfig:
    """Who this participant is and whom it trusts."""

    participant_id: str
    aggregator_key: bytes


class ParticipantSession:
    """The protocol driver of one participant (see the module docstring)."""

    def __init__(
        self,
        config: SessionConfig,
        history: HistorySource,
        record: ParticipantRecord,
        *,
        persist: Callable[[ParticipantRecord], None] | None = None,
        dp_random: RandomSource = SYSTEM_RANDOM,
        secagg_random: Callable[[int], bytes] = os.urandom,
    ) -> None:
        self.config = config
        self.history = history
        self.record = record
        self._persist = persist or (lambda _record: None)
        self._dp_random = dp_random
        self._secagg_random = secagg_random
        self.identity_public_key = primitives.public_signing_key(record.identity_key)
        self.model_version = -1
        self.rounds_finished = 0
        self.rounds_contributed = 0
        self._round: _Round | None = None

    @property
    def participant_id(self) -> str:
        return self.config.participant_id

    @property
    def current_round(self) -> int | None:
        return None if self._round is None else self._round.number

    @property
    def stage(self) -> Stage | None:
        return None if self._round is None else self._round.stage

    # --- driving --------------------------------------------------------------------

    def start(self) -> list[WireMessage]:
        """Ask for the current model (a late joiner, or after a reconnect)."""
        known = max(self.current_round or 0, self.record.last_contributed_round, 0)
        return [
            ModelRequest(
                round=known, participant_id=self.participant_id, have_version=self.model_version
            )
        ]

    def receive(self, message: WireMessage, now: float) -> list[WireMessage]:
        """The messages to publish in answer to ``message``."""
        if isinstance(message, ModelAnnouncement):
            return self._announcement(message, now)
        if isinstance(message, CohortInvitation):
            return self._invitation(message, now)
        if isinstance(message, SECAGG_REQUESTS):
            return self._secagg(message, now)
        logger.warning("%s: ignored unexpected %s", self.participant_id, message.kind)
        return []

    def tick(self, now: float) -> list[WireMessage]:
        """End the current round if its deadline has passed."""
        current = self._round
        if current is not None and not current.finished and now > current.ends_at:
            if current.stage is Stage.AGGREGATING:
                self._end(current, Stage.ENDED, "abandoned: the round's deadline passed")
            else:
                self._end(current, Stage.ENDED, "ended: not invited before the deadline")
        return []

    # --- phase 1: announcement and check-in -----------------------------------------

    def _announcement(self, message: ModelAnnouncement, now: float) -> list[WireMessage]:
        pid = self.participant_id
        if not verify_message(self.config.aggregator_key, message):
            why = "unsigned" if not message.signature else "signature does not verify"
            logger.warning(
                "%s: refused model announcement of round %d: %s (pinned key)",
                pid,
                message.round,
                why,
            )
            return []
        spec = self.history.model.spec
        if message.spec != spec.name or len(message.weights) != spec.dimension:
            logger.warning(
                "%s: refused model announcement of round %d: model %s with %d "
                "weights, this participant trains %s with %d",
                pid,
                message.round,
                message.spec,
                len(message.weights),
                spec.name,
                spec.dimension,
            )
            return []
        current = self._round
        if current is not None and message.round <= current.number:
            if message.round < current.number or message.model_version != self.model_version:
                logger.info(
                    "%s: ignored announcement of round %d (current round %d)",
                    pid,
                    message.round,
                    current.number,
                )
            return []
        if message.round <= self.record.last_contributed_round:
            logger.info(
                "%s: ignored announcement of round %d: already contributed to round %d",
                pid,
                message.round,
                self.record.last_contributed_round,
            )
            return []
        if current is not None and not current.finished:
            self._end(current, Stage.ENDED, f"superseded by round {message.round}")
        self.model_version = message.model_version
        weights = np.asarray(message.weights, dtype=np.float64)
        ends_at = now + message.params.deadlines.unmask
        current = _Round(message, weights, ends_at, Stage.DECLINED)
        self._round = current
        self.history.observe(message.round, weights)
        if not self.history.has_new():
            self._end(current, Stage.DECLINED, "no check-in: no new interactions")
            return []
        settings = message.params.privacy
        current.cost = round_cost(settings, spec.dimension, message.params.quorum)
        reason = refusal(self.record.ledger, current.cost, settings)
        if reason is not None:
            logger.warning("%s: no check-in to round %d: %s", pid, message.round, reason)
            self._end(current, Stage.DECLINED, None)
            return []
        current.stage = Stage.CHECKED_IN
        logger.info(
            "%s: checking in to round %d (model version %d)",
            pid,
            message.round,
            message.model_version,
        )
        return [
            CheckIn(
                round=message.round,
                participant_id=pid,
                identity_key=self.identity_public_key,
                model_version=message.model_version,
            )
        ]

    # --- phase 3: the cohort --------------------------------------------------------

    def _invitation(self, message: CohortInvitation, now: float) -> list[WireMessage]:
        pid = self.participant_id
        current = self._round
        problem = None
        if not verify_message(self.config.aggregator_key, message):
            problem = "unsigned" if not message.signature else "signature does not verify"
        elif message.participant_id != pid:
            problem = f"addressed to {message.participant_id}"
        elif current is None or message.round != current.number:
            problem = f"not the current round ({self.current_round})"
        elif current.stage is not Stage.CHECKED_IN:
            problem = f"not expected while {current.stage.value}"
        elif message.model_version != current.announcement.model_version:
            problem = f"model version {message.model_version} was not announced"
        elif message.crypto_directory()[message.member] != self.identity_public_key:
            problem = "the directory misstates this participant's identity key"
        elif message.parameters.threshold < current.announcement.params.quorum:
            problem = (
                f"threshold {message.parameters.threshold} below the announced quorum "
                f"{current.announcement.params.quorum}"
            )
        elif message.parameters.vector_length != input_length(len(current.weights)):
            problem = f"vector length {message.parameters.vector_length} does not fit the model"
        if problem is not None or current is None:
            logger.warning(
                "%s: refused cohort invitation of round %d: %s", pid, message.round, problem
            )
            return []
        settings = current.announcement.params.privacy
        reason = refusal(self.record.ledger, current.cost, settings)
        if reason is not None:
            self._end(current, Stage.ENDED, f"invitation declined: {reason}")
            return []
        try:
            pending = self.history.pending(current.weights)
            objective = current.announcement.params.objective
            contribution = compute_contribution(
                self.history.model, pending, current.weights, objective.margin, objective.loss
            )
            sent_vote = privatize(contribution.vote, settings, self._dp_random)
            client = SecAggClient(
                message.crypto_parameters(),
                message.member,
                self.record.identity_key,
                message.crypto_directory(),
                encode_input(sent_vote, contribution.metrics),
                expires_at=now + message.expires_in,
                random=self._secagg_random,
            )
        except (PayloadError, LocalProtocolError, ValueError) as error:
            self._end(current, Stage.ENDED, f"abandoned: no input for the invitation: {error}")
            return []
        current.client, current.member = client, message.member
        current.stage = Stage.AGGREGATING
        current.ends_at = now + message.expires_in
        logger.info(
            "%s: invited to round %d as member %d of %d",
            pid,
            message.round,
            message.member,
            len(message.directory),
        )
        return [AdvertiseKeys.from_crypto(client.advertise(now), pid)]

    # --- phases 3-6: secure aggregation ---------------------------------------------

    def _secagg(self, message: SecAggRequest, now: float) -> list[WireMessage]:
        pid = self.participant_id
        current = self._round
        if (
            message.participant_id != pid
            or current is None
            or message.round != current.number
            or current.stage is not Stage.AGGREGATING
            or current.client is None
            or message.member != current.member
        ):
            logger.info(
                "%s: ignored %s of round %d: no secure aggregation of it in progress",
                pid,
                message.kind,
                message.round,
            )
            return []
        if message.kind in current.answered:
            logger.info("%s: ignored a repeated %s of round %d", pid, message.kind, message.round)
            return []
        try:
            reply = current.client.receive(message.to_crypto(), now)
        except RemoteProtocolError as error:
            self._end(current, Stage.ENDED, f"abandoned: refused {message.kind}: {error}")
            return []
        except LocalProtocolError as error:
            self._end(current, Stage.ENDED, f"abandoned: {message.kind} in a wrong state: {error}")
            return []
        current.answered.add(message.kind)
        if isinstance(reply, MaskedInput) and not self._spend(current):
            return []
        wire = submission_from_crypto(reply, pid)
        if isinstance(reply, UnmaskResponse):
            self.rounds_contributed += 1
            self._end(current, Stage.CONTRIBUTED, "contributed")
        return [wire]

    def _spend(self, current: _Round) -> bool:
        """Pay for the round and mark the interactions contributed, before the masked
        input leaves; False (round abandoned) if the ledger refuses."""
        ledger = self.record.ledger
        if ledger is not None:
            reason = refusal(ledger, current.cost, current.announcement.params.privacy)
            if reason is not None or current.cost is None:
                self._end(current, Stage.ENDED, f"abandoned before masked input: {reason}")
                return False
            ledger.spend(current.cost)
        self.history.mark_contributed()
        self.record.last_contributed_round = current.number
        if isinstance(self.history, PlacesSource):
            self.record.places_contributed = self.history.contributed
        self._persist(self.record)
        return True

    def _end(self, current: _Round, stage: Stage, why: str | None) -> None:
        current.stage = stage
        current.client = None
        self.rounds_finished += 1
        if why is not None:
            level = logging.WARNING if why.startswith("abandoned") else logging.INFO
            logger.log(level, "%s: round %d %s", self.participant_id, current.number, why)
