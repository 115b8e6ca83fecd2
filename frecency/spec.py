"""Model specs: the trainable weight vector described as data (DESIGN.md section 2).

A spec names each weight, its default, whether it is an integer pref, its bounds, and the
ordering constraints the optimizer must keep (paper section 4.6, "Safeguards"). The
protocol and the optimizer read only this, so a third heuristic is a new spec, not new
protocol code.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray


@dataclass(frozen=True, slots=True)
class Param:
    """One trainable weight."""

    name: str
    pref: str
    default: float
    integer: bool = True
    lower: float = 0.0
    upper: float = float("inf")


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A weight vector's layout and constraints.

    ``increasing`` groups must be strictly increasing by at least ``min_gap`` between
    neighbours (bucket cutoffs); ``non_increasing`` groups must not increase along the
    group (bucket weights by age, kind weights by importance).
    """

    name: str
    description: str
    params: tuple[Param, ...]
    increasing: tuple[tuple[int, ...], ...] = ()
    non_increasing: tuple[tuple[int, ...], ...] = ()
    min_gap: float = 1.0

    @property
    def dimension(self) -> int:
        return len(self.params)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def defaults(self) -> NDArray[np.float64]:
        return np.array([p.default for p in self.params], dtype=np.float64)

    def lower_bounds(self) -> NDArray[np.float64]:
        return np.array([p.lower for p in self.params], dtype=np.float64)

    def upper_bounds(self) -> NDArray[np.float64]:
        return np.array([p.upper for p in self.params], dtype=np.float64)

    def integer_mask(self) -> NDArray[np.bool_]:
        return np.array([p.integer for p in self.params], dtype=np.bool_)

    def index(self, name: str) -> int:
        for i, p in enumerate(self.params):
            if p.name == name:
                return i
        raise KeyError(f"{self.name} has no weight named {name!r}")
