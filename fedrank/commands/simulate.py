"""``fedrank simulate``: the paper's simulation (section 5.1) — a synthetic population
learns Firefox's frecency weights by sign votes and bounded Rprop; held-out metrics per
round (docs/simulation.md)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TextIO

from frecency.registry import MODEL_NAMES
from simulation.evaluation import Metrics, gap_closed
from simulation.rounds import RoundResult, SimulationConfig, run_simulation


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--participants", type=int, default=5000)
    parser.add_argument("--per-round", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--preference", choices=("paper", "firefox"), default="paper")
    parser.add_argument("--model", choices=MODEL_NAMES, default="firefox-2018")
    parser.add_argument("--optimizer", choices=("relative", "deployed"), default="relative")
    parser.add_argument(
        "--min-agreement",
        type=float,
        default=0.1,
        help="optimizer dead band: move a weight only where |votes| / voters >= this",
    )
    parser.add_argument("--margin", type=float, default=0.0)
    parser.add_argument(
        "--loss",
        choices=("svm", "relative"),
        default="relative",
        help="svm: the shipped loss; relative (default): scores divided by the selected "
        "row's score, invariant to the model's scale (docs/simulation.md)",
    )
    parser.add_argument("--held-out-people", type=int, default=300)
    parser.add_argument("--json", type=Path, default=None, help="write the results here")


class _Table:
    """Per-round table with a progress bar on a text stream (plain text, no tty needed)."""

    def __init__(self, out: TextIO, rounds: int) -> None:
        self.out = out
        self.rounds = rounds
        self.start = time.monotonic()

    def row(self, label: str, metrics: Metrics, bar: str = "") -> None:
        self.out.write(
            f"{label:>9} {bar:<22} {metrics.loss:>12.3f} {metrics.relative_loss:>8.4f} "
            f"{metrics.accuracy:>8.3f} "
            f"{metrics.chars_typed:>7.3f} {metrics.rank_selected:>7.3f}\n"
        )
        self.out.flush()

    def setup(self, baseline: Metrics, oracle: Metrics) -> None:
        self.out.write(
            f"{'round':>9} {'progress':<22} {'loss':>12} {'rel.loss':>8} "
            f"{'accuracy':>8} {'chars':>7} {'rank':>7}\n"
        )
        self.row("baseline", baseline)
        self.row("oracle", oracle)

    def progress(self, result: RoundResult) -> None:
        done = result.round / max(self.rounds, 1)
        filled = round(done * 20)
        bar = "[" + "#" * filled + "." * (20 - filled) + "]"
        note = f"  rejected: {result.rejected}" if result.rejected else ""
        self.row(f"{result.round}/{self.rounds}", result.metrics, bar)
        if note:
            self.out.write(note + "\n")

    def done(self) -> None:
        self.out.write(f"done in {time.monotonic() - self.start:.1f} s\n")


def run(args: argparse.Namespace) -> int:
    try:
        config = SimulationConfig(
            participants=args.participants,
            per_round=args.per_round,
            rounds=args.rounds,
            seed=args.seed,
            preference=args.preference,
            model=args.model,
            optimizer=args.optimizer,
            min_agreement=args.min_agreement,
            margin=args.margin,
            loss=args.loss,
            held_out_people=args.held_out_people,
        )
    except ValueError as exc:
        print(f"fedrank simulate: {exc}", file=sys.stderr)
        return 2
    table = _Table(sys.stderr, config.rounds)
    result = run_simulation(config, progress=table.progress, on_setup=table.setup)
    table.done()
    final = result.final
    if final is not None:
        for name in ("accuracy", "chars_typed"):
            closed = gap_closed(
                getattr(result.baseline, name),
                getattr(result.oracle, name),
                getattr(final.metrics, name),
            )
            print(f"{name}: {closed:.1%} of the baseline-to-oracle gap closed", file=sys.stderr)
    if args.json is not None:
        args.json.write_text(json.dumps(result.as_dict(), indent=2) + "\n")
    return 0
