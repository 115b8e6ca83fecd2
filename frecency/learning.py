"""The participant's learning signal: loss, finite-difference gradient, vote (paper
sections 4.2 "Pointwise SVM Ranking" and 4.4 "Approximating Gradients"; DESIGN.md
section 3).

* Loss of one interaction: ``sum_{j != i} max(0, f(x_j) + margin - f(x_i))`` over the
  suggestions shown, ``i`` the selected one (margin 0 as the 2018 study shipped).
* Gradient: central differences ``(L(w + eps e_k) - L(w - eps e_k)) / (2 eps)`` for all
  d weights. The model is a black box read only through ``score``; the 2d + 1 weight
  vectors are stacked and every page any of a participant's interactions showed is scored
  under all of them in ONE ``model.score`` call. ``eps`` is 1 for every weight (the
  study's eps for integer prefs; the specs carry no other step, and 1 is also what a
  real-valued weight can move by without being lost in the score's rounding).
* Vote: the sign of the descent direction of the summed gradient,
  ``-sign(sum of gradients)`` in {-1, 0, +1}^d (int64), so a positive vote total means
  "increase weight k" (the convention ``aggregator/optimizer.apply_votes`` reads).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from frecency.history import Interaction
from frecency.model import FrecencyModel, PageBatch
from frecency.spec import ModelSpec

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

#: The margin the 2018 study shipped.
DEFAULT_MARGIN = 0.0
#: Finite-difference step for integer prefs (and, lacking a spec field, for every weight).
DEFAULT_EPSILON = 1.0


def svm_loss(scores: FloatArray, selected: int, margin: float = DEFAULT_MARGIN) -> FloatArray:
    """Pointwise SVM ranking loss of suggestions scored ``scores`` (``(..., n)``) when
    position ``selected`` was chosen; shape ``(...)``."""
    values = np.asarray(scores, dtype=np.float64)
    hinge = np.maximum(0.0, values + margin - values[..., selected : selected + 1])
    hinge[..., selected] = 0.0
    return np.asarray(hinge.sum(axis=-1), dtype=np.float64)


def epsilons(spec: ModelSpec, epsilon: float = DEFAULT_EPSILON) -> FloatArray:
    """The finite-difference step of every weight of ``spec``."""
    if not epsilon > 0:
        raise ValueError("epsilon must be positive")
    return np.full(spec.dimension, float(epsilon), dtype=np.float64)


def perturbed_weights(weights: FloatArray, steps: FloatArray) -> FloatArray:
    """``(2d + 1, d)``: ``w``, then ``w + eps_k e_k`` for every k, then ``w - eps_k e_k``."""
    w = np.asarray(weights, dtype=np.float64)
    shift = np.diag(np.asarray(steps, dtype=np.float64))
    return np.concatenate((w[np.newaxis, :], w + shift, w - shift))


def ranking_losses(
    scores: FloatArray,
    shown: IntArray,
    selected: IntArray,
    margin: float = DEFAULT_MARGIN,
    relative: bool = False,
) -> FloatArray:
    """SVM loss of many interactions under many weight vectors at once.

    ``scores`` is ``(W, P)``; ``shown`` is ``(m, K)`` page indices into its columns,
    padded with -1; ``selected`` ``(m,)`` positions in ``shown``. Returns ``(W, m)``.

    ``relative``: every score is first divided by the selected suggestion's score (under
    the same weight vector; at least 1 in magnitude), i.e. ``sum_j max(0, f_j / f_i - 1 +
    margin)``. Frecency is homogeneous in its weights (scaling every bucket weight, or
    every bonus, scales every score), and the plain loss with margin 0 falls by shrinking
    them all, which ranks nothing better; the relative loss does not depend on that scale,
    so its gradient carries only the ranking.
    """
    shown = np.asarray(shown, dtype=np.int64)
    selected = np.asarray(selected, dtype=np.int64)
    rows = np.arange(shown.shape[0])
    values = scores[:, np.maximum(shown, 0)]
    chosen = scores[:, shown[rows, selected]]
    counted = shown >= 0
    counted[rows, selected] = False
    if relative:
        unit = np.maximum(np.abs(chosen), 1.0)[:, :, np.newaxis]
        hinge = np.maximum(0.0, (values - chosen[:, :, np.newaxis]) / unit + margin)
    else:
        hinge = np.maximum(0.0, values + margin - chosen[:, :, np.newaxis])
    return np.asarray(np.where(counted, hinge, 0.0).sum(axis=2), dtype=np.float64)


@dataclass(frozen=True, slots=True)
class LossGradient:
    """Summed loss at ``w`` and summed central-difference gradient of ``count``
    interactions (``losses`` per interaction, ``(m,)``)."""

    loss: float
    gradient: FloatArray
    losses: FloatArray
    count: int


def gradient_from_scores(
    scores: FloatArray,
    shown: IntArray,
    selected: IntArray,
    steps: FloatArray,
    margin: float = DEFAULT_MARGIN,
    relative: bool = False,
) -> LossGradient:
    """Loss and gradient from ``scores`` ``(2d + 1, P)`` of :func:`perturbed_weights`."""
    d = np.asarray(steps).shape[0]
    if scores.shape[0] != 2 * d + 1:
        raise ValueError(f"need {2 * d + 1} score rows for {d} weights, got {scores.shape[0]}")
    per = ranking_losses(scores, shown, selected, margin, relative)
    totals = per.sum(axis=1)
    gradient = (totals[1 : d + 1] - totals[d + 1 :]) / (2.0 * np.asarray(steps))
    return LossGradient(
        loss=float(totals[0]), gradient=gradient, losses=per[0].copy(), count=per.shape[1]
    )


def shown_matrix(interactions: Sequence[Interaction]) -> tuple[IntArray, IntArray]:
    """Interactions as ``(shown padded with -1, selected)`` arrays."""
    width = max((len(i.shown) for i in interactions), default=1)
    shown = np.full((len(interactions), max(width, 1)), -1, dtype=np.int64)
    for row, interaction in enumerate(interactions):
        shown[row, : len(interaction.shown)] = interaction.shown
    selected = np.array([i.selected for i in interactions], dtype=np.int64)
    return shown, selected


def loss_and_gradient(
    model: FrecencyModel,
    batch: PageBatch,
    weights: FloatArray,
    interactions: Sequence[Interaction] | tuple[IntArray, IntArray],
    margin: float = DEFAULT_MARGIN,
    epsilon: float = DEFAULT_EPSILON,
    relative: bool = False,
) -> LossGradient:
    """Summed loss and gradient of a participant's interactions with the history encoded
    in ``batch`` (``shown`` indexes its pages), in one ``model.score`` call over the pages
    shown. ``interactions`` may be given as the arrays of :func:`shown_matrix`."""
    if isinstance(interactions, tuple):
        shown, selected = interactions
    else:
        shown, selected = shown_matrix(interactions)
    steps = epsilons(model.spec, epsilon)
    if shown.shape[0] == 0:
        d = model.spec.dimension
        return LossGradient(0.0, np.zeros(d), np.zeros(0), 0)
    pages, local = np.unique(np.maximum(shown, 0), return_inverse=True)
    local_shown = np.where(shown >= 0, local.reshape(shown.shape), -1)
    scores = model.score(batch.take(pages), perturbed_weights(weights, steps))
    return gradient_from_scores(scores, local_shown, selected, steps, margin, relative)


def vote(gradient: FloatArray) -> IntArray:
    """The descent direction's sign: ``-sign(gradient)``, int64 in {-1, 0, +1}."""
    return np.asarray(-np.sign(np.asarray(gradient, dtype=np.float64)), dtype=np.int64)


def grouped_gradients(
    scores: FloatArray,
    shown: IntArray,
    selected: IntArray,
    owner: IntArray,
    groups: int,
    steps: FloatArray,
    margin: float = DEFAULT_MARGIN,
    relative: bool = False,
) -> tuple[FloatArray, FloatArray]:
    """Many participants at once: interactions ``owner[m]`` in ``range(groups)``, scores
    ``(2d + 1, P)`` of :func:`perturbed_weights` over pages ``shown`` indexes. Returns each
    group's summed gradient ``(groups, d)`` and summed loss at ``w`` ``(groups,)``."""
    d = np.asarray(steps).shape[0]
    per = ranking_losses(scores, shown, selected, margin, relative)
    totals = np.zeros((scores.shape[0], groups), dtype=np.float64)
    np.add.at(totals.T, np.asarray(owner, dtype=np.int64), per.T)
    gradient = (totals[1 : d + 1] - totals[d + 1 :]) / (2.0 * np.asarray(steps)[:, np.newaxis])
    return np.asarray(gradient.T, dtype=np.float64), np.asarray(totals[0], dtype=np.float64)
