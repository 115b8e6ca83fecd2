"""Array helpers shared by the two frecency models (DESIGN.md section 2).

Integer arithmetic as SQLite and C++ do it (division truncating toward zero), the weight
matrix shape every ``score`` accepts, and the compensated sum SQLite's ``sum()`` uses
since 3.43 (Kahan-Babuska-Neumaier), so that ``frecency()`` reproduces Firefox's stored
integers bit for bit.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]


def trunc_div(numerator: IntArray, denominator: int) -> IntArray:
    """``numerator / denominator`` truncated toward zero, as SQLite and C do for integers."""
    quotient = np.abs(numerator) // abs(denominator)
    sign = np.sign(numerator) * (1 if denominator > 0 else -1)
    return np.asarray(quotient * sign, dtype=np.int64)


def weight_matrix(weights: FloatArray, dimension: int) -> FloatArray:
    """``weights`` as a ``(W, dimension)`` float matrix (a single vector becomes W = 1)."""
    matrix = np.asarray(weights, dtype=np.float64)
    if matrix.ndim == 1:
        matrix = matrix[np.newaxis, :]
    if matrix.ndim != 2 or matrix.shape[1] != dimension:
        raise ValueError(f"weights must have shape (W, {dimension}), got {np.shape(weights)}")
    return matrix


def weight_vector(weights: FloatArray, dimension: int) -> FloatArray:
    """``weights`` as one ``(dimension,)`` vector, for ``frecency()``."""
    vector = np.asarray(weights, dtype=np.float64)
    if vector.shape != (dimension,):
        raise ValueError(f"weights must have shape ({dimension},), got {np.shape(weights)}")
    return vector


def as_pref_integers(vector: FloatArray) -> IntArray:
    """Weights as the integer prefs Firefox reads (nearest integer)."""
    return np.asarray(np.rint(vector), dtype=np.int64)


def kbn_sum(terms: FloatArray, mask: BoolArray) -> FloatArray:
    """Sum over the last axis of the masked ``terms``, column by column, with SQLite's
    Kahan-Babuska-Neumaier compensation (``sumStep`` / ``sumFinalize`` in func.c)."""
    total = np.zeros(terms.shape[:-1], dtype=np.float64)
    error = np.zeros(terms.shape[:-1], dtype=np.float64)
    for column in range(terms.shape[-1]):
        value = np.where(mask[..., column], terms[..., column], 0.0)
        new_total = total + value
        error = error + np.where(
            np.abs(total) > np.abs(value), (total - new_total) + value, (value - new_total) + total
        )
        total = new_total
    return np.asarray(total + error, dtype=np.float64)
