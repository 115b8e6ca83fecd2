"""End to end over a real broker (the stack issue, "What must hold"): the real
``fedrank aggregator`` and 12 ``fedrank participant`` processes run secure rounds
(DESIGN.md section 5); rounds complete, the model version rises by one per round, the
round log and state are written, and each round's unmasked vote total equals the sum of
the votes its survivors computed — recomputed here, independently of the processes, from
their deterministic seeds (``participant.history.synthetic_interactions`` and
``participant.signal.compute_contribution``, pure functions of the seed, the participant
id and the weights announced in the rounds it saw)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from aggregator.roundlog import RoundRecord
from broker.topology import DIRECT_EXCHANGE, participant_queue
from frecency.registry import get_model
from participant.history import synthetic_interactions
from participant.signal import compute_contribution
from tests.integration.stack import Stack, running_stack
from tests.integration.stack_wire import bindings, declare_core_topology

pytestmark = [pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(180)]

PROCESSES = 12
ROUNDS = 3
SEED_BASE = 40
#: Short deadlines: every phase ends as soon as all members answered anyway.
FAST = ("--check-in-seconds", "8", "--phase-seconds", "8")


def seed_of(participant_id: str) -> int:
    """Process ``p<i>`` runs ``--synthetic SEED_BASE + i``; its one participant is p<i>-0."""
    return SEED_BASE + int(participant_id.split("-")[0][1:])


def start_participants_then_aggregator(
    stack: Stack,
    vhost: str,
    processes: int,
    *aggregator_flags: str,
    before_aggregator: Callable[[], object] | None = None,
) -> None:
    """Participants first (their model requests wait in the aggregator's queue), so every
    participant sees every announcement from round 1 on; then ``before_aggregator()``;
    then the aggregator."""
    declare_core_topology(stack.amqp_url)
    stack.export_key()
    for i in range(processes):
        stack.start_participants(f"p{i}", SEED_BASE + i, 1)
    wanted = {(DIRECT_EXCHANGE, participant_queue(f"p{i}-0"), f"p{i}-0") for i in range(processes)}
    stack.wait_for("every participant queue bound", lambda: wanted <= bindings(vhost), timeout=60)
    if before_aggregator is not None:
        before_aggregator()
    stack.start_aggregator(*aggregator_flags)


def recomputed_vote_totals(records: list[RoundRecord]) -> dict[int, list[int]]:
    """Each completed round's vote total, from the survivors' seeds alone: a participant
    votes on the interactions of every round it saw since it last contributed."""
    model = get_model(records[0].model)
    last_contribution: dict[str, int] = {}
    totals: dict[int, list[int]] = {}
    for record in records:
        if record.outcome != "completed":
            continue
        total = np.zeros(model.spec.dimension, dtype=np.int64)
        weights = np.asarray(record.weights_before, dtype=np.float64)
        for pid in record.survivor_ids:
            seen = [
                (r.round, np.asarray(r.weights_before, dtype=np.float64))
                for r in records
                if last_contribution.get(pid, 0) < r.round <= record.round
            ]
            pending = synthetic_interactions(seed_of(pid), pid, model, seen)
            total += compute_contribution(model, pending, weights).vote
            last_contribution[pid] = record.round
        totals[record.round] = [int(v) for v in total]
    return totals


def test_rounds_complete_and_vote_totals_match_the_participants_votes(
    tmp_path: Path,
) -> None:
    with running_stack(tmp_path) as stack:
        vhost = stack.amqp_url.rsplit("/", 1)[1]
        start_participants_then_aggregator(
            stack,
            vhost,
            PROCESSES,
            "--rounds",
            str(ROUNDS),
            "--cohort",
            str(PROCESSES),
            "--quorum",
            "8",
            *FAST,
        )
        aggregator = stack.processes[-1]
        assert stack.wait_exit(aggregator, timeout=150) == 0, stack.logs_text()
        records = stack.records()
        state = stack.state()
        table = stack.run("rounds", "--state", str(stack.state_dir))
        as_json = stack.run("rounds", "--state", str(stack.state_dir), "--json")

    assert [r.outcome for r in records] == ["completed"] * ROUNDS, stack.logs_text()
    assert [(r.version_before, r.version_after) for r in records] == [
        (v, v + 1) for v in range(ROUNDS)
    ]
    assert state is not None and state.version == ROUNDS
    assert records[-1].weights_after == pytest.approx(list(state.optimizer["weights"])), (
        "the state holds the last round's weights"
    )
    for before, after in itertools.pairwise(records):
        assert after.weights_before == before.weights_after
        assert after.round > before.round
    for record in records:
        assert record.quorum == 8 and record.selected >= record.survived >= 8
        assert len(record.survivor_ids) == record.survived
        assert record.metrics.interactions > 0
        assert record.vote_totals is not None
        assert all(abs(v) <= record.survived for v in record.vote_totals)
    assert recomputed_vote_totals(records) == {r.round: r.vote_totals for r in records}

    assert table.returncode == 0 and len(table.stdout.strip().splitlines()) == 1 + ROUNDS
    assert [json.loads(line)["round"] for line in as_json.stdout.splitlines()] == [
        r.round for r in records
    ]
    participant_logs = "\n".join(p.log() for p in stack.processes if p.name != "aggregator")
    assert "Traceback" not in participant_logs


def test_skellam_rounds_carry_noise_within_its_bound_and_spend_privacy(tmp_path: Path) -> None:
    """--dp skellam: each member adds discrete noise before masking (DESIGN.md section 6),
    so the unmasked total is the survivors' votes plus noise of variance survivors x
    variance: close to, but not equal to, the recomputed votes; the privacy spent grows."""
    processes, variance = 8, 4.0
    with running_stack(tmp_path) as stack:
        vhost = stack.amqp_url.rsplit("/", 1)[1]
        start_participants_then_aggregator(
            stack,
            vhost,
            processes,
            "--rounds",
            "2",
            "--cohort",
            str(processes),
            "--quorum",
            "5",
            "--dp",
            "skellam",
            "--skellam-variance",
            str(variance),
            *FAST,
        )
        aggregator = stack.processes[-1]
        assert stack.wait_exit(aggregator, timeout=120) == 0, stack.logs_text()
        records = stack.records()

    assert [r.outcome for r in records] == ["completed", "completed"], stack.logs_text()
    honest = recomputed_vote_totals(records)
    for record in records:
        assert record.dp_mode == "skellam" and record.vote_totals is not None
        noise = np.asarray(record.vote_totals) - np.asarray(honest[record.round])
        sigma = float(np.sqrt(record.survived * variance))
        assert np.all(np.abs(noise) <= 8 * sigma), noise
        assert np.any(noise != 0), "no noise in a Skellam round"
    spent = [r.epsilon_spent for r in records]
    assert spent[0] is not None and spent[1] is not None and 0 < spent[0] < spent[1]
