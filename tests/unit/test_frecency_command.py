"""``fedrank frecency``: the table, --json, --weights, --model/--now, and one-line errors."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from fedrank.cli import main
from frecency.history import MICROSECONDS_PER_DAY
from frecency.places import read_places

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "places" / "places.sqlite"
BASE = "http://127.0.0.1:38517"


def run_json(capsys: pytest.CaptureFixture[str], *extra: str) -> list[dict[str, Any]]:
    assert main(["frecency", "--places", str(FIXTURE), "--json", *extra]) == 0
    rows: list[dict[str, Any]] = json.loads(capsys.readouterr().out)
    return rows


def by_url(rows: list[dict[str, Any]]) -> dict[str, int]:
    return {row["url"]: row["frecency"] for row in rows}


def write(tmp_path: Path, content: str) -> Path:
    path = tmp_path / "weights.json"
    path.write_text(content)
    return path


def test_table_is_aligned_sorted_and_matches_firefox(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["frecency", "--places", str(FIXTURE)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["frecency", "stored", "url"]
    assert len(lines) == 1 + len(read_places(FIXTURE).pages)
    url_column = lines[0].index("url")
    values = []
    for line in lines[1:]:
        ours, stored, url = line.split()
        assert line.index(url) == url_column
        assert ours == stored
        values.append(int(ours))
    assert values == sorted(values, reverse=True)
    assert lines[1].split()[2] == BASE + "/docs/manual.html"


def test_json_has_url_frecency_and_stored(capsys: pytest.CaptureFixture[str]) -> None:
    rows = run_json(capsys)
    assert len(rows) == 32
    assert all(set(row) == {"url", "frecency", "stored_frecency"} for row in rows)
    assert all(row["frecency"] == row["stored_frecency"] for row in rows)


def test_partial_weights_object(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    weights = write(tmp_path, json.dumps({"halfLifeDays": 60}))
    rows = by_url(run_json(capsys, "--weights", str(weights)))
    # one high-weight (100) typed visit: day + trunc(ln(100) / (ln 2 / 60))
    history = read_places(FIXTURE)
    days_to_one = int(math.log(100) / (math.log(2) / 60))
    (visit,) = history.page(BASE + "/typed.html").visits
    assert rows[BASE + "/typed.html"] == visit.time_us // MICROSECONDS_PER_DAY + days_to_one
    # a bookmark without visits is one high sample on the bookmark's day
    added = history.page(BASE + "/unvisited-bookmark.html").bookmark_added_us
    assert added is not None
    assert rows[BASE + "/unvisited-bookmark.html"] == added // MICROSECONDS_PER_DAY + days_to_one


def test_full_weights_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    defaults = run_json(capsys)
    same = run_json(capsys, "--weights", str(write(tmp_path, "[30, 200, 100, 50, 20]")))
    assert by_url(same) == by_url(defaults)
    flat = run_json(capsys, "--weights", str(write(tmp_path, "[30, 50, 50, 50, 50]")))
    assert by_url(flat)[BASE + "/typed.html"] < by_url(defaults)[BASE + "/typed.html"]
    assert by_url(flat)[BASE + "/news.html"] == by_url(defaults)[BASE + "/news.html"]


def test_firefox_2018_depends_on_now(capsys: pytest.CaptureFixture[str]) -> None:
    newest = read_places(FIXTURE).newest_visit_us
    assert newest is not None
    day = newest // MICROSECONDS_PER_DAY
    soon = f"{_iso(day)}T23:00:00"
    later = f"{_iso(day + 120)}T23:00:00"
    at_visit = by_url(run_json(capsys, "--model", "firefox-2018", "--now", soon))
    months_later = by_url(run_json(capsys, "--model", "firefox-2018", "--now", later))
    assert at_visit[BASE + "/docs/manual.html"] > months_later[BASE + "/docs/manual.html"] > 0
    # typed visit bonus 2000 in the first bucket (weight 100): ceil(1 * 2000 / 1)
    assert at_visit[BASE + "/typed.html"] == 2000


def _iso(day: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(day * 86_400, tz=UTC).date().isoformat()


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ('{"halfLife": 3}', "unknown weight 'halfLife'"),
        ("[1, 2, 3]", "3 numbers given, firefox-current has 5"),
        ('{"highWeight": "lots"}', "highWeight must be a number"),
        ('{"highWeight": true}', "highWeight must be a number"),
        ('{"highWeight": 10.5}', "highWeight must be an integer"),
        ('{"lowWeight": -1}', "lowWeight=-1 outside"),
        ('{"halfLifeDays": 0.5}', "halfLifeDays=0.5 outside"),
        ("[30, 200, 100, 50, NaN]", "lowWeight must be finite"),
        ("{not json", "not valid JSON"),
        ('"weights"', "expected a JSON list or object"),
    ],
)
def test_bad_weights_fail_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, reason: str
) -> None:
    weights = write(tmp_path, content)
    assert main(["frecency", "--places", str(FIXTURE), "--weights", str(weights)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and reason in captured.err
    assert "Traceback" not in captured.err


def test_missing_weights_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    absent = tmp_path / "absent.json"
    assert main(["frecency", "--places", str(FIXTURE), "--weights", str(absent)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot read weights" in err


@pytest.mark.parametrize("content", [None, b"", b"plain text, no database here"])
def test_bad_places_fail_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes | None
) -> None:
    places = tmp_path / "places.sqlite"
    if content is not None:
        places.write_bytes(content)
    assert main(["frecency", "--places", str(places)]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith("fedrank frecency: error: ") and str(places) in captured.err


def test_unknown_model_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["frecency", "--places", str(FIXTURE), "--model", "chrome"])
    assert info.value.code == 2
    assert "firefox-current" in capsys.readouterr().err
