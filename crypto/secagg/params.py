"""Round parameters and the SecAgg+ neighbour graph (DESIGN.md s. 6; Bell et al. 2020, s. 3).

``RoundParameters`` come from the (signed) round announcement and are known to server and
clients alike. ``NeighbourGraph`` says with whom each member masks and shares: everyone
(Bonawitz et al. 2017) or, with ``secagg_plus``, its ``degree`` neighbours on a random ring
(a Harary graph over a random ordering), so per-member work grows as log n. The ring order
is derived from the session id, which every party computes from the roster, so all agree.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

from crypto.hazmat.primitives import encode_fields
from crypto.hazmat.shamir import PRIME
from crypto.secagg.errors import LocalProtocolError

_RING_LABEL = "fedrank/secagg/neighbour-ring"


@dataclass(frozen=True, slots=True)
class RoundParameters:
    """What one secure-aggregation round is: its number, threshold t, input length d, and
    the graph (full, or SecAgg+ with ``degree`` neighbours and its own threshold)."""

    round: int
    threshold: int
    vector_length: int
    secagg_plus: bool = False
    degree: int | None = None  # SecAgg+: neighbours per member; None: about 2 log2 n
    neighbourhood_threshold: int | None = None  # SecAgg+: None: t scaled to the neighbourhood

    def __post_init__(self) -> None:
        if self.round < 0:
            raise LocalProtocolError("round must be non-negative")
        if self.threshold < 1:
            raise LocalProtocolError("threshold must be at least 1")
        if self.vector_length < 1:
            raise LocalProtocolError("vector length must be at least 1")
        if self.degree is not None and self.degree < 2:
            raise LocalProtocolError("SecAgg+ degree must be at least 2")
        if self.neighbourhood_threshold is not None and self.neighbourhood_threshold < 1:
            raise LocalProtocolError("neighbourhood threshold must be at least 1")


def default_degree(member_count: int) -> int:
    """About 2 log2 n neighbours, even (k/2 on each side of the ring)."""
    return 2 * max(1, math.ceil(math.log2(max(member_count, 2))))


@dataclass(frozen=True, slots=True)
class NeighbourGraph:
    """Each member's neighbours (itself excluded) and the Shamir threshold of every
    neighbourhood (a member's secrets are shared among it and its neighbours)."""

    members: tuple[int, ...]
    threshold: int
    neighbourhoods: dict[int, frozenset[int]]

    @property
    def complete(self) -> bool:
        return all(len(n) == len(self.members) - 1 for n in self.neighbourhoods.values())

    def neighbours(self, member: int) -> frozenset[int]:
        return self.neighbourhoods[member]

    def share_holders(self, member: int) -> tuple[int, ...]:
        """Who holds shares of ``member``'s secrets: itself and its neighbours, sorted."""
        return tuple(sorted(self.neighbourhoods[member] | {member}))


def check_member_id(member: int) -> None:
    """Member ids are Shamir evaluation points, so they lie in [1, p - 1]."""
    if not 1 <= member < PRIME:
        raise LocalProtocolError(f"member id {member} outside [1, {PRIME - 1}]")


def build_graph(
    parameters: RoundParameters, members: tuple[int, ...], session_id: bytes
) -> NeighbourGraph:
    """The neighbour graph of a round over ``members`` (sorted, distinct)."""
    count = len(members)
    everyone = frozenset(members)
    degree = parameters.degree or default_degree(count)
    if not parameters.secagg_plus or degree >= count - 1:
        return NeighbourGraph(
            members=members,
            threshold=parameters.threshold,
            neighbourhoods={m: everyone - {m} for m in members},
        )
    degree -= degree % 2
    half = degree // 2
    ring = sorted(
        members,
        key=lambda m: hashlib.sha256(encode_fields(_RING_LABEL, session_id, m)).digest(),
    )
    position = {m: i for i, m in enumerate(ring)}
    neighbourhoods = {
        m: frozenset(
            ring[(position[m] + offset) % count] for offset in range(-half, half + 1) if offset != 0
        )
        for m in members
    }
    threshold = parameters.neighbourhood_threshold or math.ceil(
        parameters.threshold * (degree + 1) / count
    )
    return NeighbourGraph(
        members=members, threshold=min(threshold, degree + 1), neighbourhoods=neighbourhoods
    )
