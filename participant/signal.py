"""The participant's learning signal (DESIGN.md section 3; paper sections 4.2 and 4.4):
from the interactions since its last contribution, under the announced weights, the
ternary vote and the metrics reported with it inside the secure sum.

The vote is ``frecency.learning.vote`` of the summed central-difference gradient of the
pointwise SVM loss (``-sign``, so +1 means "increase this weight"); by default the
*relative* SVM loss (``frecency.learning.ranking_losses(relative=True)``), as the
simulation uses, or the shipped plain one (``loss="svm"``). The metrics are this
participant's *totals* (the aggregator divides the summed totals by the summed
interaction count): interactions, SVM loss at the announced weights, characters typed
before selecting, 0-based rank selected (as the 2018 ping), suggestions displayed
(``broker.payload.ParticipantMetrics``). Clipping them, so that
one participant cannot dominate the totals, is the payload encoder's job
(``broker.payload``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from broker.payload import ParticipantMetrics
from frecency.learning import DEFAULT_MARGIN, loss_and_gradient, vote
from frecency.model import FrecencyModel
from participant.history import PendingInteractions

IntArray = NDArray[np.int64]
LossKind = Literal["svm", "relative"]
#: The simulation's default (``fedrank simulate --loss``): scores divided by the selected
#: suggestion's score, so the vote carries the ranking, not the model's overall scale.
DEFAULT_LOSS: LossKind = "relative"
FloatArray = NDArray[np.float64]


@dataclass(frozen=True, slots=True, eq=False)
class Contribution:
    """A participant's vote in {-1, 0, +1}^d (int64) and its metric totals (unclipped)."""

    vote: IntArray
    metrics: ParticipantMetrics


def compute_contribution(
    model: FrecencyModel,
    pending: PendingInteractions,
    weights: FloatArray,
    margin: float = DEFAULT_MARGIN,
    loss: LossKind = DEFAULT_LOSS,
) -> Contribution:
    """The vote and totals of ``pending`` under ``weights`` (pure)."""
    interactions = pending.interactions
    result = loss_and_gradient(
        model,
        pending.batch,
        np.asarray(weights, dtype=np.float64),
        list(interactions),
        margin,
        relative=loss == "relative",
    )
    metrics = ParticipantMetrics(
        interactions=len(interactions),
        loss=float(result.loss),
        chars_typed=sum(i.chars_typed for i in interactions),
        rank_selected=sum(i.rank_selected for i in interactions),
        suggestions_displayed=sum(len(i.shown) for i in interactions),
    )
    return Contribution(vote=vote(result.gradient), metrics=metrics)
