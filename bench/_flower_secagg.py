"""Flower 1.42's SecAgg+ driven in process: the baseline of bench/secagg.py.

Implements the Flower column of the secure-aggregation benchmark (issue "bench/secagg.py",
DESIGN.md section 6, "SecAgg+ option"). One round of Flower's SecAgg+ (Bell et al. 2020)
is run for n clients with no transport in between:

* client side: Flower's own client stage functions of ``flwr.client.mod.secure_aggregation
  .secaggplus_mod`` (``_setup``, ``_share_keys``, ``_collect_masked_vectors``,
  ``_unmask``), i.e. its P-384 key pairs, ECDH + HKDF, Fernet encryption of shares,
  PyCryptodome Shamir (``shamir.create_shares``), quantization and ``pseudo_rand_gen``;
* server side: the steps of ``SecAggPlusWorkflow`` (neighbour ring, share forwarding,
  masked-vector sum, then unmasking with ``shamir.combine_shares``, regenerated
  pairwise and self masks, dequantization), written out with Flower's primitives
  because the workflow itself needs its Grid/LegacyContext machinery.

Dropouts: a dropped client completes ShareKeys then never sends its masked vector (the
costly case: the server must rebuild its pairwise masks from shares of its key).

Measured: client CPU seconds (``time.process_time`` around each client stage, summed per
client), server wall and CPU seconds per step, and bytes each client sends, counted as the
payload of its replies: public keys (PEM), destination ids (8 bytes each), Fernet
ciphertexts, ``ndarray_to_bytes`` of the masked arrays, node ids + shares of the unmask
reply. Protobuf framing (a few bytes per field) is left out.

This module imports ``flwr`` (the ``bench`` extra); it is not part of the fedrank package.
"""

from __future__ import annotations

import importlib
import secrets
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from flwr.common import bytes_to_ndarray, ndarrays_to_parameters
from flwr.common.secure_aggregation.crypto.shamir import combine_shares
from flwr.common.secure_aggregation.crypto.symmetric_encryption import generate_shared_key
from flwr.common.secure_aggregation.ndarrays_arithmetic import (
    factor_extract,
    get_parameters_shape,
    parameters_addition,
    parameters_mod,
    parameters_subtraction,
)
from flwr.common.secure_aggregation.quantization import dequantize
from flwr.common.secure_aggregation.secaggplus_constants import Key
from flwr.common.secure_aggregation.secaggplus_utils import pseudo_rand_gen
from flwr.supercore.primitives.asymmetric import bytes_to_private_key, bytes_to_public_key

# The package re-exports the function secaggplus_mod under the module's name.
flower_client: Any = importlib.import_module("flwr.client.mod.secure_aggregation.secaggplus_mod")

NODE_ID_BYTES = 8
# SecAggPlusWorkflow's defaults.
CLIPPING_RANGE = 8.0
QUANTIZATION_RANGE = 1 << 22
MODULUS_RANGE = 1 << 32
MAX_WEIGHT = 1000.0


@dataclass(frozen=True)
class FlowerRoundConfig:
    """One benchmark point for Flower: n clients, d coordinates, ring degree."""

    clients: int
    dimension: int
    dropout_fraction: float
    num_shares: int  # neighbours including self; n for the full graph
    threshold: int


@dataclass(frozen=True)
class FlowerRoundResult:
    """Timings and sizes of one Flower SecAgg+ round."""

    survivors: int
    client_cpu_mean_s: float
    client_cpu_max_s: float
    client_cpu_by_stage_mean_s: dict[str, float]
    server_unmask_wall_s: float
    server_unmask_cpu_s: float
    server_total_wall_s: float
    server_total_cpu_s: float
    bytes_per_client_mean: float
    bytes_by_stage_mean: dict[str, float]
    sum_correct: bool

    def as_json(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict (for the bench output)."""
        return {
            "survivors": self.survivors,
            "client_cpu_mean_s": self.client_cpu_mean_s,
            "client_cpu_max_s": self.client_cpu_max_s,
            "client_cpu_by_stage_mean_s": self.client_cpu_by_stage_mean_s,
            "server_unmask_wall_s": self.server_unmask_wall_s,
            "server_unmask_cpu_s": self.server_unmask_cpu_s,
            "server_total_wall_s": self.server_total_wall_s,
            "server_total_cpu_s": self.server_total_cpu_s,
            "bytes_per_client_mean": self.bytes_per_client_mean,
            "bytes_by_stage_mean": self.bytes_by_stage_mean,
            "sum_correct": self.sum_correct,
        }


class _Stopwatch:
    """Accumulates CPU seconds per (client, stage) and bytes per (client, stage)."""

    def __init__(self) -> None:
        self.cpu: dict[int, dict[str, float]] = {}
        self.sent: dict[int, dict[str, int]] = {}

    def add(self, nid: int, stage: str, cpu_s: float, sent_bytes: int) -> None:
        self.cpu.setdefault(nid, {})[stage] = cpu_s
        self.sent.setdefault(nid, {})[stage] = sent_bytes


def _ring_neighbours(node_ids: list[int], num_shares: int) -> dict[int, set[int]]:
    """SecAggPlusWorkflow.setup_stage's graph: a shuffled ring, num_shares >> 1 each side."""
    shuffled = list(node_ids)
    secrets.SystemRandom().shuffle(shuffled)
    half = num_shares >> 1
    count = len(shuffled)
    return {
        nid: {shuffled[(idx + off) % count] for off in range(-half, half + 1)}
        for idx, nid in enumerate(shuffled)
    }


def _setup_configs(config: FlowerRoundConfig) -> dict[str, Any]:
    return {
        Key.SAMPLE_NUMBER: config.clients,
        Key.SHARE_NUMBER: config.num_shares,
        Key.THRESHOLD: config.threshold,
        Key.CLIPPING_RANGE: CLIPPING_RANGE,
        Key.TARGET_RANGE: QUANTIZATION_RANGE,
        Key.MOD_RANGE: MODULUS_RANGE,
        Key.MAX_WEIGHT: MAX_WEIGHT,
    }


def _timed(fn: Any, *args: Any) -> tuple[Any, float]:
    start = time.process_time()
    result = fn(*args)
    return result, time.process_time() - start


def run_flower_round(config: FlowerRoundConfig) -> FlowerRoundResult:
    """Run one SecAgg+ round of Flower's code for ``config`` and measure it."""
    n, d = config.clients, config.dimension
    node_ids = list(range(1, n + 1))
    neighbours = _ring_neighbours(node_ids, config.num_shares)
    dropped = set(node_ids[: round(config.dropout_fraction * n)])
    survivors = [nid for nid in node_ids if nid not in dropped]
    # Votes are benchmark data, not key material: numpy's generator is fine here.
    vote_rows = np.random.default_rng().integers(-1, 2, size=(len(survivors), d))
    votes = {nid: vote_rows[i].astype(np.float64) for i, nid in enumerate(survivors)}
    watch = _Stopwatch()
    states = {nid: flower_client.SecAggPlusState() for nid in node_ids}
    server_wall = server_cpu = 0.0

    # Stage 0, setup: every client makes two P-384 key pairs and returns the public keys.
    public_keys: dict[int, tuple[bytes, bytes]] = {}
    for nid in node_ids:
        states[nid].nid = nid
        reply, cpu = _timed(flower_client._setup, states[nid], _setup_configs(config))
        public_keys[nid] = (reply[Key.PUBLIC_KEY_1], reply[Key.PUBLIC_KEY_2])
        watch.add(nid, "setup", cpu, len(public_keys[nid][0]) + len(public_keys[nid][1]))

    # Stage 1, share keys: Shamir shares of the seed and sk1, encrypted per neighbour.
    forwarded: dict[int, tuple[list[int], list[bytes]]] = {nid: ([], []) for nid in node_ids}
    for nid in node_ids:
        roster = {str(peer): public_keys[peer] for peer in neighbours[nid]}
        reply, cpu = _timed(flower_client._share_keys, states[nid], roster)
        dsts, ctxts = reply[Key.DESTINATION_LIST], reply[Key.CIPHERTEXT_LIST]
        watch.add(nid, "share_keys", cpu, NODE_ID_BYTES * len(dsts) + sum(map(len, ctxts)))
        start, start_cpu = time.perf_counter(), time.process_time()
        for dst, ctxt in zip(dsts, ctxts, strict=True):
            forwarded[dst][0].append(nid)
            forwarded[dst][1].append(ctxt)
        server_wall += time.perf_counter() - start
        server_cpu += time.process_time() - start_cpu

    # Stage 2, masked vectors: dropped clients go silent here.
    masked_sum: list[Any] | None = None
    for nid in survivors:
        srcs, ctxts = forwarded[nid]
        configs = {Key.CIPHERTEXT_LIST: ctxts, Key.SOURCE_LIST: srcs}
        params = ndarrays_to_parameters([votes[nid]])
        reply, cpu = _timed(flower_client._collect_masked_vectors, states[nid], configs, 1, params)
        blobs = reply[Key.MASKED_PARAMETERS]
        watch.add(nid, "collect_masked_vectors", cpu, sum(map(len, blobs)))
        start, start_cpu = time.perf_counter(), time.process_time()
        vector = [bytes_to_ndarray(blob) for blob in blobs]
        masked_sum = vector if masked_sum is None else parameters_addition(masked_sum, vector)
        server_wall += time.perf_counter() - start
        server_cpu += time.process_time() - start_cpu
    assert masked_sum is not None
    masked_sum = parameters_mod(masked_sum, MODULUS_RANGE)

    # Stage 3, unmask: survivors reveal seed shares of survivors, sk1 shares of the dropped.
    active, dead = set(survivors), dropped
    collected: dict[int, list[bytes]] = {nid: [] for nid in node_ids}
    for nid in survivors:
        configs = {
            Key.ACTIVE_NODE_ID_LIST: list(neighbours[nid] & active),
            Key.DEAD_NODE_ID_LIST: list(neighbours[nid] & dead),
        }
        reply, cpu = _timed(flower_client._unmask, states[nid], configs)
        nids, shares = reply[Key.NODE_ID_LIST], reply[Key.SHARE_LIST]
        watch.add(nid, "unmask", cpu, NODE_ID_BYTES * len(nids) + sum(map(len, shares)))
        for owner, share in zip(nids, shares, strict=True):
            collected[owner].append(share)

    start_wall, start_cpu = time.perf_counter(), time.process_time()
    aggregate = _server_unmask(masked_sum, collected, active, neighbours, public_keys, config)
    unmask_wall = time.perf_counter() - start_wall
    unmask_cpu = time.process_time() - start_cpu
    expected = np.mean([votes[nid] for nid in survivors], axis=0)
    return _summarize(
        watch,
        survivors,
        (unmask_wall, unmask_cpu, server_wall + unmask_wall, server_cpu + unmask_cpu),
        bool(np.allclose(aggregate, expected, atol=1e-2)),
    )


def _server_unmask(
    masked_sum: list[Any],
    collected: dict[int, list[bytes]],
    active: set[int],
    neighbours: dict[int, set[int]],
    public_keys: dict[int, tuple[bytes, bytes]],
    config: FlowerRoundConfig,
) -> Any:
    """SecAggPlusWorkflow.unmask_stage: combine shares, strip masks, dequantize."""
    shapes = get_parameters_shape(masked_sum)
    for nid, share_list in collected.items():
        if len(share_list) < config.threshold:
            raise RuntimeError(f"not enough shares for node {nid}")
        secret = combine_shares(share_list)
        if nid in active:
            self_mask = pseudo_rand_gen(secret, MODULUS_RANGE, shapes)
            masked_sum = parameters_subtraction(masked_sum, self_mask)
            continue
        private_key = bytes_to_private_key(secret)
        for peer in neighbours[nid] - {nid}:
            shared = generate_shared_key(private_key, bytes_to_public_key(public_keys[peer][0]))
            pairwise = pseudo_rand_gen(shared, MODULUS_RANGE, shapes)
            if nid > peer:
                masked_sum = parameters_addition(masked_sum, pairwise)
            else:
                masked_sum = parameters_subtraction(masked_sum, pairwise)
    recon = parameters_mod(masked_sum, MODULUS_RANGE)
    total_ratio, recon = factor_extract(recon)
    aggregated = dequantize(recon, CLIPPING_RANGE, QUANTIZATION_RANGE)[0]
    aggregated += -(len(active) - 1) * CLIPPING_RANGE
    aggregated *= QUANTIZATION_RANGE / total_ratio
    return aggregated


def _summarize(
    watch: _Stopwatch,
    survivors: list[int],
    server_times: tuple[float, float, float, float],
    correct: bool,
) -> FlowerRoundResult:
    unmask_wall, unmask_cpu, server_total_wall, server_total_cpu = server_times
    totals = [sum(watch.cpu[nid].values()) for nid in survivors]
    sent = [sum(watch.sent[nid].values()) for nid in survivors]
    stages = list(watch.cpu[survivors[0]])
    return FlowerRoundResult(
        survivors=len(survivors),
        client_cpu_mean_s=float(np.mean(totals)),
        client_cpu_max_s=float(np.max(totals)),
        client_cpu_by_stage_mean_s={
            s: float(np.mean([watch.cpu[nid][s] for nid in survivors])) for s in stages
        },
        server_unmask_wall_s=unmask_wall,
        server_unmask_cpu_s=unmask_cpu,
        server_total_wall_s=server_total_wall,
        server_total_cpu_s=server_total_cpu,
        bytes_per_client_mean=float(np.mean(sent)),
        bytes_by_stage_mean={
            s: float(np.mean([watch.sent[nid][s] for nid in survivors])) for s in stages
        },
        sum_correct=correct,
    )
