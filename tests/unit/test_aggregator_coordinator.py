"""The aggregator's round state machine (aggregator/coordinator.py), driven entirely in
memory on a logical clock, with real crypto.secagg clients standing in for participants
and every message crossing the codec."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

import crypto.secagg as secagg
from aggregator.config import CoordinatorConfig
from aggregator.coordinator import Coordinator, ModelState
from aggregator.events import MessageRejected, Output, RoundAborted, RoundCompleted, RoundOpened
from aggregator.optimizer import initial_state
from broker.codec import WireMessage, decode, encode
from broker.messages import (
    PARTICIPANT_INBOX_TYPES,
    SUBMISSION_TYPES,
    CohortInvitation,
    MaskedInput,
    ModelAnnouncement,
    ModelRequest,
    PrivacySettings,
    submission_from_crypto,
)
from broker.topology import DIRECT_EXCHANGE, MODEL_EXCHANGE
from crypto.dp import encode_for_ring
from crypto.hazmat import primitives
from frecency.registry import get_model
from tests.unit.test_aggregator_support import Member

SPEC = get_model("firefox-2018").spec
D = SPEC.dimension
KEY = primitives.generate_signing_key()
PUBLIC = primitives.public_signing_key(KEY)


def make_coordinator(**changes: object) -> Coordinator:
    settings: dict[str, object] = {
        "cohort_size": 6,
        "quorum": 4,
        "check_in_seconds": 5.0,
        "phase_seconds": 10.0,
    }
    settings.update(changes)
    config = CoordinatorConfig(**settings)  # type: ignore[arg-type]
    model = ModelState(initial_state(SPEC, config.optimizer), version=0, next_round=1)
    return Coordinator(config, SPEC, KEY, model)


@dataclass
class Harness:
    coordinator: Coordinator
    members: dict[str, Member]
    now: float = 0.0
    events: list[object] = field(default_factory=list)
    sent: list[WireMessage] = field(default_factory=list)

    def deliver(self, output: Output) -> list[tuple[str, WireMessage]]:
        self.events.extend(output.events)
        replies = []
        for out in output.messages:
            wire = decode(encode(out.message), PARTICIPANT_INBOX_TYPES)
            self.sent.append(wire)
            targets = (
                list(self.members.values())
                if out.exchange == MODEL_EXCHANGE
                else [self.members[out.routing_key]]
            )
            assert out.exchange in (MODEL_EXCHANGE, DIRECT_EXCHANGE)
            for member in targets:
                reply = member.handle(wire)
                if reply is not None:
                    replies.append((member.pid, reply))
        return replies

    def submit(self, pid: str, message: WireMessage, user: str | None = None) -> Output:
        wire = decode(encode(message), SUBMISSION_TYPES)
        return self.coordinator.receive(wire, user or f"participant-{pid}", self.now)

    def run_round(
        self,
        *,
        check_in: list[str] | None = None,
        pending: list[tuple[str, WireMessage]] | None = None,
    ) -> object:
        """Open (if needed), check everyone in, and pump messages until the round ends."""
        if self.coordinator.round_number is None:
            self.deliver(self.coordinator.open_round(self.now))
        start_events = len(self.events)
        pending = list(pending or [])
        for pid in check_in if check_in is not None else list(self.members):
            member = self.members[pid]
            if member.stop_at != "check-in":
                pending += self.deliver(self.submit(pid, member.check_in()))
        while True:
            batch, pending = pending, []
            for pid, message in batch:
                pending += self.deliver(self.submit(pid, message))
            ended = [
                e
                for e in self.events[start_events:]
                if isinstance(e, RoundCompleted | RoundAborted)
            ]
            if ended:
                return ended[0]
            if not pending:
                deadline = self.coordinator.next_deadline()
                assert deadline is not None
                self.now = max(self.now, deadline)
                pending += self.deliver(self.coordinator.tick(self.now))


def harness(
    count: int = 6, votes: dict[str, np.ndarray] | None = None, **config: object
) -> Harness:
    rng = np.random.default_rng(11)  # votes are test data, not keys
    members = {
        f"p{i}": Member(f"p{i}", (votes or {}).get(f"p{i}", rng.integers(-1, 2, D)), PUBLIC)
        for i in range(count)
    }
    return Harness(make_coordinator(**config), members)


def rejections(h: Harness) -> list[str]:
    return [e.reason for e in h.events if isinstance(e, MessageRejected)]


# --- complete rounds --------------------------------------------------------------------


def test_a_round_completes_and_its_vote_total_is_the_sum_of_the_votes() -> None:
    h = harness()
    ended = h.run_round()
    assert isinstance(ended, RoundCompleted)
    record = ended.record
    expected = np.sum([m.vote for m in h.members.values()], axis=0)
    assert record.vote_totals == expected.tolist()
    assert record.direction == np.sign(expected).tolist()
    assert (record.round, record.version_before, record.version_after) == (1, 0, 1)
    assert (record.checked_in, record.selected, record.survived, record.dropped) == (6, 6, 6, 0)
    assert sorted(record.survivor_ids) == sorted(h.members)
    assert record.metrics.interactions == 12 and record.metrics.mean_loss == pytest.approx(1.5)
    assert record.weights_after != record.weights_before
    assert h.coordinator.model.version == 1
    # the next round is announced with the new weights
    announcement = h.sent[-1]
    assert isinstance(announcement, ModelAnnouncement)
    assert (announcement.round, announcement.model_version) == (2, 1)
    assert list(announcement.weights) == record.weights_after
    assert not rejections(h)


def test_rounds_follow_each_other_and_the_model_version_rises() -> None:
    h = harness()
    for version in (1, 2):
        ended = h.run_round()
        assert isinstance(ended, RoundCompleted) and ended.model.version == version
    assert [e.round for e in h.events if isinstance(e, RoundOpened)] == [1, 2, 3]


def test_check_in_closes_as_soon_as_the_cohort_target_is_reached() -> None:
    h = harness(count=8, cohort_size=5, quorum=3)
    h.deliver(h.coordinator.open_round(0.0))
    outputs = [h.submit(pid, m.check_in()) for pid, m in h.members.items()]
    invitations = [o for o in outputs[4].messages if isinstance(o.message, CohortInvitation)]
    assert len(invitations) == 5 and h.coordinator.phase == "AdvertiseKeys"
    late = [e for o in outputs[5:] for e in o.events]
    assert len(late) == 3
    assert all(isinstance(e, MessageRejected) and "check-in is closed" in e.reason for e in late)


def test_model_request_is_answered_with_the_current_announcement_on_the_direct_exchange() -> None:
    h = harness()
    h.deliver(h.coordinator.open_round(0.0))
    output = h.submit("p3", ModelRequest(round=0, participant_id="p3"))
    (out,) = output.messages
    assert (out.exchange, out.routing_key) == (DIRECT_EXCHANGE, "p3")
    assert out.message == h.coordinator.announcement


# --- dropouts ---------------------------------------------------------------------------

PHASE_KINDS = [
    "cohort-invitation",
    "secagg-share-keys-request",
    "secagg-masked-input-request",
    "secagg-consistency-check-request",
    "secagg-unmask-request",
]


@pytest.mark.parametrize("kind", PHASE_KINDS)
def test_dropouts_above_quorum_still_complete(kind: str) -> None:
    h = harness()
    h.members["p0"].stop_at = kind
    h.members["p1"].stop_at = kind
    ended = h.run_round()
    assert isinstance(ended, RoundCompleted), getattr(ended, "reason", None)
    survivors = set(ended.record.survivor_ids)
    dropped_before_masking = kind in PHASE_KINDS[:3]
    assert survivors.isdisjoint({"p0", "p1"}) == dropped_before_masking
    expected = np.sum([h.members[p].vote for p in survivors], axis=0)
    assert ended.record.vote_totals == expected.tolist()


@pytest.mark.parametrize("kind", ["check-in", *PHASE_KINDS])
def test_below_quorum_at_any_phase_aborts_with_the_model_unchanged(kind: str) -> None:
    h = harness()
    for pid in ("p0", "p1", "p2"):
        h.members[pid].stop_at = kind
    weights = h.coordinator.model.optimizer.weights
    ended = h.run_round()
    assert isinstance(ended, RoundAborted)
    assert "below" in ended.reason
    assert ended.record.outcome == "aborted" and ended.record.version_after == 0
    assert h.coordinator.model.version == 0
    assert h.coordinator.model.optimizer.weights == weights
    assert ended.record.weights_after == list(weights)
    assert h.coordinator.round_number == 2  # the next round is open


def test_nobody_checking_in_keeps_the_round_open_and_reannounces() -> None:
    h = harness()
    h.deliver(h.coordinator.open_round(0.0))
    output = h.coordinator.tick(100.0)
    assert [o.exchange for o in output.messages] == [MODEL_EXCHANGE]
    assert h.coordinator.round_number == 1 and h.coordinator.phase == "check-in"


# --- bad input --------------------------------------------------------------------------


def test_vote_total_outside_the_poisoning_bound_aborts_and_keeps_the_model() -> None:
    poisoned = np.zeros(D, dtype=np.int64)
    poisoned[3] = 50
    h = harness(votes={"p0": poisoned})
    ended = h.run_round()
    assert isinstance(ended, RoundAborted)
    assert "poisoning bound" in ended.reason and ended.record.abort_phase == "step"
    assert h.coordinator.model.version == 0


def test_skellam_mode_allows_the_documented_noise_slack() -> None:
    noisy = np.zeros(D, dtype=np.int64)
    noisy[0] = 20  # beyond n = 6, within 8 sigma of 6 members' noise of variance 4
    h = harness(votes={"p0": noisy}, privacy=PrivacySettings(mode="skellam", skellam_variance=4.0))
    ended = h.run_round()
    assert isinstance(ended, RoundCompleted)
    assert ended.record.epsilon_spent is not None and ended.record.epsilon_spent > 0


def test_wrong_round_wrong_phase_replay_and_stale_version_are_rejected_and_counted() -> None:
    h = harness()
    h.deliver(h.coordinator.open_round(0.0))
    member = h.members["p0"]
    good = member.check_in()
    assert not h.submit("p0", good).events
    reasons = [
        h.submit("p0", good.model_copy(update={"round": 7})).events,
        h.submit("p0", good).events,  # the same message again (a replay)
        h.submit("p1", h.members["p1"].check_in().model_copy(update={"model_version": 5})).events,
        h.submit(
            "p2",
            MaskedInput.from_crypto(
                secagg.MaskedInput(1, b"", 1, np.zeros(D + 5, dtype=np.uint32)), "p2"
            ),
        ).events,
    ]
    texts = [e[0].reason for e in reasons]  # type: ignore[union-attr]
    assert texts[0].startswith("wrong round")
    assert texts[1].startswith("duplicate")
    assert texts[2].startswith("stale model version")
    assert texts[3].startswith("wrong phase")
    replies = []
    for pid in ("p1", "p2", "p3", "p4", "p5"):
        replies += h.deliver(h.submit(pid, h.members[pid].check_in()))
    ended = h.run_round(check_in=[], pending=replies)
    assert isinstance(ended, RoundCompleted)
    assert ended.record.rejected_messages == 4
    assert ended.record.rejected_reasons == {
        "duplicate": 1,
        "stale model version 5 (current 0)": 1,
        "wrong phase": 1,
        "wrong round": 1,
    }


def test_user_id_mismatch_is_rejected_when_broker_users_are_checked() -> None:
    h = harness(check_user_ids=True)
    h.deliver(h.coordinator.open_round(0.0))
    output = h.submit("p0", h.members["p0"].check_in(), user="participant-p1")
    (event,) = output.events
    assert isinstance(event, MessageRejected) and event.reason.startswith("user id mismatch")
    assert not h.submit("p0", h.members["p0"].check_in()).events


def test_secagg_messages_from_outside_the_cohort_or_with_a_wrong_member_id_are_rejected() -> None:
    h = harness(count=7, cohort_size=6)
    h.deliver(h.coordinator.open_round(0.0))
    invitations: dict[str, CohortInvitation] = {}
    for pid in list(h.members)[:6]:
        for out in h.submit(pid, h.members[pid].check_in()).messages:
            assert isinstance(out.message, CohortInvitation)
            invitations[out.routing_key] = out.message

    def advert(pid: str, member: int) -> WireMessage:
        keys = secagg.AdvertiseKeys(1, member, b"c" * 32, b"m" * 32, b"s" * 64)
        return submission_from_crypto(keys, pid)

    def reason(pid: str, member: int) -> str:
        (event,) = h.submit(pid, advert(pid, member)).events
        assert isinstance(event, MessageRejected)
        return event.reason

    member_of_p0 = invitations["p0"].member
    assert reason("p6", 1).startswith("unknown participant")
    assert reason("p0", member_of_p0 % 6 + 1).startswith("wrong member id")
    assert "signature does not verify" in reason("p0", member_of_p0)
    assert h.coordinator.phase == "AdvertiseKeys"


def test_wrong_session_and_retried_secagg_messages_are_rejected_and_the_round_goes_on() -> None:
    h = harness()
    h.deliver(h.coordinator.open_round(0.0))
    adverts: list[tuple[str, WireMessage]] = []
    for pid, member in h.members.items():
        adverts += h.deliver(h.submit(pid, member.check_in()))
    share_requests: list[tuple[str, WireMessage]] = []
    for pid, advert in adverts:
        share_requests += h.deliver(h.submit(pid, advert))
    (first_pid, first_shares), *rest = share_requests
    assert first_shares.kind == "secagg-encrypted-shares"
    forged = first_shares.model_copy(update={"session": b"\x01" * 32})
    (event,) = h.submit(first_pid, forged).events
    assert isinstance(event, MessageRejected) and event.reason.startswith("wrong session")
    assert not h.submit(first_pid, first_shares).events
    (event,) = h.submit(first_pid, first_shares).events  # retried after a reconnect
    assert isinstance(event, MessageRejected) and event.reason.startswith("duplicate")
    pending: list[tuple[str, WireMessage]] = []
    for pid, shares in rest:
        pending += h.deliver(h.submit(pid, shares))
    ended = h.run_round(check_in=[], pending=pending)
    assert isinstance(ended, RoundCompleted) and ended.record.survived == 6
    assert ended.record.rejected_reasons == {"duplicate": 1, "wrong session": 1}


def test_metric_totals_beyond_the_clip_are_not_reported_but_the_step_is_taken() -> None:
    h = harness()
    cheat = h.members["p0"]
    cheat.raw_input = encode_for_ring([*cheat.vote.tolist(), 1, 10**8, 5, 1, 3])
    ended = h.run_round()
    assert isinstance(ended, RoundCompleted) and ended.model.version == 1
    assert ended.record.metrics.interactions == 0 and ended.record.metrics.mean_loss is None
    assert ended.record.metrics_problem is not None
    assert ended.record.metrics_problem.startswith("loss total")


def test_only_the_call_that_unmasks_is_flagged_expensive() -> None:
    h = harness()
    coordinator = h.coordinator
    flagged: list[tuple[bool, bool]] = []
    receive = coordinator.receive

    def watched(message: WireMessage, user: str | None, now: float) -> Output:
        expensive = coordinator.expensive(now, receiving=True)
        output = receive(message, user, now)
        flagged.append((expensive, any(isinstance(e, RoundCompleted) for e in output.events)))
        return output

    coordinator.receive = watched  # type: ignore[method-assign,assignment]
    assert isinstance(h.run_round(), RoundCompleted)
    assert flagged[-1] == (True, True)
    assert sum(expensive for expensive, _ in flagged) == 1


def test_a_failure_inside_unmasking_aborts_the_round_instead_of_the_aggregator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken_unmask(*args: object) -> object:
        raise ValueError("shares of different lengths")

    monkeypatch.setattr("crypto.secagg.server.unmask", broken_unmask)
    h = harness()
    ended = h.run_round()
    assert isinstance(ended, RoundAborted)
    assert (
        ended.reason.startswith("secure aggregation failed") and "different lengths" in ended.reason
    )
    assert ended.record.abort_phase == "unmask" and h.coordinator.model.version == 0
    assert h.coordinator.round_number == 2
