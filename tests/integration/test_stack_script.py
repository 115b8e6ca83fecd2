"""scripts/stack.sh, the stack's main command without Docker (docs/operating.md, "The
stack without Docker"): on the local broker it runs the aggregator and participant
processes for R rounds, prints the round table and the held-out improvement, and leaves
no vhost and no process behind."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from aggregator.roundlog import RoundLog

pytestmark = [pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(240)]

REPO = Path(__file__).resolve().parents[2]
ROUNDS = 2


def test_stack_script_runs_rounds_and_reports_the_improvement() -> None:
    env = {k: v for k, v in os.environ.items() if k != "FEDRANK_AMQP_URL"}
    result = subprocess.run(
        [
            "bash",
            str(REPO / "scripts" / "stack.sh"),
            "--processes",
            "10",
            "--per-process",
            "1",
            "--rounds",
            str(ROUNDS),
            "--cohort",
            "10",
            "--quorum",
            "6",
            "--seed",
            "7",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=220,
        cwd=REPO,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    out = result.stdout
    run_dir = re.search(r"run directory: (\S+)", out)
    assert run_dir is not None, out
    state = REPO / run_dir.group(1) / "state"
    records = RoundLog(state / "rounds.jsonl").read()
    assert [r.outcome for r in records] == ["completed"] * ROUNDS
    # The printed table is the round log's.
    rows = [
        line.split() for line in out.splitlines() if re.match(r"\s+\d+ (completed|aborted)", line)
    ]
    assert [int(row[0]) for row in rows] == [r.round for r in records]
    assert f"version {ROUNDS} after {ROUNDS} completed of {ROUNDS} logged rounds" in out
    assert re.search(r"(?m)^initial\s+\d", out) and re.search(r"(?m)^final\s+\d", out)
    assert "change: chars typed" in out

    # The held-out figures it printed are those of `fedrank evaluate` on that state.
    evaluated = subprocess.run(
        [
            str(REPO / ".venv" / "bin" / "python"),
            "-m",
            "fedrank.commands.evaluate",
            "--state",
            str(state),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    final = json.loads(evaluated.stdout)["final"]
    printed = re.search(r"(?m)^final\s+([\d.]+)\s+([\d.]+)", out)
    assert printed is not None
    assert float(printed.group(1)) == pytest.approx(final["chars_typed"], abs=1e-3)
    assert float(printed.group(2)) == pytest.approx(final["rank_selected"], abs=1e-3)

    vhost = re.search(r"fresh vhost (\S+) on the local broker", result.stderr)
    assert vhost is not None, result.stderr[-2000:]
    vhosts = subprocess.run(
        ["rabbitmqctl", "-q", "list_vhosts"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert vhost.group(1) not in vhosts, "the run's vhost was not deleted"
    leftovers = subprocess.run(
        ["pgrep", "-f", run_dir.group(1)], capture_output=True, text=True, check=False
    ).stdout.split()
    assert not leftovers, f"processes left running: {leftovers}"
    shutil.rmtree(REPO / run_dir.group(1))
