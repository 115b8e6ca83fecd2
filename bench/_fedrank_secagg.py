"""fedrank's side of bench/secagg.py: one secure-aggregation round of crypto.secagg's
sans-I/O state machines, timed and sized, with the information-theoretic floor.

Implements the fedrank column of the issue "bench/secagg.py" (DESIGN.md section 5 steps
2-6, section 6). ``run_fedrank`` drives ``SecAggClient`` and ``SecAggServer`` directly (no
transport), as ``crypto.secagg.simulate.drive`` does, timing every call: client CPU per
member (``time.process_time``, the constructor included, as it draws the round's keys) and
server wall and CPU seconds per phase. Dropped members answer ShareKeys, then go silent.

Bytes per member: ``wire_size`` encodes each client message as the broker codec lays
messages out (msgpack ``[version, kind, {field: value}]``, arrays as ``{dtype, shape,
data}``); ``payload_size`` counts only byte and array fields plus 8 per int, 1 per enum
(what a compact fixed-layout codec would send). ``floor_bytes`` is the issue's floor:
ceil(d log2(2n+1) / 8) + 64 (two X25519 keys) + 128 (two Ed25519 signatures) + m * 64
(shares of two 32-byte secrets to m neighbours) + (m + 1) * 32 (one revealed share per
holder), m = n - 1 on the full graph, k on SecAgg+.
"""

from __future__ import annotations

import cProfile
import dataclasses
import enum
import math
import os
import pstats
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
PHASE_TIMEOUT = 60.0


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
    profiler = cProfile.Profile(time.process_time) if profile_unmask else None

    def timed_server(call: Any, *args: Any) -> ServerStep:
        phase = server.phase
        active = profiler if phase is Phase.UNMASKING else None
        wall, cpu = time.perf_counter(), time.process_time()
        if active is not None:
            active.enable()
        step: ServerStep = call(*args)
        if active is not None:
            active.disable()
        server_wall[phase.value] += time.perf_counter() - wall
        server_cpu[phase.value] += time.process_time() - cpu
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
