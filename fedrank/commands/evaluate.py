"""``fedrank evaluate --state DIR``: how the model an aggregator trained does on held-out
synthetic people (the paper's section 5.1 validation, and the field study's characters
typed and rank selected of section 5.3).

It reads the aggregator's state directory (DESIGN.md section 7): the weights the first
logged round started from (the Firefox defaults on a fresh state) and the weights in force
now, draws a held-out population that took no part in training (``simulation.evaluation``:
fresh people, fixed queries and noise), types every query under both weight vectors and
under the noiseless true preference (the oracle), and prints the means. The held-out
people come from their own seed, not from any participant's, so the comparison is fair.

Also runnable as
``python -m fedrank.commands.evaluate --state DIR``; ``scripts/stack.sh`` does.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aggregator.optimizer import OptimizerState
from aggregator.roundlog import RoundLog, RoundLogError
from aggregator.state import StateDirectory, StateError
from frecency.registry import get_model
from frecency.synthetic import PopulationConfig
from simulation.evaluation import Metrics, draw_held_out, evaluate_oracle, evaluate_weights

#: Seed of the held-out people: far from the small seeds participants are started with.
DEFAULT_HELD_OUT_SEED = 2_018_000_001


@dataclass(frozen=True, slots=True)
class Evaluation:
    """Held-out metrics of the initial and the current model, and of the oracle."""

    model: str
    version: int
    rounds_logged: int
    rounds_completed: int
    initial_weights: tuple[float, ...]
    final_weights: tuple[float, ...]
    initial: Metrics
    final: Metrics
    oracle: Metrics

    def as_dict(self) -> dict[str, object]:
        return {
            "model": self.model,
            "version": self.version,
            "rounds_logged": self.rounds_logged,
            "rounds_completed": self.rounds_completed,
            "initial_weights": list(self.initial_weights),
            "final_weights": list(self.final_weights),
            "initial": self.initial.as_dict(),
            "final": self.final.as_dict(),
            "oracle": self.oracle.as_dict(),
        }


class EvaluationError(Exception):
    """The state directory cannot be evaluated; the message says why in one line."""


def evaluate_state(
    state_dir: Path, seed: int, people: int, queries: int, preference: str
) -> Evaluation:
    """Held-out metrics of the weights before the first logged round and now."""
    directory = StateDirectory(state_dir)
    try:
        state = directory.load()
        records = RoundLog(directory.round_log_file).read()
    except (StateError, RoundLogError) as exc:
        raise EvaluationError(str(exc)) from exc
    if state is None:
        raise EvaluationError(f"no aggregator state in {state_dir} (has it run a round?)")
    try:
        model = get_model(state.model)
        current = OptimizerState.from_dict(state.optimizer)
    except (KeyError, ValueError) as exc:
        raise EvaluationError(f"{directory.state_file}: {exc}") from exc
    initial = (
        tuple(records[0].weights_before)
        if records
        else tuple(float(w) for w in model.spec.defaults())
    )
    if preference not in ("paper", "firefox"):
        raise EvaluationError(f"unknown preference {preference!r}")
    held_out = draw_held_out(
        np.random.default_rng(seed),
        PopulationConfig(),
        model,
        "paper" if preference == "paper" else "firefox",
        people,
        queries,
    )
    return Evaluation(
        model=state.model,
        version=state.version,
        rounds_logged=len(records),
        rounds_completed=sum(1 for r in records if r.outcome == "completed"),
        initial_weights=initial,
        final_weights=current.weights,
        initial=evaluate_weights(held_out, np.asarray(initial, dtype=np.float64)),
        final=evaluate_weights(held_out, np.asarray(current.weights, dtype=np.float64)),
        oracle=evaluate_oracle(held_out),
    )


def format_evaluation(result: Evaluation, people: int, queries: int) -> str:
    """A small table: initial, final, oracle, and the change from initial to final."""
    names = ("chars_typed", "rank_selected", "accuracy", "loss")
    lines = [
        f"held-out: {people} synthetic people x {queries} queries, model {result.model} "
        f"version {result.version} after {result.rounds_completed} completed of "
        f"{result.rounds_logged} logged rounds",
        f"{'':<9}{'chars typed':>13}{'rank (0=top)':>15}{'top-1 acc':>11}{'loss':>11}",
    ]
    for label, metrics in (
        ("initial", result.initial),
        ("final", result.final),
        ("oracle", result.oracle),
    ):
        values = metrics.as_dict()
        lines.append(
            f"{label:<9}{values[names[0]]:>13.3f}{values[names[1]]:>15.3f}"
            f"{values[names[2]]:>11.3f}{values[names[3]]:>11.2f}"
        )
    before, after = result.initial.as_dict(), result.final.as_dict()
    changes = []
    for name in names[:2]:
        delta = after[name] - before[name]
        relative = f" ({delta / before[name]:+.1%})" if before[name] else ""
        changes.append(f"{name.replace('_', ' ')} {delta:+.3f}{relative}")
    lines.append("change: " + ", ".join(changes) + " (negative = better)")
    moved = [
        f"{i}:{a:g}->{b:g}"
        for i, (a, b) in enumerate(zip(result.initial_weights, result.final_weights, strict=True))
        if a != b
    ]
    lines.append("weights moved: " + (" ".join(moved) if moved else "none"))
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--state", required=True, type=Path, help="aggregator state directory")
    parser.add_argument("--seed", type=int, default=DEFAULT_HELD_OUT_SEED, help="held-out seed")
    parser.add_argument("--people", type=int, default=300, help="held-out people")
    parser.add_argument("--queries", type=int, default=6, help="queries per held-out person")
    parser.add_argument(
        "--preference",
        choices=("paper", "firefox"),
        default="paper",
        help="the held-out people's true preference (as the participants' synthetic model)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    if args.people < 1 or args.queries < 1:
        print("fedrank evaluate: --people and --queries must be >= 1", file=sys.stderr)
        return 2
    try:
        result = evaluate_state(args.state, args.seed, args.people, args.queries, args.preference)
    except EvaluationError as exc:
        print(f"fedrank evaluate: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result.as_dict()))
    else:
        print(format_evaluation(result, args.people, args.queries))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fedrank evaluate", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
