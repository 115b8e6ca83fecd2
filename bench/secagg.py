"""Secure-aggregation benchmark: fedrank's SecAgg / SecAgg+ next to Flower 1.42's SecAgg+.

Implements the issue "bench/secagg.py" (DESIGN.md section 6, secure aggregation and the
SecAgg+ option; section 5 steps 2-6, the round). For n members, d coordinates, a dropout
fraction (members that share their keys, then never send a masked input: the case that
makes the server rebuild pairwise masks) and a graph (full, or SecAgg+ with fedrank's
default degree k = 2 ceil(log2 n)), it runs one round of fedrank's sans-I/O state machines
(crypto.secagg.SecAggClient / SecAggServer, no transport) and, in the same run, one round
of Flower's own SecAgg+ code with the same n, d, graph and thresholds
(bench/_flower_secagg.py), and prints JSON on stdout.

Measured, per point:
- client CPU seconds per member (``time.process_time`` around each call, summed over the
  round; mean and max over the members that finished);
- server wall seconds per phase; "unmask" is the Unmasking phase (checking revealed shares,
  rebuilding secrets, removing masks);
- bytes a member sends: each client message encoded as the broker codec lays messages out
  (msgpack ``[version, kind, {field: value}]``, arrays as ``{dtype, shape, data}``);
- the floor: ceil(d log2(2n+1) / 8) + 64 (two X25519 keys) + 128 (two Ed25519 signatures)
  + m * 64 (shares of two 32-byte secrets to m neighbours) + (m + 1) * 32 (one revealed
  share per holder), m = n - 1 or k.

Thresholds: t = floor(threshold_fraction * n) + 1 (default: majority); SecAgg+ uses
fedrank's neighbourhood threshold ceil(t (k + 1) / n). If that round aborts (a
neighbourhood below its threshold), the abort is recorded and the point is measured again
with the neighbourhood threshold ceil((k + 1) / 3), marked in the output.

Run (Flower needs the ``bench`` extra, e.g. in .venv-bench)::

    .venv-bench/bin/python bench/secagg.py [--quick] [--max-seconds S] > secagg.json
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import enum
import importlib.metadata
import json
import math
import os
import platform
import pstats
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np

from crypto.hazmat import primitives
from crypto.secagg import (
    AggregateSum,
    ClientMessage,
    Outcome,
    Phase,
    RoundAborted,
    RoundParameters,
    SecAggClient,
    SecAggServer,
    ServerMessage,
    ServerStep,
    ShareKeysRequest,
    default_degree,
)

FULL, PLUS = "full", "secagg+"
SIZES, DIMENSIONS, DROPOUTS = (10, 100, 500, 1000), (22, 10000), (0.0, 0.1, 0.3)
PHASE_TIMEOUT = 60.0
TARGET_SPEEDUP, TARGET_UNMASK_S, TARGET_FLOOR_RATIO = 5.0, 10.0, 2.0


@dataclass(frozen=True)
class Point:
    """One benchmark point."""

    n: int
    d: int
    dropout: float
    graph: str

    def shares_per_member(self) -> int:
        """Neighbours each member shares with (and masks with)."""
        return self.n - 1 if self.graph == FULL else min(default_degree(self.n), self.n - 1)


@dataclass(frozen=True)
class Thresholds:
    """t over the cohort and the threshold within a neighbourhood (= t on the full graph)."""

    cohort: int
    neighbourhood: int
    overridden: bool = False


# --- sizes ------------------------------------------------------------------------------


def _wire_value(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        array = value.astype(value.dtype.newbyteorder("<"))
        return {"dtype": array.dtype.str, "shape": list(array.shape), "data": array.tobytes()}
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _wire_value(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [_wire_value(item) for item in value]
    return value


def wire_size(message: ClientMessage) -> int:
    """Bytes of ``message`` in the broker codec's layout (version, kind, field map)."""
    body = _wire_value(message)
    return len(msgpack.packb([1, type(message).__name__, body], use_bin_type=True))


def payload_size(message: ClientMessage) -> int:
    """Bytes of the message's byte and array fields, plus 8 per int and 1 per enum: what
    a compact fixed-layout codec would send."""

    def size(value: Any) -> int:
        if isinstance(value, np.ndarray):
            return int(value.nbytes)
        if isinstance(value, bytes):
            return len(value)
        if isinstance(value, enum.Enum):
            return 1
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return sum(size(getattr(value, f.name)) for f in dataclasses.fields(value))
        if isinstance(value, tuple | list):
            return sum(size(item) for item in value)
        return 8

    return size(message)


def _top_functions(profiler: cProfile.Profile, count: int = 8) -> list[dict[str, Any]]:
    """The functions with the most own time, with their share of the profiled total."""
    stats = pstats.Stats(profiler)
    total = max(stats.total_tt, 1e-12)  # type: ignore[attr-defined]
    rows = sorted(
        stats.stats.items(),  # type: ignore[attr-defined]
        key=lambda item: item[1][2],
        reverse=True,
    )
    return [
        {
            "function": f"{os.path.relpath(file) if file.startswith('/') else file}:{name}",
            "own_s": own,
            "cumulative_s": cumulative,
            "share_of_total": own / total,
        }
        for (file, _, name), (_, _, own, cumulative, _) in rows[:count]
    ]


def floor_bytes(point: Point) -> float:
    """Information-theoretic floor per member (module docstring)."""
    m = point.shares_per_member()
    vote_bits = point.d * math.log2(2 * point.n + 1)
    return math.ceil(vote_bits / 8) + 64 + 128 + m * 64 + (m + 1) * 32


# --- fedrank ----------------------------------------------------------------------------


def thresholds_for(point: Point, fraction: float, *, lowered: bool = False) -> Thresholds:
    cohort = math.floor(fraction * point.n) + 1
    if point.graph == FULL or point.shares_per_member() >= point.n - 1:
        return Thresholds(cohort, cohort)
    k = point.shares_per_member()
    if lowered:
        return Thresholds(cohort, math.ceil((k + 1) / 3), overridden=True)
    return Thresholds(cohort, min(math.ceil(cohort * (k + 1) / point.n), k + 1))


def _votes(n: int, d: int) -> dict[int, np.ndarray]:
    # Votes are benchmark data, not key material: numpy's generator is fine here.
    rows = np.random.default_rng().integers(-1, 2, size=(n, d)).astype(np.int64)
    return {member: (rows[member - 1] % (1 << 32)).astype(np.uint32) for member in range(1, n + 1)}


def _dropped_members(n: int, fraction: float) -> set[int]:
    order = list(range(1, n + 1))
    count = round(fraction * n)
    picked: set[int] = set()
    while len(picked) < count:  # uniform sample from the OS CSPRNG
        picked.add(order[int.from_bytes(os.urandom(4), "big") % n])
    return picked


def run_fedrank(
    point: Point, thresholds: Thresholds, *, profile_unmask: bool = False
) -> dict[str, Any]:
    """One fedrank round for ``point``: timings, sizes, outcome."""
    plus = point.graph == PLUS
    parameters = RoundParameters(
        round=1,
        threshold=thresholds.cohort,
        vector_length=point.d,
        secagg_plus=plus,
        neighbourhood_threshold=thresholds.neighbourhood if plus else None,
    )
    inputs = _votes(point.n, point.d)
    identities = {m: primitives.generate_signing_key() for m in inputs}
    directory = {m: primitives.public_signing_key(key) for m, key in identities.items()}
    client_cpu: dict[int, float] = defaultdict(float)
    clients = {}
    for m, vector in inputs.items():  # the constructor draws the round's keys: client work
        start = time.process_time()
        clients[m] = SecAggClient(parameters, m, identities[m], directory, vector)
        client_cpu[m] += time.process_time() - start
    server = SecAggServer(parameters, directory, now=0.0, phase_timeout=PHASE_TIMEOUT)
    dropped = _dropped_members(point.n, point.dropout)
    sent: dict[int, int] = defaultdict(int)
    payload: dict[int, int] = defaultdict(int)
    server_wall: dict[str, float] = defaultdict(float)
    server_cpu: dict[str, float] = defaultdict(float)
    profiler = cProfile.Profile() if profile_unmask else None

    def timed_server(call: Any, *args: Any) -> ServerStep:
        phase = server.phase
        if profiler is not None and phase is Phase.UNMASKING:
            profiler.enable()
        wall, cpu = time.perf_counter(), time.process_time()
        step: ServerStep = call(*args)
        server_wall[phase.value] += time.perf_counter() - wall
        server_cpu[phase.value] += time.process_time() - cpu
        if profiler is not None:
            profiler.disable()
        return step

    pending: list[ServerMessage] = []
    outcome: list[Outcome] = []
    now = 0.0

    def to_server(message: ClientMessage) -> None:
        sent[message.sender] += wire_size(message)
        payload[message.sender] += payload_size(message)
        take(timed_server(server.receive, message, now))

    def take(step: ServerStep) -> None:
        pending.extend(step.messages)
        if step.outcome is not None:
            outcome.append(step.outcome)

    for member, client in clients.items():
        start = time.process_time()
        advert = client.advertise(now)
        client_cpu[member] += time.process_time() - start
        to_server(advert)
    while not outcome:
        if not pending:
            now = server.deadline
            take(timed_server(server.tick, now))
            continue
        batch = pending[:]
        pending.clear()
        for message in batch:
            member = message.recipient
            if member in dropped and not isinstance(message, ShareKeysRequest):
                continue  # shared its keys, then went silent
            start = time.process_time()
            reply = clients[member].receive(message, now)
            client_cpu[member] += time.process_time() - start
            to_server(reply)
    result = outcome[0]
    finishers = [m for m in inputs if m not in dropped]
    totals = [client_cpu[m] for m in finishers]
    report: dict[str, Any] = {
        "t": thresholds.cohort,
        "neighbourhood_t": thresholds.neighbourhood,
        "neighbourhood_t_lowered": thresholds.overridden,
        "k": point.shares_per_member(),
        "survivors": len(finishers),
        "client_cpu_mean_s": float(np.mean(totals)),
        "client_cpu_max_s": float(np.max(totals)),
        "server_wall_by_phase_s": dict(server_wall),
        "server_cpu_by_phase_s": dict(server_cpu),
        "server_unmask_wall_s": server_wall[Phase.UNMASKING.value],
        "server_unmask_cpu_s": server_cpu[Phase.UNMASKING.value],
        "server_total_wall_s": sum(server_wall.values()),
        "server_total_cpu_s": sum(server_cpu.values()),
        "bytes_per_client_mean": float(np.mean([sent[m] for m in finishers])),
        "payload_bytes_per_client_mean": float(np.mean([payload[m] for m in finishers])),
    }
    if profiler is not None:
        report["unmask_profile"] = _top_functions(profiler)
    if isinstance(result, RoundAborted):
        report["aborted"] = f"{result.phase.value}: {result.reason.value}: {result.detail}"
        return report
    assert isinstance(result, AggregateSum)
    expected = np.zeros(point.d, dtype=np.uint32)
    for m in result.survivors:
        expected += inputs[m]
    report["sum_correct"] = bool(np.array_equal(result.total, expected)) and set(
        result.survivors
    ) == set(finishers)
    return report


# --- Flower -----------------------------------------------------------------------------


def _load_flower() -> Any:
    """bench/_flower_secagg.py, or None when flwr (the ``bench`` extra) is missing."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    try:
        return importlib.import_module("_flower_secagg")
    except ImportError:
        return None


def run_flower(flower: Any, point: Point, thresholds: Thresholds) -> dict[str, Any]:
    shares = point.n if point.graph == FULL else point.shares_per_member() + 1
    config = flower.FlowerRoundConfig(
        clients=point.n,
        dimension=point.d,
        dropout_fraction=point.dropout,
        num_shares=shares,
        threshold=thresholds.neighbourhood,
    )
    start = time.perf_counter()
    try:
        report: dict[str, Any] = flower.run_flower_round(config).as_json()
    except RuntimeError as error:  # a neighbourhood below threshold: Flower aborts too
        report = {"aborted": str(error)}
    report.update(num_shares=shares, threshold=thresholds.neighbourhood)
    report["round_wall_s"] = time.perf_counter() - start
    return report


# --- scheduling -------------------------------------------------------------------------


def _cost(side: str, point: Point) -> float:
    """Relative cost model used to extrapolate from a smaller n of the same series.

    Flower: n clients, each splitting/combining s = shares with O(s^2) PyCryptodome
    Shamir; fedrank: n clients each handling s neighbours and n signatures.
    """
    s = point.shares_per_member() + 1
    if side == "flower":
        return point.n * s * s
    return point.n * (s + point.n)


def _extrapolate(side: str, point: Point, base: Point, measured: dict[str, Any]) -> dict[str, Any]:
    scale = _cost(side, point) / _cost(side, base)
    per_client = scale * base.n / point.n
    out: dict[str, Any] = {
        "not_run": f"would exceed the per-point budget: predicted "
        f"{measured['round_wall_s'] * scale:.0f} s; figures extrapolated from n={base.n} by "
        + ("cost n*s^2" if side == "flower" else "cost n*(s+n)"),
        "extrapolated": True,
    }
    for key in (
        "server_unmask_wall_s",
        "server_unmask_cpu_s",
        "server_total_wall_s",
        "server_total_cpu_s",
    ):
        if key in measured:
            out[key] = measured[key] * scale
    if "client_cpu_mean_s" in measured:
        out["client_cpu_mean_s"] = measured["client_cpu_mean_s"] * per_client
    return out


def machine() -> dict[str, Any]:
    def version(name: str) -> str | None:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None

    return {
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        **{name: version(name) for name in ("numpy", "cryptography", "pycryptodome", "flwr")},
    }


def points_for(quick: bool) -> list[Point]:
    sizes, dims = ((10, 100), (22,)) if quick else (SIZES, DIMENSIONS)
    return [
        Point(n, d, dropout, graph)
        for n in sizes
        for graph in (FULL, PLUS)
        for d in dims
        for dropout in DROPOUTS
    ]


def is_target_point(point: Point) -> bool:
    """Always measured: full graph, n = 1000, 10% dropouts (the unmask-time target)."""
    return point.graph == FULL and point.n == 1000 and point.dropout == 0.1


def measure(
    side: str,
    point: Point,
    run: Any,
    last: dict[tuple[str, Point], tuple[Point, dict[str, Any]]],
    max_seconds: float,
    force: bool,
) -> dict[str, Any]:
    series = (side, Point(0, point.d, point.dropout, point.graph))
    previous = last.get(series)
    if previous is not None and not force:
        base, measured = previous
        predicted = measured["round_wall_s"] * _cost(side, point) / _cost(side, base)
        if predicted > max_seconds:
            return _extrapolate(side, point, base, measured)
    report: dict[str, Any] = run()
    if "extrapolated" not in report and "round_wall_s" in report:
        last[series] = (point, report)
    return report


def run_point(
    point: Point, fraction: float, flower: Any, last: Any, max_seconds: float, profile: bool
) -> dict[str, Any]:
    thresholds = thresholds_for(point, fraction)

    def fedrank_once(th: Thresholds) -> dict[str, Any]:
        start = time.perf_counter()
        report = run_fedrank(point, th, profile_unmask=profile)
        report["round_wall_s"] = time.perf_counter() - start
        return report

    forced = is_target_point(point)
    fed = measure("fedrank", point, lambda: fedrank_once(thresholds), last, max_seconds, forced)
    if "aborted" in fed and point.graph == PLUS:
        first_abort = fed["aborted"]
        thresholds = thresholds_for(point, fraction, lowered=True)
        fed = fedrank_once(thresholds)
        fed["first_attempt_aborted"] = first_abort
    flo = None
    if flower is not None:
        flo = measure(
            "flower", point, lambda: run_flower(flower, point, thresholds), last, max_seconds, False
        )
    entry: dict[str, Any] = {**dataclasses.asdict(point), "fedrank": fed, "flower": flo}
    entry["floor_bytes"] = floor_bytes(point)
    if "bytes_per_client_mean" in fed:
        entry["bytes_vs_floor"] = fed["bytes_per_client_mean"] / entry["floor_bytes"]
    if flo and "server_unmask_cpu_s" in flo and "server_unmask_cpu_s" in fed:
        # CPU seconds: robust to the other jobs sharing this machine; wall kept alongside.
        for name, key in (
            ("server_speedup", "server_unmask_cpu_s"),
            ("server_speedup_wall", "server_unmask_wall_s"),
            ("server_total_speedup", "server_total_cpu_s"),
        ):
            entry[name] = flo[key] / max(fed[key], 1e-9)
        entry["client_ratio"] = fed["client_cpu_mean_s"] / flo["client_cpu_mean_s"]
        entry["compared_with_extrapolation"] = bool(flo.get("extrapolated"))
    return entry


def targets(points: list[dict[str, Any]]) -> dict[str, Any]:
    measured = [p for p in points if "server_speedup" in p and not p["compared_with_extrapolation"]]
    slow = [_where(p) for p in measured if p["server_speedup"] < TARGET_SPEEDUP]
    heavy = [_where(p) for p in measured if p["client_ratio"] > 1.0]
    fat = [_where(p) for p in points if p.get("bytes_vs_floor", 0.0) > TARGET_FLOOR_RATIO]
    unmask = [
        {
            "d": p["d"],
            "unmask_s": p["fedrank"].get("server_unmask_wall_s"),
            "aborted": p["fedrank"].get("aborted"),
        }
        for p in points
        if is_target_point(Point(p["n"], p["d"], p["dropout"], p["graph"]))
    ]
    unmask_met = bool(unmask) and all(
        u["aborted"] is None and u["unmask_s"] < TARGET_UNMASK_S for u in unmask
    )
    return {
        "server_5x_at_every_measured_common_point": {
            "met": bool(measured) and not slow,
            "compared": len(measured),
            "missed": slow,
        },
        "client_time_no_worse": {"met": bool(measured) and not heavy, "missed": heavy},
        "full_graph_n1000_10pct_unmask_under_10s": {"met": unmask_met, "points": unmask},
        "bytes_within_2x_floor": {"met": not fat, "missed": fat},
    }


def _where(p: dict[str, Any]) -> str:
    return f"n={p['n']} d={p['d']} dropout={p['dropout']} {p['graph']}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n in {10, 100}, d = 22 only")
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=90.0,
        help="per side and point: skip (and extrapolate) a point predicted to take longer",
    )
    parser.add_argument("--threshold-fraction", type=float, default=0.5)
    parser.add_argument("--no-flower", action="store_true", help="fedrank side only")
    parser.add_argument(
        "--only", metavar="N,D,DROPOUT,GRAPH", help="run one point, e.g. 1000,22,0.1,full"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="cProfile fedrank's unmasking (its timings then include profiler overhead)",
    )
    args = parser.parse_args(argv)
    flower = None if args.no_flower else _load_flower()
    started = time.perf_counter()
    last: dict[tuple[str, Point], tuple[Point, dict[str, Any]]] = {}
    results = []
    if args.only:
        n, d, dropout, graph = args.only.split(",")
        points = [Point(int(n), int(d), float(dropout), graph)]
    else:
        points = points_for(args.quick)
    for point in points:
        results.append(
            run_point(point, args.threshold_fraction, flower, last, args.max_seconds, args.profile)
        )
        print(
            f"done {_where(results[-1])} at {time.perf_counter() - started:.0f} s",
            file=sys.stderr,
            flush=True,
        )
    output = {
        "machine": machine(),
        "flower_available": flower is not None,
        "max_seconds": args.max_seconds,
        "profiled": args.profile,
        "threshold_fraction": args.threshold_fraction,
        "points": results,
        "targets": targets(results),
        "wall_s": time.perf_counter() - started,
    }
    json.dump(output, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
