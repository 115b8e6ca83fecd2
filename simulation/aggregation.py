"""How the simulation sums a round's votes (DESIGN.md section 4, "the secure sum gives the
vote total"): behind one interface so that secure aggregation can replace the plain sum
the paper's simulation used."""

from __future__ import annotations

from typing import Protocol

import numpy as np
from numpy.typing import NDArray

IntArray = NDArray[np.int64]


class VoteAggregation(Protocol):
    """Turns the votes of one round's participants into their total."""

    def aggregate(self, votes: list[IntArray]) -> IntArray: ...


class PlainSum:
    """The votes summed in the clear (the 2018 simulation; no privacy)."""

    def aggregate(self, votes: list[IntArray]) -> IntArray:
        if not votes:
            raise ValueError("no votes to aggregate")
        return np.asarray(np.sum(np.stack(votes), axis=0), dtype=np.int64)
