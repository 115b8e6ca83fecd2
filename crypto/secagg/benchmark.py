"""Speed of secure aggregation (DESIGN.md s. 7 scale; the unmasking targets of the
secure-aggregation issue): ``python -m crypto.secagg.benchmark`` prints JSON lines.

- ``unmask``: the server's unmasking (``crypto.secagg.unmask.unmask``, the code the
  server runs) for n members with a fraction dropped after sharing. The inputs are built
  directly, not by n clients (whose O(n^2) set-up would dominate): shares for the t
  holders the server uses are sampled consistently with a degree t-1 polynomial, and the
  masked inputs carry the self masks and the masks shared with dropped members (masks
  between two survivors cancel in the sum and cost the server nothing).
- ``round``: a whole round in process (``build_cohort`` + ``drive``), timing the server's
  unmasking step and the whole round.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time

import numpy as np
from numpy.typing import NDArray

from crypto.hazmat import primitives, shamir
from crypto.secagg import transcript
from crypto.secagg.messages import AggregateSum, Phase, ServerStep
from crypto.secagg.params import RoundParameters, build_graph
from crypto.secagg.server import SecAggServer
from crypto.secagg.simulate import build_cohort, drive
from crypto.secagg.unmask import unmask


def _shares_at(secrets: list[bytes], holders: tuple[int, ...]) -> NDArray[np.int64]:
    """Shares ``[holders, secrets, 9]`` of a random degree len(holders)-1 sharing."""
    count = len(holders)
    chunks = np.stack([shamir.secret_to_chunks(s) for s in secrets])
    free = shamir.random_field_elements((count - 1) * chunks.size).reshape(count - 1, *chunks.shape)
    weights = shamir.lagrange_at_zero(holders)
    partial = ((weights[:-1, None, None] * free) % shamir.PRIME).sum(axis=0) % shamir.PRIME
    last = (chunks - partial) % shamir.PRIME * pow(int(weights[-1]), -1, shamir.PRIME)
    return np.concatenate([free, (last % shamir.PRIME)[None]], axis=0)


def bench_unmask(members: int, dropout: float, threshold: int, length: int) -> dict[str, object]:
    parameters = RoundParameters(round=1, threshold=threshold, vector_length=length)
    ids = tuple(range(1, members + 1))
    session = os.urandom(32)
    graph = build_graph(parameters, ids, session)
    dropped = ids[members - round(members * dropout) :]
    survivors = ids[: members - len(dropped)]
    mask_keys = {m: primitives.generate_agreement_key() for m in ids}
    mask_public = {m: primitives.public_agreement_key(k) for m, k in mask_keys.items()}
    seeds = {m: os.urandom(32) for m in survivors}
    rng = np.random.default_rng(0)  # input values only
    inputs = {m: rng.integers(0, 2**32, size=length, dtype=np.uint32) for m in survivors}
    setup_start = time.perf_counter()
    masked = {}
    for u in survivors:
        y = inputs[u] + transcript.self_mask(seeds[u], session, 1, length)
        key = primitives.load_agreement_key(mask_keys[u])
        for w in dropped:
            secret = primitives.exchange(key, mask_public[w])
            mask = transcript.pairwise_mask(secret, session, 1, u, w, length)
            y = y + mask if w > u else y - mask
        masked[u] = y
    holders = survivors[:threshold]
    owners = list(survivors) + list(dropped)
    secrets = [seeds[u] for u in survivors] + [mask_keys[w] for w in dropped]
    shares = _shares_at(secrets, holders)
    revealed = {
        h: {o: shamir.encode_share(shares[i, j]) for j, o in enumerate(owners)}
        for i, h in enumerate(holders)
    }
    setup_seconds = time.perf_counter() - setup_start
    shamir.lagrange_at_zero.cache_clear()
    start, cpu_start = time.perf_counter(), time.process_time()
    outcome = unmask(parameters, graph, session, mask_public, frozenset(ids), masked, revealed)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    expected = np.zeros(length, dtype=np.uint64)
    for x in inputs.values():
        expected += x
    correct = isinstance(outcome, AggregateSum) and np.array_equal(
        outcome.total, (expected % 2**32).astype(np.uint32)
    )
    return {
        "bench": "unmask",
        "members": members,
        "dropped": len(dropped),
        "threshold": threshold,
        "vector_length": length,
        "unmask_seconds": round(seconds, 3),
        "unmask_cpu_seconds": round(cpu_seconds, 3),
        "setup_seconds": round(setup_seconds, 3),
        "correct": correct,
    }


class _TimedServer(SecAggServer):
    unmask_seconds = 0.0
    unmask_cpu_seconds = 0.0

    def _finish(self) -> ServerStep:
        start, cpu_start = time.perf_counter(), time.process_time()
        step = super()._finish()
        self.unmask_seconds = time.perf_counter() - start
        self.unmask_cpu_seconds = time.process_time() - cpu_start
        return step


def bench_round(
    members: int, dropout: float, threshold: int, length: int, secagg_plus: bool
) -> dict[str, object]:
    parameters = RoundParameters(
        round=1, threshold=threshold, vector_length=length, secagg_plus=secagg_plus
    )
    rng = np.random.default_rng(0)  # input values only
    inputs = {
        m: rng.integers(0, 2**32, size=length, dtype=np.uint32) for m in range(1, members + 1)
    }
    step = max(1, round(1 / dropout)) if dropout > 0 else members + 1
    dropouts = {m: Phase.MASKED_INPUT_COLLECTION for m in range(step, members + 1, step)}
    start, cpu_start = time.perf_counter(), time.process_time()
    cohort = build_cohort(inputs, parameters, server_type=_TimedServer)
    outcome = drive(cohort, dropouts)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    expected = np.zeros(length, dtype=np.uint64)
    for m, x in inputs.items():
        if m not in dropouts:
            expected += x
    correct = isinstance(outcome, AggregateSum) and np.array_equal(
        outcome.total, (expected % 2**32).astype(np.uint32)
    )
    server = cohort.server
    assert isinstance(server, _TimedServer)
    return {
        "bench": "round",
        "members": members,
        "dropped": len(dropouts),
        "threshold": threshold,
        "vector_length": length,
        "secagg_plus": secagg_plus,
        "round_seconds": round(seconds, 3),
        "round_cpu_seconds": round(cpu_seconds, 3),
        "client_cpu_seconds_per_member": round(
            (cpu_seconds - server.unmask_cpu_seconds) / members, 4
        ),
        "unmask_seconds": round(server.unmask_seconds, 3),
        "unmask_cpu_seconds": round(server.unmask_cpu_seconds, 3),
        "correct": correct,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--members", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--threshold-fraction", type=float, default=2 / 3)
    parser.add_argument("--vector-length", type=int, default=27)  # 22 votes + 5 metrics
    parser.add_argument("--round", action="store_true", help="also run whole rounds")
    parser.add_argument("--secagg-plus", action="store_true", help="whole rounds with SecAgg+")
    args = parser.parse_args()
    for members in args.members:
        threshold = math.ceil(args.threshold_fraction * members)
        print(json.dumps(bench_unmask(members, args.dropout, threshold, args.vector_length)))
        if args.round:
            result = bench_round(
                members, args.dropout, threshold, args.vector_length, args.secagg_plus
            )
            print(json.dumps(result))


if __name__ == "__main__":
    main()
