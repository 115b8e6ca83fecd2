"""Show the aggregator's round log (DESIGN.md section 7) the way a person watches a study.

One row per round: outcome, model version, participants (checked in / selected /
survived), quorum, phase time, the held-out-free metrics the survivors reported, and how
far the weights moved. ``--json`` prints the raw JSON lines; ``--follow`` keeps printing
rounds as the aggregator logs them.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from aggregator.roundlog import RoundLog, RoundLogError, RoundRecord
from aggregator.state import ROUND_LOG_FILE

HEADER = (
    f"{'round':>5} {'outcome':<9} {'version':>9} {'in/sel/surv':>12} {'quorum':>6} "
    f"{'seconds':>8} {'interact':>8} {'loss':>8} {'chars':>6} {'rank':>5} {'moved':>6}  reason"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--state", required=True, type=Path, help="aggregator state directory")
    parser.add_argument("--json", action="store_true", help="print raw JSON lines")
    parser.add_argument("--follow", action="store_true", help="keep printing new rounds")
    parser.add_argument("--last", type=int, default=None, metavar="N", help="only the last N")
    parser.add_argument("--poll", type=float, default=0.5, help=argparse.SUPPRESS)


def _fmt(value: float | None, width: int, digits: int) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.{digits}f}"


def format_row(record: RoundRecord) -> str:
    """One table row for a round."""
    moved = sum(
        abs(after - before)
        for before, after in zip(record.weights_before, record.weights_after, strict=True)
    )
    people = f"{record.checked_in}/{record.selected}/{record.survived}"
    seconds = record.ended_at - record.started_at
    version = f"{record.version_before}->{record.version_after}"
    m = record.metrics
    return (
        f"{record.round:>5} {record.outcome:<9} {version:>9} {people:>12} {record.quorum:>6} "
        f"{seconds:>8.2f} {m.interactions:>8} {_fmt(m.mean_loss, 8, 2)} "
        f"{_fmt(m.mean_chars_typed, 6, 2)} {_fmt(m.mean_rank_selected, 5, 2)} "
        f"{moved:>6.0f}  {record.abort_reason or ''}"
    ).rstrip()


def _emit(records: list[RoundRecord], as_json: bool) -> None:
    for record in records:
        print(record.model_dump_json() if as_json else format_row(record), flush=True)


def run(args: argparse.Namespace) -> int:
    path: Path = args.state / ROUND_LOG_FILE
    if not args.state.is_dir():
        print(f"fedrank rounds: no state directory {args.state}", file=sys.stderr)
        return 2
    log = RoundLog(path)
    try:
        records = log.read()
    except RoundLogError as exc:
        print(f"fedrank rounds: {exc}", file=sys.stderr)
        return 2
    if args.last is not None:
        records = records[-args.last :] if args.last > 0 else []
    if not args.json:
        print(HEADER)
    _emit(records, args.json)
    if not args.follow:
        if not records and not args.json:
            print("(no rounds logged yet)")
        return 0
    seen = len(log.read())
    try:
        while True:
            time.sleep(args.poll)
            new = list(log.iter_records(start_line=seen))
            seen += len(new)
            _emit(new, args.json)
    except KeyboardInterrupt:
        return 0
    except RoundLogError as exc:
        print(f"fedrank rounds: {exc}", file=sys.stderr)
        return 2
