"""``fedrank rounds``: the round log as a table, as JSON lines, the last N."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aggregator.roundlog import RoundLog
from fedrank.cli import main
from tests.unit.test_aggregator_state import make_record


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    log = RoundLog(tmp_path / "rounds.jsonl")
    log.append(make_record(0))
    log.append(make_record(1, outcome="aborted"))
    log.append(make_record(2))
    return tmp_path


def test_table_shows_each_round_with_outcome_and_reason(
    state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["rounds", "--state", str(state_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["round", "outcome", "version"]
    assert len(lines) == 4
    assert lines[2].split()[:3] == ["1", "aborted", "1->1"]
    assert lines[2].endswith("below quorum at unmask: 5 of t=6")
    assert lines[1].split()[3] == "12/10/9"


def test_json_and_last(state_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rounds", "--state", str(state_dir), "--json", "--last", "2"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [row["round"] for row in rows] == [1, 2]
    assert rows[0]["outcome"] == "aborted"


def test_missing_state_directory_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["rounds", "--state", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no state directory" in err
