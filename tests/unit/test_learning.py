"""The learning signal: SVM loss by hand, finite differences against the analytic gradient
of a linear model, vote signs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Self

import numpy as np
import pytest

from frecency.history import Interaction, Page
from frecency.learning import (
    epsilons,
    grouped_gradients,
    loss_and_gradient,
    perturbed_weights,
    ranking_losses,
    shown_matrix,
    svm_loss,
    vote,
)
from frecency.spec import ModelSpec, Param

FEATURES = 4


@dataclass(frozen=True)
class LinearBatch:
    features: np.ndarray

    def __len__(self) -> int:
        return int(self.features.shape[0])

    def take(self, pages: Sequence[int] | np.ndarray) -> Self:
        return type(self)(self.features[np.asarray(pages, dtype=np.int64)])


class LinearModel:
    """score(page) = w . x(page); x read from the title as numbers (a test double)."""

    spec = ModelSpec(
        name="linear",
        description="test",
        params=tuple(Param(name=f"w{i}", pref=f"w{i}", default=1.0) for i in range(FEATURES)),
    )

    def encode(self, pages: Sequence[Page], now_us: int) -> LinearBatch:
        return LinearBatch(np.array([[float(v) for v in p.title.split()] for p in pages]))

    def score(self, batch: LinearBatch, weights: np.ndarray) -> np.ndarray:
        return np.atleast_2d(weights) @ batch.features.T

    def frecency(self, batch: LinearBatch, weights: np.ndarray) -> np.ndarray:
        return np.ceil(self.score(batch, weights)[0]).astype(np.int64)


def _pages(features: np.ndarray) -> list[Page]:
    return [
        Page(url=f"https://p{i}.test/", title=" ".join(str(v) for v in row), visit_count=1)
        for i, row in enumerate(features.tolist())
    ]


def test_svm_loss_by_hand() -> None:
    scores = np.array([3.0, 5.0, 1.0, 4.0])
    assert svm_loss(scores, 1) == 0.0
    # selected 3: (5 - 3) + 0 + (4 - 3)
    assert svm_loss(scores, 0) == 3.0
    # margin 1: (5 + 1 - 3) + max(0, 1 + 1 - 3) + (4 + 1 - 3)
    assert svm_loss(scores, 0, margin=1.0) == 5.0
    # the selected item never counts against itself, even with a margin
    assert svm_loss(scores, 1, margin=10.0) == (3 + 10 - 5) + (1 + 10 - 5) + (4 + 10 - 5)


def test_svm_loss_broadcasts_over_weight_vectors() -> None:
    scores = np.array([[3.0, 5.0, 1.0], [6.0, 5.0, 1.0]])
    assert svm_loss(scores, 0).tolist() == [2.0, 0.0]


def test_ranking_losses_ignore_padding() -> None:
    scores = np.array([[3.0, 5.0, 1.0, 4.0]])
    shown = np.array([[0, 1, 2, 3], [2, 0, -1, -1]])
    selected = np.array([0, 0])
    # row 2: page 2 (score 1) selected above page 0 (score 3): loss 2; padding ignored.
    assert ranking_losses(scores, shown, selected).tolist() == [[3.0, 2.0]]


def test_perturbed_weights_layout() -> None:
    stacked = perturbed_weights(np.array([1.0, 2.0]), np.array([1.0, 0.5]))
    assert stacked.tolist() == [[1.0, 2.0], [2.0, 2.0], [1.0, 2.5], [0.0, 2.0], [1.0, 1.5]]


def test_finite_difference_equals_analytic_gradient_of_linear_model() -> None:
    rng = np.random.default_rng(7)
    model = LinearModel()
    features = rng.integers(0, 20, size=(30, FEATURES)).astype(np.float64)
    batch = model.encode(_pages(features), 0)
    weights = rng.uniform(5.0, 10.0, FEATURES)
    interactions = []
    analytic = np.zeros(FEATURES)
    for _ in range(12):
        shown = rng.choice(30, size=8, replace=False)
        selected = int(rng.integers(0, 8))
        scores = features[shown] @ weights
        gaps = scores - scores[selected]
        # Keep away from the hinge's kink so the loss is linear within +-eps (a weight
        # moving by 1 moves a score gap by at most the largest feature, 19).
        if np.any(np.abs(gaps[np.arange(8) != selected]) <= 19.0):
            continue
        active = (gaps > 0) & (np.arange(8) != selected)
        analytic += (features[shown][active] - features[shown[selected]]).sum(axis=0)
        interactions.append(Interaction("q", tuple(int(p) for p in shown), selected, 1))
    assert interactions, "no interaction away from the kink; change the seed"
    result = loss_and_gradient(model, batch, weights, interactions)
    np.testing.assert_allclose(result.gradient, analytic, atol=1e-9)
    assert result.count == len(interactions)


def test_gradient_near_kink_is_average_of_one_sided_slopes() -> None:
    model = LinearModel()
    features = np.array([[1.0, 0, 0, 0], [0, 1.0, 0, 0]])
    batch = model.encode(_pages(features), 0)
    # f(0) = w0 = 5, f(1) = w1 = 5: tie; selected page 0.
    weights = np.array([5.0, 5.0, 1.0, 1.0])
    result = loss_and_gradient(model, batch, weights, [Interaction("q", (0, 1), 0, 1)])
    # L(w0 + 1) = 0, L(w0 - 1) = 1 -> -1/2; L(w1 + 1) = 1, L(w1 - 1) = 0 -> +1/2
    assert result.gradient.tolist() == [-0.5, 0.5, 0.0, 0.0]
    assert vote(result.gradient).tolist() == [1, -1, 0, 0]


def test_vote_is_descent_sign() -> None:
    v = vote(np.array([2.0, -3.0, 0.0, 1e-12]))
    assert v.tolist() == [-1, 1, 0, -1]
    assert v.dtype == np.int64


def test_vote_moves_selected_page_up() -> None:
    """A learner following the vote ranks the selected page higher."""
    model = LinearModel()
    features = np.array([[4.0, 0, 1, 0], [0, 3.0, 1, 0], [1.0, 1.0, 0, 0]])
    batch = model.encode(_pages(features), 0)
    weights = np.array([2.0, 3.0, 1.0, 1.0])
    interaction = Interaction("q", (1, 0, 2), 1, 1)  # page 0 selected, page 1 above it
    before = loss_and_gradient(model, batch, weights, [interaction])
    after = loss_and_gradient(model, batch, weights + vote(before.gradient), [interaction])
    assert before.loss > 0
    assert after.loss < before.loss


def test_grouped_gradients_equal_separate_ones() -> None:
    rng = np.random.default_rng(11)
    model = LinearModel()
    features = rng.normal(size=(20, FEATURES))
    batch = model.encode(_pages(features), 0)
    weights = rng.normal(size=FEATURES)
    steps = epsilons(model.spec)
    interactions = [
        Interaction("q", tuple(int(p) for p in rng.choice(20, 5, replace=False)), 2, 1)
        for _ in range(9)
    ]
    owner = np.array([0, 1, 2, 0, 1, 2, 0, 1, 2])
    shown, selected = shown_matrix(interactions)
    scores = model.score(batch, perturbed_weights(weights, steps))
    grouped, losses = grouped_gradients(scores, shown, selected, owner, 3, steps)
    for group in range(3):
        own = [i for i, o in zip(interactions, owner, strict=True) if o == group]
        alone = loss_and_gradient(model, batch, weights, own)
        np.testing.assert_allclose(grouped[group], alone.gradient)
        assert losses[group] == pytest.approx(alone.loss)


def test_no_interactions_give_zero_gradient() -> None:
    model = LinearModel()
    batch = model.encode(_pages(np.ones((2, FEATURES))), 0)
    empty = (np.zeros((0, 3), dtype=np.int64), np.zeros(0, dtype=np.int64))
    result = loss_and_gradient(model, batch, np.ones(FEATURES), empty)
    assert result.count == 0
    assert vote(result.gradient).tolist() == [0] * FEATURES


def test_epsilon_must_be_positive() -> None:
    with pytest.raises(ValueError):
        epsilons(LinearModel.spec, 0.0)


def test_relative_loss_by_hand_and_scale_free() -> None:
    scores = np.array([[4.0, 5.0, 1.0, 6.0]])
    shown = np.array([[0, 1, 2, 3]])
    selected = np.array([0])
    # (5 - 4) / 4 + 0 + (6 - 4) / 4
    assert ranking_losses(scores, shown, selected, relative=True).tolist() == [[0.75]]
    scaled = ranking_losses(10 * scores, shown, selected, relative=True)
    assert scaled.tolist() == [[0.75]]
    assert ranking_losses(10 * scores, shown, selected)[0, 0] == 10 * ranking_losses(
        scores, shown, selected
    )[0, 0]


def test_relative_loss_gradient_has_no_shrinking_component() -> None:
    """Scaling every weight of a linear model leaves the relative loss unchanged, so its
    gradient is orthogonal to the weights; the plain loss's gradient points along them."""
    rng = np.random.default_rng(5)
    model = LinearModel()
    features = rng.uniform(1.0, 50.0, size=(12, FEATURES))
    batch = model.encode(_pages(features), 0)
    weights = rng.uniform(100.0, 200.0, FEATURES)
    interactions = [
        Interaction("q", tuple(int(p) for p in rng.choice(12, 6, replace=False)), 3, 1)
        for _ in range(20)
    ]
    plain = loss_and_gradient(model, batch, weights, interactions)
    relative = loss_and_gradient(model, batch, weights, interactions, relative=True)
    assert plain.loss > 0
    # Euler: for a degree-1 homogeneous loss, gradient . w = loss.
    assert float(plain.gradient @ weights) == pytest.approx(plain.loss, rel=0.05)
    scale = float(np.linalg.norm(relative.gradient) * np.linalg.norm(weights))
    assert abs(float(relative.gradient @ weights)) < 0.05 * scale
