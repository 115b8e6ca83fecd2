"""The participant's protocol driver (participant/session.py) against hand-built signed
messages and a real crypto.secagg SecAggServer, in memory (DESIGN.md section 5)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from broker.codec import WireMessage, decode, encode
from broker.messages import (
    AdvertiseKeys,
    CheckIn,
    CohortInvitation,
    DirectoryEntry,
    LearningObjective,
    MaskedInput,
    ModelAnnouncement,
    PhaseDeadlines,
    PrivacySettings,
    RoundParameters,
    SecAggParameters,
    SecAggSubmission,
    UnmaskRequest,
    UnmaskResponse,
    request_from_crypto,
    sign_message,
)
from broker.payload import decode_total, encode_input, input_length
from crypto.accountant import PrivacyBudget
from crypto.hazmat import primitives
from crypto.secagg import AggregateSum, RoundAborted, SecAggServer, ServerStep
from frecency.places import read_places
from frecency.registry import get_model
from participant.history import (
    PendingInteractions,
    PlacesSource,
    SyntheticHistory,
    SyntheticPerson,
    places_interactions,
    synthetic_interactions,
)
from participant.session import ParticipantSession, SessionConfig, Stage
from participant.signal import compute_contribution
from participant.state import ParticipantRecord, ParticipantStore

MODEL = get_model("firefox-2018")
PLACES_FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "places" / "places.sqlite"
D = MODEL.spec.dimension
SEED = 11
AGGREGATOR_KEY = primitives.generate_signing_key()
AGGREGATOR_PUBLIC = primitives.public_signing_key(AGGREGATOR_KEY)
DEADLINES = PhaseDeadlines(
    check_in=5.0, share_keys=10.0, masked_input=15.0, consistency_check=20.0, unmask=25.0
)


def announcement(
    round_number: int,
    *,
    version: int = 0,
    weights: Sequence[float] | None = None,
    quorum: int = 2,
    cohort: int = 5,
    privacy: PrivacySettings | None = None,
    objective: LearningObjective | None = None,
    key: bytes | None = AGGREGATOR_KEY,
) -> ModelAnnouncement:
    message = ModelAnnouncement(
        round=round_number,
        model_version=version,
        spec=MODEL.spec.name,
        weights=tuple(
            float(w) for w in (weights if weights is not None else MODEL.spec.defaults())
        ),
        params=RoundParameters(
            cohort_size=cohort,
            quorum=quorum,
            deadlines=DEADLINES,
            privacy=privacy or PrivacySettings(),
            objective=objective or LearningObjective(),
        ),
    )
    return message if key is None else sign_message(key, message)


def session(
    participant_id: str,
    *,
    budget: PrivacyBudget | None = None,
    store: ParticipantStore | None = None,
) -> ParticipantSession:
    person = SyntheticPerson(SEED, participant_id, MODEL, per_round=2)
    if store is not None:
        record = store.load(budget)
        persist = store.save
    else:
        record = ParticipantRecord(primitives.generate_signing_key())
        if budget is not None:
            record = ParticipantStore(None, participant_id).load(budget)
        persist = None
    return ParticipantSession(
        SessionConfig(participant_id, AGGREGATOR_PUBLIC),
        SyntheticHistory(person),
        record,
        persist=persist,
    )


def wire_roundtrip(message: WireMessage) -> WireMessage:
    """What the other side decodes: every message passes the codec."""
    return decode(encode(message))


def invitation(
    sessions: Sequence[ParticipantSession],
    check_ins: Sequence[CheckIn],
    round_number: int,
    *,
    threshold: int,
    key: bytes = AGGREGATOR_KEY,
) -> dict[str, CohortInvitation]:
    directory = tuple(
        DirectoryEntry(member=i, participant_id=c.participant_id, identity_key=c.identity_key)
        for i, c in enumerate(check_ins, 1)
    )
    parameters = SecAggParameters(threshold=threshold, vector_length=input_length(D))
    return {
        entry.participant_id: sign_message(
            key,
            CohortInvitation(
                round=round_number,
                participant_id=entry.participant_id,
                member=entry.member,
                model_version=0,
                parameters=parameters,
                directory=directory,
                expires_in=30.0,
            ),
        )
        for entry in directory
    }


class StandIn:
    """A test-side aggregator of one round: a SecAggServer plus routing."""

    def __init__(self, invitations: dict[str, CohortInvitation]) -> None:
        first = next(iter(invitations.values()))
        self.members = {inv.member: pid for pid, inv in invitations.items()}
        self.server = SecAggServer(
            first.crypto_parameters(), first.crypto_directory(), now=0.0, phase_timeout=30.0
        )
        self.outbox: list[WireMessage] = []
        self.outcome: AggregateSum | RoundAborted | None = None

    def take(self, step: ServerStep) -> None:
        for message in step.messages:
            self.outbox.append(request_from_crypto(message, self.members[message.recipient]))
        if step.outcome is not None:
            self.outcome = step.outcome

    def submit(self, message: WireMessage, now: float) -> None:
        assert isinstance(message, SecAggSubmission)
        self.take(self.server.receive(message.to_crypto(), now))


def run_round(
    sessions: dict[str, ParticipantSession],
    round_number: int,
    *,
    threshold: int,
    silent_from: dict[str, type[WireMessage]] | None = None,
    weights: Sequence[float] | None = None,
    objective: LearningObjective | None = None,
) -> StandIn:
    """Announce, check in, invite everyone who checked in, run secure aggregation until
    the outcome; ``silent_from[pid]`` = the first message kind that pid never sends."""
    silent = silent_from or {}
    message = announcement(round_number, weights=weights, quorum=threshold, objective=objective)
    check_ins = []
    for s in sessions.values():
        replies = s.receive(wire_roundtrip(message), 0.0)
        check_ins += [r for r in replies if isinstance(r, CheckIn)]
    invitations = invitation(list(sessions.values()), check_ins, round_number, threshold=threshold)
    stand_in = StandIn(invitations)
    now = 0.0
    for pid, inv in invitations.items():
        for reply in sessions[pid].receive(wire_roundtrip(inv), now):
            if silent.get(pid) is not AdvertiseKeys:
                stand_in.submit(wire_roundtrip(reply), now)
    while stand_in.outcome is None:
        if not stand_in.outbox:
            now = stand_in.server.deadline
            stand_in.take(stand_in.server.tick(now))
            continue
        batch, stand_in.outbox = stand_in.outbox, []
        for request in batch:
            pid = request.participant_id  # type: ignore[attr-defined]
            for reply in sessions[pid].receive(wire_roundtrip(request), now):
                stop = silent.get(pid)
                if stop is not None and _order(type(reply)) >= _order(stop):
                    continue
                stand_in.submit(wire_roundtrip(reply), now)
    return stand_in


_ORDER = (
    "secagg-advertise-keys",
    "secagg-encrypted-shares",
    "secagg-masked-input",
    "secagg-survivor-signature",
    "secagg-unmask-response",
)


def _order(kind: type[WireMessage]) -> int:
    return _ORDER.index(kind.model_fields["kind"].default)


# --- announcements ----------------------------------------------------------------------


def test_signed_announcement_gets_a_check_in_with_the_identity_key() -> None:
    s = session("alice-0")
    replies = s.receive(wire_roundtrip(announcement(3, version=7)), 0.0)
    assert len(replies) == 1
    check_in = replies[0]
    assert isinstance(check_in, CheckIn)
    assert (check_in.round, check_in.model_version) == (3, 7)
    assert check_in.participant_id == "alice-0"
    assert check_in.identity_key == primitives.public_signing_key(s.record.identity_key)
    assert s.stage is Stage.CHECKED_IN


@pytest.mark.parametrize(
    ("forge", "reason"),
    [
        (lambda m: m.model_copy(update={"signature": b""}), "unsigned"),
        (lambda m: sign_message(primitives.generate_signing_key(), m), "does not verify"),
        (lambda m: m.model_copy(update={"weights": (9.0,) * D}), "does not verify"),
        (lambda m: m.model_copy(update={"round": 4}), "does not verify"),
    ],
    ids=["unsigned", "other-key", "weights-changed", "round-changed"],
)
def test_forged_announcements_are_refused_and_logged(
    forge: object, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    s = session("alice-0")
    forged = forge(announcement(3))  # type: ignore[operator]
    with caplog.at_level(logging.WARNING, logger="fedrank.participant"):
        assert s.receive(wire_roundtrip(forged), 0.0) == []
    assert s.current_round is None
    assert any(
        "refused model announcement" in r.message and reason in r.message for r in caplog.records
    )


def test_announcement_for_another_model_is_refused(caplog: pytest.LogCaptureFixture) -> None:
    s = session("alice-0")
    other = announcement(1, key=None).model_copy(update={"spec": "firefox-current"})
    with caplog.at_level(logging.WARNING, logger="fedrank.participant"):
        assert s.receive(sign_message(AGGREGATOR_KEY, other), 0.0) == []
    assert "firefox-current" in caplog.text


class QuietHistory(SyntheticHistory):
    """A person who browses only in the rounds listed."""

    def __init__(self, person: SyntheticPerson, active: set[int]) -> None:
        super().__init__(person)
        self.active = active

    def observe(self, round_number: int, weights: np.ndarray) -> None:
        if round_number in self.active:
            super().observe(round_number, weights)


def test_checks_in_only_with_new_interactions() -> None:
    person = SyntheticPerson(SEED, "q-0", MODEL, per_round=1)
    s = ParticipantSession(
        SessionConfig("q-0", AGGREGATOR_PUBLIC),
        QuietHistory(person, active={2}),
        ParticipantRecord(primitives.generate_signing_key()),
    )
    assert s.receive(announcement(1), 0.0) == []
    assert s.stage is Stage.DECLINED and s.rounds_finished == 1
    assert len(s.receive(announcement(2), 1.0)) == 1
    # the same round again (a re-sent announcement): nothing sent twice
    assert s.receive(announcement(2), 2.0) == []


def test_stale_announcement_is_ignored() -> None:
    s = session("alice-0")
    assert len(s.receive(announcement(5), 0.0)) == 1
    assert s.receive(announcement(4), 1.0) == []
    assert s.current_round == 5


# --- a whole round against a real SecAggServer -------------------------------------------


def independent_vote(
    pid: str, rounds: Sequence[int], loss: str = "relative"
) -> tuple[np.ndarray, np.ndarray]:
    weights = MODEL.spec.defaults()
    pending = synthetic_interactions(SEED, pid, MODEL, [(r, weights) for r in rounds], 2)
    contribution = compute_contribution(MODEL, pending, weights, loss=loss)  # type: ignore[arg-type]
    return contribution.vote, encode_input(contribution.vote, contribution.metrics)


def test_round_sum_equals_independently_computed_votes() -> None:
    ids = [f"p-{i}" for i in range(4)]
    sessions = {pid: session(pid) for pid in ids}
    stand_in = run_round(sessions, 1, threshold=3)
    assert isinstance(stand_in.outcome, AggregateSum)
    votes, totals = decode_total(stand_in.outcome.total, D)
    expected = [independent_vote(pid, [1]) for pid in ids]
    assert np.array_equal(votes, sum(v for v, _ in expected))
    metric_sum = sum(x.astype(np.int64) for _, x in expected)
    assert totals.interactions == 4 * 2 == metric_sum[D]
    assert all(
        s.rounds_contributed == 1 and s.stage is Stage.CONTRIBUTED for s in sessions.values()
    )
    # the next round votes only on what happened since: round 2's interactions
    stand_in = run_round(sessions, 2, threshold=3)
    assert isinstance(stand_in.outcome, AggregateSum)
    votes, _ = decode_total(stand_in.outcome.total, D)
    assert np.array_equal(votes, sum(independent_vote(pid, [2])[0] for pid in ids))


def test_members_vote_with_the_announced_loss() -> None:
    ids = [f"p-{i}" for i in range(6)]
    relative = sum(independent_vote(pid, [1], "relative")[0] for pid in ids)
    svm = sum(independent_vote(pid, [1], "svm")[0] for pid in ids)
    assert not np.array_equal(relative, svm)  # the two losses vote differently here
    sessions = {pid: session(pid) for pid in ids}
    stand_in = run_round(sessions, 1, threshold=4, objective=LearningObjective(loss="svm"))
    assert isinstance(stand_in.outcome, AggregateSum)
    votes, _ = decode_total(stand_in.outcome.total, D)
    assert np.array_equal(votes, svm)


def test_member_dropping_after_masked_input_leaves_the_round_complete() -> None:
    ids = [f"p-{i}" for i in range(4)]
    sessions = {pid: session(pid) for pid in ids}
    stand_in = run_round(sessions, 1, threshold=3, silent_from={"p-3": UnmaskResponse})
    assert isinstance(stand_in.outcome, AggregateSum)
    votes, _ = decode_total(stand_in.outcome.total, D)
    assert np.array_equal(votes, sum(independent_vote(pid, [1])[0] for pid in ids))


def test_below_threshold_aborts() -> None:
    ids = [f"p-{i}" for i in range(3)]
    sessions = {pid: session(pid) for pid in ids}
    stand_in = run_round(sessions, 1, threshold=3, silent_from={"p-2": MaskedInput})
    assert isinstance(stand_in.outcome, RoundAborted)


# --- invitations and server messages ------------------------------------------------------


def checked_in(pids: Sequence[str]) -> tuple[dict[str, ParticipantSession], list[CheckIn]]:
    sessions = {pid: session(pid) for pid in pids}
    check_ins = []
    for s in sessions.values():
        reply = s.receive(announcement(1), 0.0)
        assert isinstance(reply[0], CheckIn)
        check_ins.append(reply[0])
    return sessions, check_ins


def test_invitation_signed_by_another_key_is_refused(caplog: pytest.LogCaptureFixture) -> None:
    sessions, check_ins = checked_in(["a-0", "a-1"])
    forged = invitation(
        list(sessions.values()), check_ins, 1, threshold=2, key=primitives.generate_signing_key()
    )
    with caplog.at_level(logging.WARNING, logger="fedrank.participant"):
        assert sessions["a-0"].receive(forged["a-0"], 1.0) == []
    assert "refused cohort invitation" in caplog.text
    assert sessions["a-0"].stage is Stage.CHECKED_IN


def test_invitation_misstating_the_identity_key_is_refused() -> None:
    sessions, check_ins = checked_in(["a-0", "a-1"])
    impostor = check_ins[0].model_copy(
        update={"identity_key": primitives.public_signing_key(primitives.generate_signing_key())}
    )
    invitations = invitation(list(sessions.values()), [impostor, check_ins[1]], 1, threshold=2)
    assert sessions["a-0"].receive(invitations["a-0"], 1.0) == []


def test_invitation_below_the_announced_quorum_is_refused() -> None:
    sessions, check_ins = checked_in(["a-0", "a-1"])
    invitations = invitation(list(sessions.values()), check_ins, 1, threshold=1)
    assert sessions["a-0"].receive(invitations["a-0"], 1.0) == []


def test_invitation_gives_advertise_keys_and_repeats_are_ignored() -> None:
    sessions, check_ins = checked_in(["a-0", "a-1"])
    invitations = invitation(list(sessions.values()), check_ins, 1, threshold=2)
    replies = sessions["a-0"].receive(invitations["a-0"], 1.0)
    assert len(replies) == 1 and isinstance(replies[0], AdvertiseKeys)
    assert replies[0].member == invitations["a-0"].member
    assert sessions["a-0"].receive(invitations["a-0"], 1.5) == []  # not expected twice


def test_lying_server_makes_the_participant_abandon(caplog: pytest.LogCaptureFixture) -> None:
    ids = ["l-0", "l-1", "l-2"]
    sessions, check_ins = checked_in(ids)
    invitations = invitation(list(sessions.values()), check_ins, 1, threshold=2)
    stand_in = StandIn(invitations)
    for pid in ids:
        for reply in sessions[pid].receive(invitations[pid], 0.0):
            stand_in.submit(reply, 0.0)
    # run until the unmask requests and tamper with l-0's: a survivor listed as dropped
    while not any(isinstance(m, UnmaskRequest) for m in stand_in.outbox):
        batch, stand_in.outbox = stand_in.outbox, []
        for request in batch:
            for reply in sessions[request.participant_id].receive(request, 0.0):  # type: ignore[attr-defined]
                stand_in.submit(reply, 0.0)
    request = next(
        m for m in stand_in.outbox if isinstance(m, UnmaskRequest) and m.participant_id == "l-0"
    )
    lying = request.model_copy(update={"dropped": (request.survivors[-1],)})
    with caplog.at_level(logging.WARNING, logger="fedrank.participant"):
        assert sessions["l-0"].receive(lying, 1.0) == []
    assert "abandoned: refused secagg-unmask-request" in caplog.text
    assert sessions["l-0"].stage is Stage.ENDED
    # the genuine request afterwards gets nothing either: the client is gone
    assert sessions["l-0"].receive(request, 1.0) == []


def test_deadline_ends_a_round_without_invitation() -> None:
    s = session("t-0")
    s.receive(announcement(1), 0.0)
    assert s.tick(DEADLINES.unmask - 1) == [] and s.stage is Stage.CHECKED_IN
    s.tick(DEADLINES.unmask + 1)
    assert s.stage is Stage.ENDED and s.rounds_finished == 1


# --- privacy ----------------------------------------------------------------------------


def test_budget_exhaustion_stops_check_ins(caplog: pytest.LogCaptureFixture, tmp_path) -> None:
    rr = PrivacySettings(mode="rr", rr_epsilon=0.5)
    # enough for one round of RR over 22 coordinates, not for two
    budget = PrivacyBudget(epsilon=16.0, delta=1e-6)
    store = ParticipantStore(tmp_path, "b-0")
    s = ParticipantSession(
        SessionConfig("b-0", AGGREGATOR_PUBLIC),
        SyntheticHistory(SyntheticPerson(SEED, "b-0", MODEL, per_round=2)),
        store.load(budget),
        persist=store.save,
    )
    other = session("b-1")
    sessions = {"b-0": s, "b-1": other}
    message = announcement(1, privacy=rr)
    check_ins = [r for x in sessions.values() for r in x.receive(message, 0.0)]
    assert len(check_ins) == 2
    invitations = invitation(list(sessions.values()), check_ins, 1, threshold=2)
    stand_in = StandIn(invitations)
    for pid, inv in invitations.items():
        for reply in sessions[pid].receive(inv, 0.0):
            stand_in.submit(reply, 0.0)
    while stand_in.outcome is None:
        batch, stand_in.outbox = stand_in.outbox, []
        for request in batch:
            for reply in sessions[request.participant_id].receive(request, 0.0):  # type: ignore[attr-defined]
                stand_in.submit(reply, 0.0)
    assert isinstance(stand_in.outcome, AggregateSum)
    assert s.record.ledger is not None and s.record.ledger.rounds_spent == 1
    # persisted before the masked input left: a restart sees the spend
    reloaded = ParticipantStore(tmp_path, "b-0").load(budget)
    assert reloaded.ledger is not None and reloaded.ledger.rounds_spent == 1
    assert reloaded.last_contributed_round == 1
    assert reloaded.identity_key == s.record.identity_key
    with caplog.at_level(logging.WARNING, logger="fedrank.participant"):
        assert s.receive(announcement(2, privacy=rr), 5.0) == []
    assert "privacy budget spent" in caplog.text
    # a round without DP is never paid for by a participant with a budget
    assert s.receive(announcement(3), 6.0) == []
    assert "no differential privacy" in caplog.text


def test_restarted_participant_does_not_contribute_to_an_old_round(tmp_path) -> None:
    store = ParticipantStore(tmp_path, "r-0")
    record = store.load(None)
    record.last_contributed_round = 4
    store.save(record)
    s = session("r-0", store=ParticipantStore(tmp_path, "r-0"))
    assert s.receive(announcement(4), 0.0) == []
    assert len(s.receive(announcement(5), 0.0)) == 1


def test_start_asks_for_the_model() -> None:
    s = session("s-0")
    (request,) = s.start()
    assert request.kind == "model-request"
    assert request.participant_id == "s-0"  # type: ignore[attr-defined]


def test_pending_interactions_type() -> None:
    pending = synthetic_interactions(SEED, "x-0", MODEL, [(1, MODEL.spec.defaults())], 3)
    assert isinstance(pending, PendingInteractions) and len(pending.interactions) == 3


def test_a_places_participant_and_a_synthetic_one_in_one_round() -> None:
    places = read_places(PLACES_FIXTURE)
    now_us = places.newest_visit_us or 0
    from_places = ParticipantSession(
        SessionConfig("firefox-0", AGGREGATOR_PUBLIC),
        PlacesSource(PLACES_FIXTURE, MODEL, clock_us=lambda: now_us),
        ParticipantRecord(primitives.generate_signing_key()),
    )
    sessions = {"firefox-0": from_places, "p-0": session("p-0")}
    stand_in = run_round(sessions, 1, threshold=2)
    assert isinstance(stand_in.outcome, AggregateSum)
    votes, totals = decode_total(stand_in.outcome.total, D)
    weights = MODEL.spec.defaults()
    expected = compute_contribution(
        MODEL, places_interactions(places, MODEL, weights, now_us), weights
    )
    assert np.array_equal(votes, expected.vote + independent_vote("p-0", [1])[0])
    assert totals.interactions == 3 + 2
    # its input history is contributed: nothing new for the next round
    assert from_places.receive(announcement(2), 1.0) == []
