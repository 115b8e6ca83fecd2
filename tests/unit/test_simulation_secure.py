"""Secure aggregation inside the paper's simulation (simulation/secure.py, the rounds'
outcome in simulation/rounds.py, the stack run of simulation/broker_round.py over the
in-memory broker, and the ``fedrank simulate`` flags): same weights as the plain sum
without dropouts, survivors' sums with dropouts, aborted rounds leave the model."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from broker.memory import MemoryBroker
from crypto.secagg import Phase
from fedrank.cli import main
from frecency.registry import get_model
from simulation.aggregation import AggregationAborted, AggregationOutcome, PlainSum, VotesSummed
from simulation.broker_round import run_over_broker
from simulation.rounds import SimulationConfig, run_simulation
from simulation.secure import SecureConfig, SecureSum, draw_dropouts

IntArray = np.ndarray
SMALL = SimulationConfig(participants=60, per_round=15, rounds=4, held_out_people=20, seed=7)


class Recording:
    """Wraps an aggregation and keeps every round's votes and outcome."""

    def __init__(self, inner: PlainSum | SecureSum) -> None:
        self.inner = inner
        self.votes: list[list[IntArray]] = []
        self.outcomes: list[AggregationOutcome] = []
        self.dropouts: list[dict[int, Phase]] = []

    def run_round(self, votes: Sequence[IntArray], round_number: int) -> AggregationOutcome:
        outcome = self.inner.run_round(votes, round_number)
        self.votes.append([np.array(v, copy=True) for v in votes])
        self.outcomes.append(outcome)
        if isinstance(self.inner, SecureSum):
            self.dropouts.append(dict(self.inner.last_dropouts))
        return outcome


def test_secure_without_dropouts_gives_the_plain_weights_round_by_round() -> None:
    plain = run_simulation(SMALL, PlainSum())
    secure = run_simulation(SMALL, SecureSum(SecureConfig(secagg="plus")))
    full = run_simulation(SMALL, SecureSum(SecureConfig(secagg="full", threshold_fraction=0.5)))
    defaults = tuple(float(w) for w in get_model(SMALL.model).spec.defaults())
    assert any(r.weights != defaults for r in plain.rounds)  # the model did move
    for run in (secure, full):
        assert [r.weights for r in run.rounds] == [r.weights for r in plain.rounds]
        assert [r.as_dict() for r in run.rounds] == [r.as_dict() for r in plain.rounds]
        assert all(r.outcome == "completed" and r.survivors == 15 for r in run.rounds)


def test_with_dropouts_the_total_is_the_survivors_plain_sum() -> None:
    # 40 members on the complete graph, t = 20: a 10% dropout rate leaves ~36 answering.
    config = SimulationConfig(participants=80, per_round=40, rounds=3, held_out_people=20, seed=3)
    secure = SecureSum.seeded(SecureConfig(secagg="full", threshold_fraction=0.5, dropout=0.1), 3)
    recording = Recording(secure)
    result = run_simulation(config, recording)
    dropped_any = False
    for row, votes, outcome, dropouts in zip(
        result.rounds, recording.votes, recording.outcomes, recording.dropouts, strict=True
    ):
        assert row.outcome == "completed"
        assert isinstance(outcome, VotesSummed)
        # Recomputed independently: members that vanished before sending their masked
        # input are out, those that vanished later are in (their input arrived).
        sent_input = [
            index
            for index in range(len(votes))
            if dropouts.get(index + 1)
            not in (Phase.ADVERTISE_KEYS, Phase.SHARE_KEYS, Phase.MASKED_INPUT_COLLECTION)
        ]
        assert list(outcome.included) == sent_input
        expected = np.sum([votes[i] for i in sent_input], axis=0)
        assert outcome.total.tolist() == expected.tolist()
        assert row.survivors == len(sent_input)
        dropped_any |= len(sent_input) < len(votes)
    assert dropped_any


def test_dropouts_change_nothing_but_the_sum() -> None:
    """Dropouts come from their own stream: the population and samples stay the plain
    run's, so the first round's held-out baseline and voters agree."""
    plain = run_simulation(SMALL, PlainSum())
    dropping = run_simulation(SMALL, SecureSum.seeded(SecureConfig(dropout=0.05), SMALL.seed))
    assert dropping.baseline == plain.baseline
    assert [r.voters for r in dropping.rounds] == [r.voters for r in plain.rounds]
    assert dropping.rounds[0].interactions == plain.rounds[0].interactions


def test_below_threshold_the_round_aborts_and_the_model_stays() -> None:
    config = SimulationConfig(participants=40, per_round=10, rounds=3, held_out_people=20, seed=2)
    secure = SecureSum.seeded(SecureConfig(secagg="full", threshold_fraction=1.0, dropout=1.0), 2)
    result = run_simulation(config, secure)
    defaults = tuple(float(w) for w in get_model(config.model).spec.defaults())
    for row in result.rounds:
        assert row.outcome == "aborted"
        assert row.survivors == 0
        assert row.abort_reason is not None and "below threshold" in row.abort_reason
        assert row.weights == defaults
        assert row.direction == (0,) * len(defaults)
        assert row.metrics == result.baseline
        data = row.as_dict()
        assert data["outcome"] == "aborted" and data["abort_reason"] == row.abort_reason


def test_one_late_dropout_below_a_full_threshold_aborts_at_unmasking() -> None:
    votes = [np.array([1, -1, 0], dtype=np.int64) for _ in range(4)]

    class OneLate:
        def random(self, n: int) -> np.ndarray:
            return np.array([0.0] + [1.0] * (n - 1))

        def integers(self, low: int, high: int, n: int) -> np.ndarray:
            return np.full(n, 4)  # Unmasking

    config = SecureConfig(secagg="full", threshold_fraction=1.0, dropout=0.5)
    summing = SecureSum(config, OneLate())  # type: ignore[arg-type]
    outcome = summing.run_round(votes, 1)
    assert isinstance(outcome, AggregationAborted)
    assert "3 of t=4" in outcome.reason


def test_draw_dropouts_is_seeded_and_covers_every_phase() -> None:
    first = draw_dropouts(np.random.default_rng(1), 400, 0.5)
    assert first == draw_dropouts(np.random.default_rng(1), 400, 0.5)
    assert 150 < len(first) < 250
    assert set(first.values()) == {
        Phase.ADVERTISE_KEYS,
        Phase.SHARE_KEYS,
        Phase.MASKED_INPUT_COLLECTION,
        Phase.CONSISTENCY_CHECK,
        Phase.UNMASKING,
    }
    assert draw_dropouts(np.random.default_rng(1), 400, 0.0) == {}


def test_threshold_fraction() -> None:
    assert SecureConfig().threshold(30) == 20
    assert SecureConfig().threshold(400) == 267
    assert SecureConfig(threshold_fraction=0.5).threshold(1) == 1
    with pytest.raises(ValueError):
        SecureConfig(threshold_fraction=0.0)
    with pytest.raises(ValueError):
        SecureConfig(dropout=1.5)


def test_the_stack_over_the_memory_broker_gives_the_in_process_weights() -> None:
    config = SimulationConfig(participants=30, per_round=10, rounds=3, held_out_people=20, seed=5)
    in_process = run_simulation(config, SecureSum(SecureConfig()))
    over_stack = run_over_broker(config, SecureConfig(), MemoryBroker().connect)
    assert [r.as_dict() for r in over_stack.rounds] == [r.as_dict() for r in in_process.rounds]
    assert over_stack.baseline == in_process.baseline


def test_simulate_command_secure_by_default_with_dropouts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "result.json"
    code = main(
        [
            "simulate",
            "--participants", "40",
            "--per-round", "20",
            "--rounds", "2",
            "--held-out-people", "20",
            "--secagg", "full",
            "--threshold-fraction", "0.5",
            "--dropout", "0.1",
            "--json", str(out),
        ]
    )  # fmt: skip
    assert code == 0
    data = json.loads(out.read_text())
    assert data["aggregation"]["mode"] == "secure"
    assert data["aggregation"]["dropout"] == 0.1
    for row in data["rounds"]:
        assert row["outcome"] in ("completed", "aborted")
        assert {"survivors", "abort_reason"} <= set(row)
    assert "aggregation" in capsys.readouterr().err


def test_simulate_command_rejects_contradictory_flags(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["simulate", "--participants", "20", "--per-round", "5", "--rounds", "1"]
    assert main([*base, "--no-secure", "--dropout", "0.1"]) == 2
    assert main([*base, "--no-secure", "--transport", "rabbitmq"]) == 2
    assert main([*base, "--transport", "rabbitmq", "--dropout", "0.1"]) == 2
    assert main([*base, "--threshold-fraction", "1.5"]) == 2
    assert "dropout" in capsys.readouterr().err


def test_the_ring_is_sized_for_the_simulated_dropout_rate() -> None:
    from crypto.secagg import degree_for, logarithmic_degree

    no_drops = SecureSum.seeded(SecureConfig(secagg="plus", dropout=0.0), 0)
    heavy = SecureSum.seeded(SecureConfig(secagg="plus", dropout=0.3), 0)
    full = SecureSum.seeded(SecureConfig(secagg="full"), 0)
    assert no_drops.degree(400) == logarithmic_degree(400) < 400 - 1
    assert heavy.degree(400) == degree_for(400, 0.3) > no_drops.degree(400)
    assert full.degree(400) is None
    assert SecureSum.seeded(SecureConfig(secagg="plus", degree=8), 0).degree(400) == 8
