"""The aggregator's round state machine, sans-I/O as h11 is (DESIGN.md section 5, phases
1-7; the lead's protocol decisions 1-5).

``Coordinator`` is fed decoded messages with ``receive(message, user_id, now)`` and the
passage of time with ``tick(now)``; each call returns an :class:`Output`: messages to
publish (exchange, routing key, message) and :mod:`aggregator.events`. It owns no clock,
socket or thread. One coordinator runs round after round:

1. **Announce**: a signed :class:`ModelAnnouncement` on ``fedrank.model`` (again every
   ``reannounce_seconds`` while nobody has checked in).
2. **Check-in**: :class:`CheckIn` for this round and model version; closes
   ``check_in_seconds`` after the first, or as soon as the cohort target is reached.
3. **Cohort**: a uniform sample (``secrets``) of the check-ins, member ids 1..n, and a
   signed :class:`CohortInvitation` to each member on ``fedrank.direct``.
4. **Secure aggregation** (AdvertiseKeys .. Unmask): crypto.secagg's ``SecAggServer``,
   each phase ending on its deadline or once everyone expected has answered.
5. **Step**: the unmasked sum is split into vote total and metrics
   (``broker/payload.py``); the poisoning bound (with the Skellam noise slack),
   ``apply_votes``, the new version, the round record, and the next announcement.

Every refused message (wrong round, phase or session, unknown participant, user id
mismatch, duplicate, stale model version, a crypto ``RemoteProtocolError``) becomes a
:class:`MessageRejected` event with its reason and is counted for the round log; the
round goes on. Below quorum at any phase, or on a rejected step, the round aborts with
the model unchanged, and the next round is announced.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, replace

import crypto.secagg as secagg
from aggregator.config import CoordinatorConfig
from aggregator.events import (
    Event,
    MessageRejected,
    Outgoing,
    Output,
    RoundAborted,
    RoundCompleted,
    RoundOpened,
)
from aggregator.optimizer import OptimizerState, StepApplied, apply_votes
from aggregator.phases import (
    phase_before,
    phase_key,
    phase_name,
    refusal_reason,
    rejection_category,
)
from aggregator.round_record import RoundTracker
from broker.codec import WireMessage, encode
from broker.messages import (
    CheckIn,
    CohortInvitation,
    DirectoryEntry,
    ModelAnnouncement,
    ModelRequest,
    SecAggParameters,
    SecAggSubmission,
    UnmaskResponse,
    requests_from_crypto,
    sign_message,
)
from broker.payload import PayloadError, decode_total, input_length, metric_totals_problem
from broker.topology import DIRECT_EXCHANGE, MODEL_EXCHANGE
from crypto.accountant import RdpCurve
from frecency.spec import ModelSpec

USER_PREFIX = "participant-"


@dataclass(frozen=True, slots=True)
class ModelState:
    """The model as persisted: optimizer state, version, the next round number and the
    privacy spent so far (the composed RDP curve, or None before any DP round)."""

    optimizer: OptimizerState
    version: int
    next_round: int
    privacy: RdpCurve | None = None


class Coordinator:
    """Runs rounds for ``spec`` from ``model``; see the module docstring."""

    def __init__(
        self,
        config: CoordinatorConfig,
        spec: ModelSpec,
        signing_key: bytes,
        model: ModelState,
        *,
        wall_offset: float = 0.0,
    ) -> None:
        if config.model != spec.name:
            raise ValueError(f"config is for model {config.model}, spec is {spec.name}")
        self.config = config
        self.spec = spec
        self.model = model
        self._key = signing_key
        self._wall_offset = wall_offset
        self._round: RoundTracker | None = None
        self._announcement: ModelAnnouncement | None = None
        self._checkins: dict[str, CheckIn] = {}
        self._first_checkin: float | None = None
        self._last_announced = 0.0
        self._server: secagg.SecAggServer | None = None
        self._members: dict[int, str] = {}
        self._member_of: dict[str, int] = {}
        self._seen: set[bytes] = set()
        self._unmask_requests = self._unmask_answers = 0

    # --- what the driver asks ---------------------------------------------------------

    @property
    def round_number(self) -> int | None:
        return self._round.number if self._round else None

    @property
    def announcement(self) -> ModelAnnouncement | None:
        return self._announcement

    @property
    def phase(self) -> str:
        if self._round is None:
            return "idle"
        if self._server is None:
            return "check-in"
        return self._server.phase.value

    def expensive(self, now: float, *, receiving: bool) -> bool:
        """Whether the next ``receive`` (or ``tick`` at ``now``) may unmask the sum, seconds
        of CPU: the driver runs it keeping the broker connection alive."""
        if self._server is None or self._server.phase is not secagg.Phase.UNMASKING:
            return False
        if receiving:
            return self._unmask_answers + 1 >= self._unmask_requests
        return now >= self._server.deadline

    def open_round(self, now: float) -> Output:
        """Announce round ``model.next_round`` (the driver persists ``RoundOpened`` first:
        a restart never reuses a round number that may have been in flight)."""
        if self._round is not None:
            raise RuntimeError("a round is already open")
        number = self.model.next_round
        self.model = replace(self.model, next_round=number + 1)
        self._round = RoundTracker(
            number=number,
            config=self.config,
            spec_name=self.spec.name,
            version=self.model.version,
            weights=self.model.optimizer.weights,
            opened_at=now,
            wall_offset=self._wall_offset,
        )
        self._checkins, self._first_checkin, self._seen = {}, None, set()
        self._server, self._members, self._member_of = None, {}, {}
        unsigned = ModelAnnouncement(
            round=number,
            model_version=self.model.version,
            spec=self.spec.name,
            weights=self.model.optimizer.weights,
            params=self.config.round_parameters(),
        )
        self._announcement = sign_message(self._key, unsigned)
        self._last_announced = now
        return Output(
            (Outgoing(MODEL_EXCHANGE, "", self._announcement),),
            (RoundOpened(number, self.model.version, self.model),),
        )

    def note_undecodable(self, reason: str) -> None:
        """Count a message the consuming edge refused before decoding (garbage bytes,
        wrong schema, oversized): it counts against the round in the log."""
        if self._round is not None:
            self._round.rejected(rejection_category(reason))

    def abort(self, reason: str, now: float) -> Output:
        """Give the open round up (shutdown) without opening another: an aborted record,
        model unchanged. A round nobody has checked in to yet ends without a record."""
        if self._round is None:
            return Output()
        if not self._checkins:
            self._round = None
            return Output()
        return self._aborted(reason, now, reopen=False)

    # --- input ------------------------------------------------------------------------

    def receive(
        self, message: WireMessage, user_id: str | None, now: float, body: bytes | None = None
    ) -> Output:
        """Handle one decoded submission from a participant (``body``: its wire bytes, to
        recognise a duplicate without encoding it again)."""
        participant = getattr(message, "participant_id", None)
        if not isinstance(participant, str):
            return self._reject(message, None, user_id, "message names no participant")
        if self.config.check_user_ids and user_id != USER_PREFIX + participant:
            reason = f"user id mismatch: sent by user {user_id!r}, claims {participant!r}"
            return self._reject(message, participant, user_id, reason)
        if isinstance(message, ModelRequest):
            if self._announcement is None:
                return Output()
            return Output((Outgoing(DIRECT_EXCHANGE, participant, self._announcement),))
        if self._round is None:
            return self._reject(message, participant, user_id, "wrong phase: no round open")
        if message.round != self._round.number:
            reason = f"wrong round: {message.kind} for round {message.round}"
            return self._reject(message, participant, user_id, reason)
        wire = body if body is not None else encode(message)
        digest = hashlib.sha256((user_id or "").encode() + b"\0" + wire).digest()
        if digest in self._seen:
            return self._reject(message, participant, user_id, "duplicate: already handled")
        if isinstance(message, CheckIn):
            output = self._check_in(message, user_id, now)
        else:
            output = self._secagg(message, participant, user_id, now)  # type: ignore[arg-type]
        if not any(isinstance(e, MessageRejected) for e in output.events):
            self._seen.add(digest)
        return output

    def tick(self, now: float) -> Output:
        """Close whatever phase is past its deadline; re-announce while nobody came."""
        if self._round is None:
            return Output()
        if self._server is not None:
            try:
                step = self._server.tick(now)
            except (secagg.LocalProtocolError, ValueError) as error:
                return self._aborted(f"secure aggregation failed: {error!r}", now)
            return self._take_step(step, now)
        if not self._checkins:
            if now - self._last_announced >= self.config.reannounce_seconds:
                assert self._announcement is not None
                self._last_announced = now
                return Output((Outgoing(MODEL_EXCHANGE, "", self._announcement),))
            return Output()
        assert self._first_checkin is not None
        if now >= self._first_checkin + self.config.check_in_seconds:
            return self._close_check_in(now)
        return Output()

    def next_deadline(self) -> float | None:
        """When ``tick`` next has something to do (the driver may sleep until then)."""
        if self._round is None:
            return None
        if self._server is not None:
            return self._server.deadline
        if self._first_checkin is None:
            return self._last_announced + self.config.reannounce_seconds
        return self._first_checkin + self.config.check_in_seconds

    # --- phases -----------------------------------------------------------------------

    def _check_in(self, message: CheckIn, user_id: str | None, now: float) -> Output:
        pid = message.participant_id
        if self._server is not None:
            return self._reject(message, pid, user_id, "wrong phase: check-in is closed")
        if message.model_version != self.model.version:
            reason = f"stale model version {message.model_version} (current {self.model.version})"
            return self._reject(message, pid, user_id, reason)
        if pid in self._checkins:
            return self._reject(message, pid, user_id, "duplicate: participant checked in")
        if any(c.identity_key == message.identity_key for c in self._checkins.values()):
            return self._reject(message, pid, user_id, "duplicate: identity key reused")
        self._checkins[pid] = message
        if self._first_checkin is None:
            self._first_checkin = now
        if len(self._checkins) >= self.config.cohort_size:
            return self._close_check_in(now)
        return Output()

    def _close_check_in(self, now: float) -> Output:
        assert self._round is not None
        count = len(self._checkins)
        self._round.phase_ended("check_in", now)
        self._round.checked_in = count
        if count < self.config.least_checkins:
            return self._aborted(
                f"below quorum at check-in: {count} checked in, need {self.config.least_checkins}",
                now,
                phase="check_in",
            )
        chooser = secrets.SystemRandom()
        chosen = chooser.sample(sorted(self._checkins), min(count, self.config.cohort_size))
        self._members = {member: pid for member, pid in enumerate(chosen, start=1)}
        self._member_of = {pid: member for member, pid in self._members.items()}
        self._round.selected_ids = list(chosen)
        parameters = SecAggParameters(
            threshold=self.config.quorum,
            vector_length=input_length(self.spec.dimension),
            secagg_plus=self.config.secagg_plus,
            degree=self.config.degree,
        )
        directory = tuple(
            DirectoryEntry(member=m, participant_id=p, identity_key=self._checkins[p].identity_key)
            for m, p in self._members.items()
        )
        self._server = secagg.SecAggServer(
            parameters.to_crypto(self._round.number),
            {entry.member: entry.identity_key for entry in directory},
            now=now,
            phase_timeout=self.config.phase_seconds,
        )
        invitations = tuple(
            Outgoing(
                DIRECT_EXCHANGE,
                pid,
                sign_message(
                    self._key,
                    CohortInvitation(
                        round=self._round.number,
                        participant_id=pid,
                        member=member,
                        model_version=self.model.version,
                        parameters=parameters,
                        directory=directory,
                        expires_in=self.config.invitation_lifetime(),
                    ),
                ),
            )
            for member, pid in self._members.items()
        )
        return Output(invitations)

    def _secagg(
        self, message: SecAggSubmission, pid: str, user_id: str | None, now: float
    ) -> Output:
        if self._server is None:
            return self._reject(message, pid, user_id, "wrong phase: no cohort yet")
        member = self._member_of.get(pid)
        if member is None:
            return self._reject(message, pid, user_id, "unknown participant: not in the cohort")
        if message.member != member:
            reason = f"wrong member id {message.member} (participant {pid} is member {member})"
            return self._reject(message, pid, user_id, reason)
        try:
            step = self._server.receive(message.to_crypto(), now)
        except secagg.RemoteProtocolError as refused:
            return self._reject(message, pid, user_id, refusal_reason(refused))
        except (secagg.LocalProtocolError, ValueError) as error:  # a bug here, not their input
            return self._aborted(f"secure aggregation failed: {error!r}", now)
        self._unmask_answers += isinstance(message, UnmaskResponse)
        return self._take_step(step, now)

    def _take_step(self, step: secagg.ServerStep, now: float) -> Output:
        assert self._round is not None and self._server is not None
        messages = tuple(
            Outgoing(DIRECT_EXCHANGE, request.participant_id, request)
            for request in requests_from_crypto(step.messages, self._members)
        )
        if messages:
            self._round.phase_ended(phase_before(self._server.phase), now)
            self._unmask_requests, self._unmask_answers = len(messages), 0
        if isinstance(step.outcome, secagg.RoundAborted):
            return self._aborted(
                f"{step.outcome.reason.value}: {step.outcome.detail}",
                now,
                phase=phase_name(step.outcome.phase),
            )
        if isinstance(step.outcome, secagg.AggregateSum):
            self._round.phase_ended("unmask", now)
            return self._step(step.outcome, now)
        return Output(messages)

    def _step(self, outcome: secagg.AggregateSum, now: float) -> Output:
        assert self._round is not None
        tracker = self._round
        survivors = len(outcome.survivors)
        tracker.survivor_ids = [self._members[m] for m in outcome.survivors]
        try:
            votes, metrics = decode_total(outcome.total, self.spec.dimension)
        except PayloadError as error:
            return self._aborted(f"sum does not decode: {error}", now, phase="step")
        tracker.vote_totals = [int(v) for v in votes]
        tracker.metrics_problem = metric_totals_problem(metrics, survivors)
        tracker.metrics = metrics if tracker.metrics_problem is None else None
        optimizer = replace(self.config.optimizer, noise_slack=self.config.noise_slack(survivors))
        result = apply_votes(self.spec, optimizer, self.model.optimizer, votes, survivors)
        if not isinstance(result, StepApplied):
            return self._aborted(f"step rejected: {result.reason}", now, phase="step")
        privacy, epsilon_round = tracker.privacy_after(
            self.model.privacy, survivors, self.spec.dimension
        )
        self.model = replace(
            self.model, optimizer=result.state, version=self.model.version + 1, privacy=privacy
        )
        record = tracker.completed(result, self.model, epsilon_round, now)
        self._round = None
        return self._then_open(RoundCompleted(record, self.model), now)

    def _aborted(
        self, reason: str, now: float, phase: str | None = None, *, reopen: bool = True
    ) -> Output:
        assert self._round is not None
        record = self._round.aborted(reason, phase or phase_key(self.phase), now)
        self._round = None
        event = RoundAborted(record, reason, self.model)
        return self._then_open(event, now) if reopen else Output(events=(event,))

    def _then_open(self, event: Event, now: float) -> Output:
        opened = self.open_round(now)
        return Output(opened.messages, (event, *opened.events))

    def _reject(
        self, message: WireMessage, pid: str | None, user_id: str | None, reason: str
    ) -> Output:
        if self._round is not None:
            self._round.rejected(rejection_category(reason))
        return Output(events=(MessageRejected(message.kind, pid, user_id, reason),))
