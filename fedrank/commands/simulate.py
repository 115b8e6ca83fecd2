"""``fedrank simulate``: the paper's simulation (section 5.1) — a synthetic population
learns Firefox's frecency weights by sign votes and bounded Rprop; held-out metrics per
round (docs/simulation.md). Votes are summed by secure aggregation by default
(``simulation.secure``, in process; ``--transport rabbitmq``: the real stack over the
broker, ``simulation.broker_round``), or in the clear with ``--no-secure``."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import TextIO

from broker.transport import BrokerError
from frecency.registry import MODEL_NAMES
from simulation.aggregation import PlainSum, VoteAggregation
from simulation.evaluation import Metrics, gap_closed
from simulation.rounds import RoundResult, SimulationConfig, SimulationResult, run_simulation
from simulation.secure import DEFAULT_THRESHOLD_FRACTION, SecureConfig, SecureSum

DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"


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
    secure = parser.add_argument_group("secure aggregation (docs/simulation.md)")
    secure.add_argument(
        "--aggregation",
        choices=("secure", "plain"),
        default="secure",
        help="secure (default): each round's vote total comes from crypto.secagg's "
        "protocol; plain: summed in the clear, as the 2018 simulation",
    )
    secure.add_argument(
        "--secure",
        dest="aggregation",
        action="store_const",
        const="secure",
        help="same as --aggregation secure",
    )
    secure.add_argument(
        "--no-secure",
        dest="aggregation",
        action="store_const",
        const="plain",
        help="same as --aggregation plain",
    )
    secure.add_argument(
        "--secagg",
        choices=("plus", "full"),
        default="plus",
        help="plus (default): SecAgg+, ~2 log2 n neighbours per member; full: every pair",
    )
    secure.add_argument("--degree", type=int, default=None, help="SecAgg+ neighbours per member")
    secure.add_argument(
        "--threshold-fraction",
        type=float,
        default=DEFAULT_THRESHOLD_FRACTION,
        help="threshold t = ceil(fraction x the round's members) (default 2/3)",
    )
    secure.add_argument(
        "--dropout",
        type=float,
        default=0.0,
        help="each member vanishes with this probability at a uniformly random phase",
    )
    secure.add_argument(
        "--transport",
        choices=("memory", "rabbitmq"),
        default="memory",
        help="memory (default): the protocol in process; rabbitmq: the real aggregator "
        "and participant sessions over RabbitMQ (use a vhost of its own)",
    )
    secure.add_argument(
        "--amqp",
        default=os.environ.get("FEDRANK_AMQP_URL", DEFAULT_AMQP_URL),
        help="broker URL for --transport rabbitmq (default: $FEDRANK_AMQP_URL or local guest)",
    )


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
        if result.outcome == "aborted" and not result.rejected:
            note = f"  aborted (model unchanged): {result.abort_reason}"
        elif result.survivors is not None and result.survivors < result.voters:
            note = f"  {result.survivors} of {result.voters} votes in the total"
        self.row(f"{result.round}/{self.rounds}", result.metrics, bar)
        if note:
            self.out.write(note + "\n")

    def done(self) -> None:
        self.out.write(f"done in {time.monotonic() - self.start:.1f} s\n")


def _secure_config(args: argparse.Namespace) -> SecureConfig | None:
    """The secure-aggregation settings, or None for the plain sum; ValueError if the
    flags contradict each other."""
    if args.aggregation == "plain":
        if args.dropout:
            raise ValueError("--dropout needs secure aggregation (members drop out of it)")
        if args.transport != "memory":
            raise ValueError("--transport rabbitmq runs the secure protocol: drop --no-secure")
        return None
    if args.transport == "rabbitmq" and args.dropout:
        raise ValueError("--dropout is simulated in process only (--transport memory)")
    return SecureConfig(
        threshold_fraction=args.threshold_fraction,
        secagg=args.secagg,
        degree=args.degree,
        dropout=args.dropout,
    )


def _simulate(
    args: argparse.Namespace, config: SimulationConfig, secure: SecureConfig | None, table: _Table
) -> SimulationResult:
    if args.transport == "rabbitmq" and secure is not None:
        from broker.rabbitmq import RabbitMQSettings, RabbitMQTransport
        from simulation.broker_round import run_over_broker

        settings = RabbitMQSettings.from_url(args.amqp)
        return run_over_broker(
            config,
            secure,
            lambda: RabbitMQTransport(settings),
            progress=table.progress,
            on_setup=table.setup,
        )
    summing: VoteAggregation = (
        PlainSum() if secure is None else SecureSum.seeded(secure, config.seed)
    )
    return run_simulation(config, summing, progress=table.progress, on_setup=table.setup)


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
        secure = _secure_config(args)
    except ValueError as exc:
        print(f"fedrank simulate: {exc}", file=sys.stderr)
        return 2
    table = _Table(sys.stderr, config.rounds)
    aggregation: dict[str, object] = {"mode": args.aggregation, "transport": args.transport}
    if secure is not None:
        aggregation.update(secure.as_dict())
    print(f"aggregation: {aggregation}", file=sys.stderr)
    try:
        result = _simulate(args, config, secure, table)
    except (BrokerError, TimeoutError, RuntimeError) as exc:  # --transport rabbitmq
        print(f"fedrank simulate: over the broker: {exc}", file=sys.stderr)
        return 1
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
        output = {**result.as_dict(), "aggregation": aggregation}
        args.json.write_text(json.dumps(output, indent=2) + "\n")
    return 0
