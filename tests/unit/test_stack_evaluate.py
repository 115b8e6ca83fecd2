"""``fedrank evaluate`` (fedrank/commands/evaluate.py): held-out metrics of the weights an
aggregator started from and of the weights in its state now."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from aggregator.optimizer import RpropConfig, initial_state
from aggregator.roundlog import RoundLog, RoundRecord
from aggregator.state import AggregatorState, StateDirectory
from fedrank.commands.evaluate import main
from frecency.registry import get_model
from frecency.synthetic import PopulationConfig
from simulation.evaluation import draw_held_out, evaluate_weights

PEOPLE, QUERIES, SEED = 40, 3, 7


def _write_state(path: Path, changes: dict[int, float], logged_start: list[float] | None) -> None:
    spec = get_model("firefox-2018").spec
    optimizer = initial_state(spec, RpropConfig.default()).to_dict()
    for index, value in changes.items():
        optimizer["weights"][index] = value
    directory = StateDirectory(path)
    directory.ensure()
    directory.save(
        AggregatorState(model="firefox-2018", version=2, next_round=3, optimizer=optimizer)
    )
    if logged_start is not None:
        RoundLog(directory.round_log_file).append(
            RoundRecord(
                round=1,
                model="firefox-2018",
                version_before=0,
                version_after=1,
                started_at=0.0,
                ended_at=1.0,
                outcome="completed",
                weights_before=logged_start,
                weights_after=optimizer["weights"],
            )
        )


def _run(path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    code = main(
        [
            "--state",
            str(path),
            "--people",
            str(PEOPLE),
            "--queries",
            str(QUERIES),
            "--seed",
            str(SEED),
            "--json",
        ]
    )
    assert code == 0
    result: dict[str, object] = json.loads(capsys.readouterr().out)
    return result


def _expected(weights: list[float]) -> dict[str, float]:
    model = get_model("firefox-2018")
    held_out = draw_held_out(
        np.random.default_rng(SEED), PopulationConfig(), model, "paper", PEOPLE, QUERIES
    )
    return evaluate_weights(held_out, np.asarray(weights, dtype=np.float64)).as_dict()


def test_final_metrics_are_those_of_the_state_weights(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write_state(tmp_path, {12: 900.0, 20: 40.0}, None)
    result = _run(tmp_path, capsys)
    defaults = [float(w) for w in get_model("firefox-2018").spec.defaults()]
    moved = list(defaults)
    moved[12], moved[20] = 900.0, 40.0
    assert result["initial_weights"] == defaults
    assert result["final_weights"] == moved
    assert result["initial"] == pytest.approx(_expected(defaults))
    assert result["final"] == pytest.approx(_expected(moved))
    assert result["final"] != result["initial"]


def test_initial_weights_come_from_the_first_logged_round(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    start = [float(w) for w in get_model("firefox-2018").spec.defaults()]
    start[13] = 10.0
    _write_state(tmp_path, {}, start)
    result = _run(tmp_path, capsys)
    assert result["initial_weights"] == start
    assert result["rounds_completed"] == 1
    assert result["initial"] == pytest.approx(_expected(start))


def test_a_missing_state_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--state", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fedrank evaluate: no aggregator state") and err.count("\n") == 1
