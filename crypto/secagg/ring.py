"""Signed integers in and out of Z_{2^32}, the ring secure aggregation sums in (DESIGN.md
section 3: ternary votes and fixed-point metric totals; section 4: the vote total).

A sum of signed values is recovered exactly as long as the true sum lies in
[-2^31, 2^31): with n members voting in {-1, 0, +1} that holds for n < 2^31.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

RING_BITS = 32


def to_ring(values: ArrayLike) -> NDArray[np.uint32]:
    """Signed integers (in [-2^31, 2^31)) as elements of Z_{2^32} (two's complement)."""
    signed = np.asarray(values, dtype=np.int64)
    if signed.size and (signed.min() < -(1 << 31) or signed.max() >= 1 << 31):
        raise ValueError("values must lie in [-2^31, 2^31)")
    return signed.astype(np.uint32)


def from_ring(total: NDArray[np.uint32]) -> NDArray[np.int64]:
    """A ring element read back as the signed integer in [-2^31, 2^31) it represents."""
    return np.asarray(total, dtype=np.uint32).view(np.int32).astype(np.int64)


def to_fixed_point(values: ArrayLike, scale: int) -> NDArray[np.uint32]:
    """Reals as ring elements, rounded to multiples of 1/scale (e.g. loss totals)."""
    return to_ring(np.rint(np.asarray(values, dtype=np.float64) * scale))


def from_fixed_point(total: NDArray[np.uint32], scale: int) -> NDArray[np.float64]:
    """Inverse of ``to_fixed_point`` for sums."""
    return from_ring(total).astype(np.float64) / scale
