"""Aggregator state and round log (DESIGN.md section 7): atomic state, append-only log."""

from __future__ import annotations

from pathlib import Path

import pytest

from aggregator.roundlog import RoundLog, RoundLogError, RoundMetrics, RoundRecord
from aggregator.state import AggregatorState, StateDirectory, StateError


def make_record(number: int, outcome: str = "completed") -> RoundRecord:
    return RoundRecord(
        round=number,
        model="firefox-2018",
        version_before=number,
        version_after=number + (outcome == "completed"),
        started_at=1000.0 + number,
        ended_at=1001.5 + number,
        phase_seconds={"check_in": 0.5, "unmask": 0.25},
        checked_in=12,
        selected=10,
        survived=9,
        dropped=1,
        quorum=6,
        outcome=outcome,  # type: ignore[arg-type]
        abort_reason=None if outcome == "completed" else "below quorum at unmask: 5 of t=6",
        vote_totals=[3, -2],
        direction=[1, -1],
        steps=[2.0, 2.0],
        weights_before=[4.0, 14.0],
        weights_after=[6.0, 12.0] if outcome == "completed" else [4.0, 14.0],
        metrics=RoundMetrics(interactions=40, mean_loss=12.5, mean_chars_typed=3.2),
    )


def test_round_log_appends_and_reads_back_in_order(tmp_path: Path) -> None:
    log = RoundLog(tmp_path / "rounds.jsonl")
    for number in range(3):
        log.append(make_record(number))
    records = log.read()
    assert [r.round for r in records] == [0, 1, 2]
    assert records[1].weights_after == [6.0, 12.0]
    assert records[2].metrics.mean_loss == 12.5


def test_round_log_skips_a_torn_last_line_and_keeps_the_rest(tmp_path: Path) -> None:
    log = RoundLog(tmp_path / "rounds.jsonl")
    log.append(make_record(0))
    with open(log.path, "a", encoding="utf-8") as handle:
        handle.write('{"round": 1, "mod')  # a crash in the middle of a write
    assert [r.round for r in log.read()] == [0]


def test_round_log_names_file_and_line_of_a_corrupt_record(tmp_path: Path) -> None:
    log = RoundLog(tmp_path / "rounds.jsonl")
    log.append(make_record(0))
    with open(log.path, "a", encoding="utf-8") as handle:
        handle.write('{"round": "x"}\n')
    with pytest.raises(RoundLogError, match=r"rounds.jsonl:2"):
        log.read()


def test_state_round_trips_and_replace_is_atomic(tmp_path: Path) -> None:
    directory = StateDirectory(tmp_path / "state")
    directory.ensure()
    assert directory.load() is None
    first = AggregatorState(model="firefox-2018", version=1, next_round=1, optimizer={"a": [1]})
    directory.save(first)
    second = first.model_copy(update={"version": 2, "next_round": 2})
    directory.save(second)
    assert directory.load() == second
    # no temporary files are left behind
    assert sorted(p.name for p in directory.path.iterdir()) == ["state.json"]


def test_corrupt_state_is_a_one_line_error(tmp_path: Path) -> None:
    directory = StateDirectory(tmp_path)
    directory.state_file.write_text("{not json", encoding="utf-8")
    with pytest.raises(StateError, match="corrupt"):
        directory.load()




def test_state_directory_that_is_a_file_is_refused(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x", encoding="utf-8")
    with pytest.raises(StateError, match="unusable"):
        StateDirectory(blocker).ensure()
