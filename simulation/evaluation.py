"""Held-out evaluation of the paper's simulation (section 5.1; the notebook's validation
accuracy, plus the field study's characters typed and selected rank of section 5.3).

A fixed set of held-out people and queries (noise and dropdown rows fixed once) is typed
again under every model: the person's choice does not depend on the model, but what is
shown, when they select and at which rank do. Metrics, averaged over queries:

* ``loss``: pointwise SVM loss of the selection among the suggestions shown (in score
  units: it also falls when every weight shrinks);
* ``relative_loss``: the same with scores divided by the selected suggestion's score
  (scale free);
* ``accuracy``: the selected page was ranked first (top-1 ranking accuracy);
* ``chars_typed``: characters typed before selecting;
* ``rank_selected``: 0-based rank of the selected suggestion;
* ``shown``: suggestions displayed.

``oracle`` ranks by the true preference without noise (its loss is in preference units).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from numpy.typing import NDArray

from frecency.learning import DEFAULT_MARGIN, ranking_losses
from frecency.model import FrecencyModel, PageBatch
from frecency.synthetic import (
    PopulationConfig,
    Preference,
    draw_population,
)
from frecency.urlbar import QueryBatch, type_queries

FloatArray = NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Metrics:
    """Means over the held-out queries."""

    loss: float
    relative_loss: float
    accuracy: float
    chars_typed: float
    rank_selected: float
    shown: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


@dataclass(frozen=True, slots=True, eq=False)
class HeldOut:
    """Held-out people encoded as one batch, their fixed queries, their true preference."""

    model: FrecencyModel
    batch: PageBatch
    queries: QueryBatch
    preference: FloatArray

    def scores(self, weights: FloatArray) -> FloatArray:
        """The model's score of every held-out page under ``weights`` ``(d,)``."""
        matrix = np.asarray(weights, dtype=np.float64)[np.newaxis, :]
        return np.asarray(self.model.score(self.batch, matrix)[0], dtype=np.float64)


def draw_held_out(
    rng: np.random.Generator,
    config: PopulationConfig,
    model: FrecencyModel,
    preference: Preference,
    people: int,
    queries_per_person: int,
) -> HeldOut:
    """``people`` fresh people (not participants) with ``queries_per_person`` queries."""
    population = draw_population(rng, config, model, preference, people)
    owners = np.repeat(np.arange(people, dtype=np.int64), queries_per_person)
    queries = population.draw_queries(rng, config, owners)
    return HeldOut(
        model=model, batch=population.batch, queries=queries, preference=population.preference
    )


def evaluate_scores(
    held_out: HeldOut, scores: FloatArray, margin: float = DEFAULT_MARGIN
) -> Metrics:
    """Type every held-out query with pages ranked by ``scores`` (one per page)."""
    outcome = type_queries(held_out.queries, scores[held_out.queries.page])
    losses = ranking_losses(scores[np.newaxis, :], outcome.shown, outcome.selected, margin)[0]
    relative = ranking_losses(
        scores[np.newaxis, :], outcome.shown, outcome.selected, margin, relative=True
    )[0]
    return Metrics(
        loss=float(losses.mean()),
        relative_loss=float(relative.mean()),
        accuracy=float((outcome.selected == 0).mean()),
        chars_typed=float(outcome.chars_typed.mean()),
        rank_selected=float(outcome.selected.mean()),
        shown=float(outcome.shown_count.mean()),
    )


def evaluate_weights(
    held_out: HeldOut, weights: FloatArray, margin: float = DEFAULT_MARGIN
) -> Metrics:
    """Held-out metrics of the model under ``weights``."""
    return evaluate_scores(held_out, held_out.scores(weights), margin)


def evaluate_oracle(held_out: HeldOut, margin: float = DEFAULT_MARGIN) -> Metrics:
    """Held-out metrics when pages are ranked by the noiseless true preference."""
    return evaluate_scores(held_out, held_out.preference, margin)


def gap_closed(baseline: float, oracle: float, value: float) -> float:
    """Share of the baseline-to-oracle gap that ``value`` closes (1.0 = at the oracle)."""
    gap = oracle - baseline
    if gap == 0:
        return 1.0 if value == oracle else 0.0
    return (value - baseline) / gap
