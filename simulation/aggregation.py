"""How the simulation sums a round's votes (DESIGN.md section 4, "the secure sum gives the
vote total"; section 5, "below quorum at any phase the round aborts and the model
stays"): behind one interface so that secure aggregation can replace the plain sum the
paper's simulation used.

A :class:`VoteAggregation` turns the votes of one round's voters into an
:data:`AggregationOutcome`: either :class:`VotesSummed` (the total and which voters'
votes are in it: with secure aggregation, members that dropped before sending their
masked input are not) or :class:`AggregationAborted` (the round gave up; the model
stays). :class:`PlainSum` is the 2018 simulation's clear sum;
:class:`simulation.secure.SecureSum` is crypto.secagg's protocol.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

IntArray = NDArray[np.int64]


@dataclass(frozen=True, slots=True, eq=False)
class VotesSummed:
    """The vote total (int64) over the voters at positions ``included`` of the round's
    vote list (ascending)."""

    total: IntArray
    included: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class AggregationAborted:
    """The round's aggregation gave up (no vote is in any total): ``reason`` says why,
    e.g. ``below threshold at MaskedInputCollection: 15 of t=20``."""

    reason: str


AggregationOutcome = VotesSummed | AggregationAborted


class VoteAggregation(Protocol):
    """Sums the votes of one round (``round_number`` 1-based)."""

    def run_round(self, votes: Sequence[IntArray], round_number: int) -> AggregationOutcome: ...


class PlainSum:
    """The votes summed in the clear (the 2018 simulation; no privacy, nobody drops)."""

    def aggregate(self, votes: Sequence[IntArray]) -> IntArray:
        if not votes:
            raise ValueError("no votes to aggregate")
        return np.asarray(np.sum(np.stack(votes), axis=0), dtype=np.int64)

    def run_round(self, votes: Sequence[IntArray], round_number: int) -> AggregationOutcome:
        return VotesSummed(self.aggregate(votes), tuple(range(len(votes))))
