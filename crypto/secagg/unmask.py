"""The server's unmasking (DESIGN.md section 5, step 6; Bonawitz et al. 2017, figure 4,
round 4, server side), vectorized.

From the revealed shares it reconstructs the self-mask seed b_u of every survivor and the
mask key s_w^SK of every member that dropped after sharing (and had surviving neighbours),
then removes PRG(b_u) and the dropped members' pairwise masks from the sum of masked
inputs. Secrets whose holder sets coincide (all of them, on the full graph) are
reconstructed in one numpy interpolation with cached Lagrange coefficients; the dropped
members' masks cost one X25519 exchange per (dropped, surviving neighbour) pair.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey
from numpy.typing import NDArray

from crypto.hazmat import primitives, shamir
from crypto.secagg import transcript
from crypto.secagg.errors import AbortReason
from crypto.secagg.messages import AggregateSum, Phase, RoundAborted
from crypto.secagg.params import NeighbourGraph, RoundParameters


def _aborted(parameters: RoundParameters, reason: AbortReason, detail: str) -> RoundAborted:
    return RoundAborted(parameters.round, Phase.UNMASKING, reason, detail)


def _reconstruct_all(
    owners: list[int],
    graph: NeighbourGraph,
    revealed: Mapping[int, Mapping[int, bytes]],
    parameters: RoundParameters,
    kind_of: Mapping[int, str],
) -> dict[int, bytes] | RoundAborted:
    """Each owner's secret from the first t holders that revealed a share of it."""
    responders = frozenset(revealed)
    everyone_responding = sorted(responders & graph.everyone)
    groups: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for owner in owners:
        holders = (
            everyone_responding
            if graph.complete
            else sorted((graph.neighbours(owner) | {owner}) & responders)
        )
        if len(holders) < graph.threshold:
            reason = (
                AbortReason.BELOW_THRESHOLD
                if graph.complete
                else AbortReason.NEIGHBOURHOOD_BELOW_THRESHOLD
            )
            return _aborted(
                parameters,
                reason,
                f"{kind_of[owner]} of member {owner}: {len(holders)} shares of t={graph.threshold}",
            )
        groups[tuple(holders[: graph.threshold])].append(owner)
    secrets: dict[int, bytes] = {}
    for holders_key, group in groups.items():
        data = b"".join(revealed[holder][owner] for holder in holders_key for owner in group)
        shares = np.frombuffer(data, dtype="<u4").astype(np.int64)
        shares = shares.reshape(len(holders_key), len(group), shamir.SECRET_CHUNKS)
        if bool(np.any(shares >= shamir.PRIME)):
            return _aborted(
                parameters, AbortReason.INCONSISTENT_SHARES, "a revealed share is outside the field"
            )
        constants = shamir.interpolate(holders_key, shares)
        values = []
        for owner, chunks in zip(group, constants, strict=True):
            try:
                values.append(shamir.chunks_to_secret(chunks))
            except shamir.ReconstructionError:
                return _aborted(
                    parameters,
                    AbortReason.INCONSISTENT_SHARES,
                    f"shares of the {kind_of[owner]} of member {owner} do not reconstruct a secret",
                )
        secrets.update(zip(group, values, strict=True))
    return secrets


def unmask(
    parameters: RoundParameters,
    graph: NeighbourGraph,
    session: bytes,
    mask_public_keys: Mapping[int, bytes],
    shared: frozenset[int],
    masked_inputs: Mapping[int, NDArray[np.uint32]],
    revealed: Mapping[int, Mapping[int, bytes]],
) -> AggregateSum | RoundAborted:
    """The sum of the survivors' inputs, or why it cannot be had.

    ``shared`` is U2 (members whose shares were forwarded), ``masked_inputs`` is keyed by
    U3 (survivors), ``revealed`` maps each responder to {owner: share bytes}, where the
    share is of the self-mask seed for a survivor and of the mask key otherwise.
    """
    survivors = sorted(masked_inputs)
    survivor_set = frozenset(survivors)
    dropped = [w for w in sorted(shared - survivor_set) if graph.neighbours(w) & survivor_set]
    kind_of = {u: "self-mask seed" for u in survivors} | {w: "mask key" for w in dropped}
    secrets = _reconstruct_all(survivors + dropped, graph, revealed, parameters, kind_of)
    if isinstance(secrets, RoundAborted):
        return secrets
    length = parameters.vector_length
    round_number = parameters.round
    stacked = np.stack([masked_inputs[u] for u in survivors]).astype(np.uint64)
    total = (stacked.sum(axis=0) & 0xFFFFFFFF).astype(np.uint32)
    for u in survivors:
        total -= transcript.self_mask(secrets[u], session, round_number, length)
    public_keys: dict[int, X25519PublicKey] = {}
    for w in dropped:
        if primitives.public_agreement_key(secrets[w]) != mask_public_keys[w]:
            return _aborted(
                parameters,
                AbortReason.INCONSISTENT_SHARES,
                f"reconstructed mask key of member {w} does not match its advert",
            )
        key = primitives.load_agreement_key(secrets[w])
        for v in sorted(graph.neighbours(w) & survivor_set):
            if v not in public_keys:
                public_keys[v] = primitives.load_agreement_public_key(mask_public_keys[v])
            secret = key.exchange(public_keys[v])  # keys were checked usable at advert
            mask = transcript.pairwise_mask(secret, session, round_number, w, v, length)
            # survivor v added +mask if w > v, -mask if w < v: take it back out
            if w > v:
                total -= mask
            else:
                total += mask
    return AggregateSum(round_number, session, tuple(survivors), total)
