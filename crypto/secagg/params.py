"""Round parameters and the SecAgg+ neighbour graph (DESIGN.md s. 6; Bell et al. 2020, s. 3).

``RoundParameters`` come from the (signed) round announcement and are known to server and
clients alike. ``NeighbourGraph`` says with whom each member masks and shares: everyone
(Bonawitz et al. 2017) or, with ``secagg_plus``, its ``degree`` neighbours on a random ring
(a Harary graph over a random ordering), so per-member work grows as log n. The ring order
is derived from the session id, which every party computes from the roster, so all agree.

The graph is implicit: the complete graph stores only the member set, the ring only the
ring order (computed once per (session, members) and shared by every party of a process);
neighbourhoods are computed on demand, so a member holds O(n) ids, not O(n^2).

Defaults (``docs/secure-aggregation.md``, "Choosing k and t_k"): the neighbourhood
threshold is a strict majority of the closed neighbourhood, floor((k+1)/2) + 1, which keeps
the security argument; the degree is the smallest even k >= 2 ceil(log2 n) for which, with
``DESIGN_DROPOUT_RATE`` of members dropping independently, the probability that some
neighbourhood keeps fewer than its threshold (union bound over the n neighbourhoods) is at
most ``FAILURE_BOUND`` = 2^-20; when no k < n - 1 achieves that, the graph is complete.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from functools import lru_cache

from crypto.hazmat.primitives import encode_fields
from crypto.hazmat.shamir import PRIME
from crypto.secagg.errors import LocalProtocolError

_RING_LABEL = "fedrank/secagg/neighbour-ring"
#: Fraction of members a SecAgg+ round must survive losing (independently, at random).
DESIGN_DROPOUT_RATE = 0.3
#: Acceptable probability that a round aborts because one neighbourhood lost its threshold.
FAILURE_BOUND = 2.0**-20


@dataclass(frozen=True, slots=True)
class RoundParameters:
    """What one secure-aggregation round is: its number, threshold t, input length d, and
    the graph (full, or SecAgg+ with ``degree`` neighbours and its own threshold)."""

    round: int
    threshold: int
    vector_length: int
    secagg_plus: bool = False
    degree: int | None = None  # SecAgg+: neighbours per member; None: ``default_degree``
    neighbourhood_threshold: int | None = None  # SecAgg+: None: majority of k + 1

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


def logarithmic_degree(member_count: int) -> int:
    """About 2 log2 n neighbours, even (k/2 on each side of the ring)."""
    return 2 * max(1, math.ceil(math.log2(max(member_count, 2))))


def majority_threshold(degree: int) -> int:
    """The default neighbourhood threshold: a strict majority of the k + 1 holders."""
    return (degree + 1) // 2 + 1


def _binomial_cdf(successes: int, trials: int, probability: float) -> float:
    """P(Binomial(trials, probability) <= successes), exactly summed."""
    return math.fsum(
        math.comb(trials, i) * probability**i * (1.0 - probability) ** (trials - i)
        for i in range(0, min(successes, trials) + 1)
    )


def neighbourhood_failure_probability(
    member_count: int, degree: int, threshold: int, dropout_rate: float
) -> float:
    """Union bound on P(some closed neighbourhood keeps fewer than ``threshold`` of its
    ``degree + 1`` holders) when each member drops independently with ``dropout_rate``."""
    per_neighbourhood = _binomial_cdf(threshold - 1, degree + 1, 1.0 - dropout_rate)
    return min(1.0, member_count * per_neighbourhood)


@lru_cache(maxsize=1024)
def degree_for(
    member_count: int,
    dropout_rate: float = DESIGN_DROPOUT_RATE,
    failure_bound: float = FAILURE_BOUND,
) -> int:
    """The smallest even degree >= 2 ceil(log2 n) whose majority-threshold neighbourhoods
    all survive ``dropout_rate`` except with probability ``failure_bound``; n - 1 (the
    complete graph) when no sparser ring does."""
    degree = logarithmic_degree(member_count)
    while degree < member_count - 1:
        failure = neighbourhood_failure_probability(
            member_count, degree, majority_threshold(degree), dropout_rate
        )
        if failure <= failure_bound:
            return degree
        degree += 2
    return max(member_count - 1, 1)


def default_degree(member_count: int) -> int:
    """The default SecAgg+ degree: ``degree_for`` at the design dropout rate and bound."""
    return degree_for(member_count)


@lru_cache(maxsize=64)
def ring_order(session_id: bytes, members: tuple[int, ...]) -> tuple[int, ...]:
    """The members sorted by SHA-256(label, session id, id): the SecAgg+ ring. Cached, so
    every party in a process sorts a session's members once."""
    return tuple(
        sorted(
            members,
            key=lambda m: hashlib.sha256(encode_fields(_RING_LABEL, session_id, m)).digest(),
        )
    )


@lru_cache(maxsize=64)
def _ring_positions(ring: tuple[int, ...]) -> dict[int, int]:
    return {m: i for i, m in enumerate(ring)}


@lru_cache(maxsize=64)
def _member_set(members: tuple[int, ...]) -> frozenset[int]:
    """The members as a set, shared by every party of a process that has the same roster."""
    return frozenset(members)


@dataclass(frozen=True, slots=True)
class NeighbourGraph:
    """Each member's neighbours (itself excluded) and the Shamir threshold of every
    neighbourhood (a member's secrets are shared among it and its neighbours).

    ``ring`` is empty for the complete graph; otherwise each member's neighbours are the
    ``half_degree`` members on each side of it on ``ring``."""

    members: tuple[int, ...]
    threshold: int
    ring: tuple[int, ...] = ()
    half_degree: int = 0
    everyone: frozenset[int] = field(default=frozenset(), compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.everyone:
            object.__setattr__(self, "everyone", _member_set(self.members))

    @property
    def complete(self) -> bool:
        return not self.ring

    @property
    def degree(self) -> int:
        """Neighbours per member."""
        return len(self.members) - 1 if self.complete else 2 * self.half_degree

    def neighbours(self, member: int) -> frozenset[int]:
        if member not in self.everyone:
            raise KeyError(member)
        if self.complete:
            return self.everyone - {member}
        position = _ring_positions(self.ring)[member]
        count = len(self.ring)
        return frozenset(
            self.ring[(position + offset) % count]
            for offset in range(-self.half_degree, self.half_degree + 1)
            if offset != 0
        )

    def are_neighbours(self, a: int, b: int) -> bool:
        """Whether ``a`` and ``b`` (distinct members) share with each other; O(1)."""
        if a == b or a not in self.everyone or b not in self.everyone:
            return False
        if self.complete:
            return True
        positions = _ring_positions(self.ring)
        distance = abs(positions[a] - positions[b])
        return min(distance, len(self.ring) - distance) <= self.half_degree

    def share_holders(self, member: int) -> tuple[int, ...]:
        """Who holds shares of ``member``'s secrets: itself and its neighbours, sorted."""
        if self.complete and member in self.everyone:
            return self.members
        return tuple(sorted(self.neighbours(member) | {member}))


def check_member_id(member: int) -> None:
    """Member ids are Shamir evaluation points, so they lie in [1, p - 1]."""
    if not 1 <= member < PRIME:
        raise LocalProtocolError(f"member id {member} outside [1, {PRIME - 1}]")


def build_graph(
    parameters: RoundParameters, members: tuple[int, ...], session_id: bytes
) -> NeighbourGraph:
    """The neighbour graph of a round over ``members`` (sorted, distinct)."""
    count = len(members)
    everyone = _member_set(members)
    degree = parameters.degree or default_degree(count)
    if not parameters.secagg_plus or degree >= count - 1:
        return NeighbourGraph(members=members, threshold=parameters.threshold, everyone=everyone)
    degree -= degree % 2
    threshold = parameters.neighbourhood_threshold or majority_threshold(degree)
    return NeighbourGraph(
        members=members,
        threshold=min(threshold, degree + 1),
        ring=ring_order(session_id, members),
        half_degree=degree // 2,
        everyone=everyone,
    )
