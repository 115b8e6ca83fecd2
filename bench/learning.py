"""Speed of the participant's learning signal and of the paper's simulation (DESIGN.md
section 3; paper section 5.1). Prints JSON.

* ``interaction``: one interaction's loss + full central-difference gradient (10
  suggestions shown, 22 weights of firefox-2018: 45 weight vectors, one ``model.score``
  call), median over many interactions.
* ``typing``: simulating one URL-bar query (per query, in batches as the simulation does).
* ``simulation``: ``fedrank simulate`` with the default sizes, end to end, split into setup
  (population, held-out set) and rounds.

Usage: ``python bench/learning.py [--participants N] [--rounds R] [--skip-simulation]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np

from frecency.history import Interaction
from frecency.learning import loss_and_gradient
from frecency.registry import get_model
from frecency.synthetic import PopulationConfig, draw_population
from frecency.urlbar import type_queries
from simulation.rounds import SimulationConfig, run_simulation


def bench_interaction(repeats: int) -> dict[str, float]:
    model = get_model("firefox-2018")
    rng = np.random.default_rng(0)
    population = draw_population(rng, PopulationConfig(), model, "paper", 20)
    weights = model.spec.defaults()
    times = []
    for index in range(repeats):
        person = index % 20
        begin, end = population.offsets[person], population.offsets[person + 1]
        batch = population.batch.take(np.arange(begin, end))
        shown = tuple(int(p) for p in rng.choice(end - begin, 10, replace=False))
        interaction = Interaction("q", shown, int(rng.integers(0, 10)), 1)
        start = time.perf_counter()
        loss_and_gradient(model, batch, weights, [interaction])
        times.append(time.perf_counter() - start)
    return {
        "median_ms": 1e3 * statistics.median(times),
        "p90_ms": 1e3 * float(np.quantile(times, 0.9)),
        "repeats": repeats,
    }


def bench_typing(queries: int) -> dict[str, float]:
    model = get_model("firefox-2018")
    rng = np.random.default_rng(1)
    config = PopulationConfig()
    population = draw_population(rng, config, model, "paper", 200)
    scores = model.score(population.batch, model.spec.defaults()[np.newaxis, :])[0]
    owners = rng.integers(0, 200, size=queries)
    batch = population.draw_queries(rng, config, owners)
    start = time.perf_counter()
    type_queries(batch, scores[batch.page])
    elapsed = time.perf_counter() - start
    return {"queries": queries, "per_query_us": 1e6 * elapsed / queries}


def bench_simulation(participants: int, rounds: int) -> dict[str, float]:
    config = SimulationConfig(participants=participants, rounds=rounds)
    marks: dict[str, float] = {}
    start = time.perf_counter()

    def setup_done(*_: object) -> None:
        marks["setup_s"] = time.perf_counter() - start

    result = run_simulation(config, on_setup=setup_done)
    total = time.perf_counter() - start
    final = result.final
    return {
        "participants": participants,
        "rounds": rounds,
        "total_s": total,
        "setup_s": marks["setup_s"],
        "rounds_s": total - marks["setup_s"],
        "final_accuracy": final.metrics.accuracy if final else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--participants", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=500)
    parser.add_argument("--skip-simulation", action="store_true")
    args = parser.parse_args()
    report: dict[str, object] = {
        "interaction_loss_and_gradient": bench_interaction(args.repeats),
        "typing": bench_typing(4000),
        "load_average": os.getloadavg()[0],
        "cpus": os.cpu_count(),
    }
    if not args.skip_simulation:
        report["simulation"] = bench_simulation(args.participants, args.rounds)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
