"""The frecency model interface every spec implements (DESIGN.md section 2).

A model encodes a history once into arrays (``PageBatch``) and then scores any subset of
its pages under many weight vectors in one numpy call: a central finite difference over
d weights needs 2d + 1 vectors per interaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, Self

import numpy as np
from numpy.typing import NDArray

from frecency.history import Page
from frecency.spec import ModelSpec

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


class PageBatch(Protocol):
    """Encoded pages of one history; model-specific arrays, indexable by page."""

    def __len__(self) -> int: ...

    def take(self, pages: Sequence[int] | IntArray) -> Self:
        """The batch restricted to the given page indices, in that order."""
        ...


class FrecencyModel(Protocol):
    """A trainable frecency heuristic."""

    @property
    def spec(self) -> ModelSpec: ...

    def encode(self, pages: Sequence[Page], now_us: int) -> PageBatch:
        """Arrays for scoring ``pages`` as of ``now_us`` (PRTime)."""
        ...

    def score(self, batch: PageBatch, weights: FloatArray) -> FloatArray:
        """Real-valued scores, shape ``(W, P)`` for weights of shape ``(W, d)``.

        Used for learning: monotone in Firefox's stored value and not truncated, so
        finite differences of size 1 in any weight are visible.
        """
        ...

    def frecency(self, batch: PageBatch, weights: FloatArray) -> IntArray:
        """The integer value Firefox would store for each page, shape ``(P,)``, for one
        weight vector of shape ``(d,)``."""
        ...
