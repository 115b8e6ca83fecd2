"""Failures of the running stack (the stack issue, "What must hold"; DESIGN.md sections 5
and 7), with the real programs over a real broker:

- participants killed (SIGKILL) in each phase of a round: with at least t left the round
  completes and its vote total is exactly the survivors' votes (so the masks of the ones
  that dropped after sharing their keys were rebuilt); below t it aborts and the model
  does not change;
- the aggregator killed in the middle of a round and restarted: no completed round is
  lost, the model version never goes back, the next round completes.

A victim is killed exactly in a phase by :class:`tests.integration.stack.DirectTap`: the
test sits between the aggregator and the victim on ``fedrank.direct`` and kills the victim
when the message opening that phase arrives for it (before the victim can see it).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from aggregator.roundlog import RoundRecord
from tests.integration.stack import Stack, StackProcess, running_stack
from tests.integration.stack_wire import DirectTap
from tests.integration.test_stack_run import (
    FAST,
    recomputed_vote_totals,
    start_participants_then_aggregator,
)

pytestmark = [pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(180)]

#: The message that opens each phase, as a participant receives it.
PHASE_OPENERS = {
    "check_in": "cohort-invitation",  # checked in and selected, never advertises keys
    "share_keys": "secagg-share-keys-request",  # advertised keys, never shares them
    "masked_input": "secagg-masked-input-request",  # shared keys, never sends its input
    "consistency_check": "secagg-consistency-check-request",  # sent input, never signs
    "unmask": "secagg-unmask-request",  # signed, never reveals shares
}


def _participant(stack: Stack, participant_id: str) -> StackProcess:
    prefix = participant_id.rsplit("-", 1)[0]
    return next(p for p in stack.processes if p.name == f"participant-{prefix}")


def _tap(stack: Stack, victims: dict[str, str | None]) -> DirectTap:
    tap = DirectTap(stack.amqp_url, victims, lambda v: _participant(stack, v).kill())
    tap.install()
    return tap


def _vhost(stack: Stack) -> str:
    return stack.amqp_url.rsplit("/", 1)[1]


def _start(stack: Stack, processes: int, victims: dict[str, str | None], *flags: str) -> DirectTap:
    """Participants, then the tap on the victims, then the aggregator."""
    taps: list[DirectTap] = []
    start_participants_then_aggregator(
        stack,
        _vhost(stack),
        processes,
        *flags,
        before_aggregator=lambda: taps.append(_tap(stack, victims)),
    )
    return taps[0]


def test_participants_killed_in_every_phase_above_quorum_round_completes(
    tmp_path: Path,
) -> None:
    victims: dict[str, str | None] = {
        f"p{i}-0": opener for i, opener in enumerate(PHASE_OPENERS.values())
    }
    with running_stack(tmp_path) as stack:
        tap = _start(stack, 12, victims, "--rounds", "1", "--cohort", "12", "--quorum", "7", *FAST)
        aggregator = stack.processes[-1]
        try:
            records = stack.wait_rounds(1, timeout=120, outcome=None)
            # --rounds 1: it stops by itself once the round is logged.
            stack.wait_exit(aggregator, timeout=30)
        finally:
            tap.close()
        stack.stop_all()
        logs = stack.logs_text()

    (record,) = records
    assert set(tap.dropped) == set(victims), f"not every victim was reached: {tap.dropped}"
    assert record.outcome == "completed", f"{record.abort_reason}\n{logs}"
    assert (record.version_before, record.version_after) == (0, 1)
    survivors = set(record.survivor_ids)
    healthy = {f"p{i}-0" for i in range(len(victims), 12)}
    assert healthy <= survivors
    # Dropped before sending a masked input: not in the sum (p2's masks were rebuilt).
    assert not survivors & {"p0-0", "p1-0", "p2-0"}
    assert set(record.dropped_ids) >= {"p1-0", "p2-0"}
    assert recomputed_vote_totals(records) == {record.round: record.vote_totals}, logs
    assert aggregator.popen.returncode == 0, logs


def test_participants_killed_below_quorum_round_aborts_and_model_stays(
    tmp_path: Path,
) -> None:
    victims: dict[str, str | None] = {f"p{i}-0": PHASE_OPENERS["masked_input"] for i in range(4)}
    with running_stack(tmp_path) as stack:
        tap = _start(stack, 10, victims, "--cohort", "10", "--quorum", "7", *FAST)
        try:
            records = stack.wait_rounds(1, timeout=120, outcome="aborted")
        finally:
            tap.close()
        state = stack.state()
        stack.stop_all()

    first = records[0]
    assert first.outcome == "aborted" and first.abort_reason, first
    assert first.version_after == first.version_before == 0
    assert first.weights_after == first.weights_before
    assert first.vote_totals is None or first.direction is None or not any(first.direction)
    assert state is None or state.version == 0


def test_aggregator_killed_mid_round_restarts_without_losing_rounds(tmp_path: Path) -> None:
    watcher: dict[str, str | None] = {"p0-0": None}
    with running_stack(tmp_path) as stack:
        tap = _start(stack, 8, watcher, "--cohort", "8", "--quorum", "5", *FAST)
        try:
            aggregator = stack.processes[-1]
            completed = stack.wait_rounds(1, timeout=90)
            last_completed = max(r.round for r in completed if r.outcome == "completed")
            # Wait until the next round is past its key exchange, then crash the aggregator.
            stack.wait_for(
                "a round past its key exchange after the first completed one",
                lambda: any(
                    kind == PHASE_OPENERS["masked_input"] and number > last_completed
                    for kind, number in tap.forwarded["p0-0"]
                ),
                timeout=60,
            )
            aggregator.kill()
            in_flight = max(
                n for kind, n in tap.forwarded["p0-0"] if kind == PHASE_OPENERS["masked_input"]
            )
            before_restart = stack.records()
            state_before = stack.state()
            assert state_before is not None
            restarted = stack.start_aggregator("--cohort", "8", "--quorum", "5", *FAST)
            crashed_round = max(x.round for x in before_restart)

            def resumed_round() -> list[RoundRecord] | None:
                records = stack.records()
                done = [r for r in records if r.outcome == "completed" and r.round > crashed_round]
                return records if done else None

            after = stack.wait_for("a completed round after the restart", resumed_round, 90)
        finally:
            tap.close()
        assert restarted.running(), stack.logs_text()
        stack.stop_all()

    # Nothing that completed before the crash is lost or rewritten.
    assert after[: len(before_restart)] == before_restart
    completed_versions = [r.version_after for r in after if r.outcome == "completed"]
    assert completed_versions == sorted(completed_versions)
    assert len(set(completed_versions)) == len(completed_versions), "a version was reused"
    rounds = [r.round for r in after]
    assert rounds == sorted(rounds) and len(set(rounds)) == len(rounds)
    # The round that was in flight is never logged as completed nor reused.
    assert in_flight not in {r.round for r in after if r.outcome == "completed"}
    resumed = [r for r in after[len(before_restart) :] if r.outcome == "completed"]
    assert resumed and all(r.round > in_flight for r in resumed)
    assert resumed[0].version_before == state_before.version
    assert resumed[0].weights_before == list(state_before.optimizer["weights"])
