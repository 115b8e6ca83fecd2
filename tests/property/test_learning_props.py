"""Properties of the learning signal and of the URL-bar user model (hypothesis)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from frecency.learning import ranking_losses, svm_loss, vote
from frecency.urlbar import HistoryText, QueryBatch, type_queries

scores_lists = st.lists(
    st.floats(min_value=-1e6, max_value=1e6, allow_nan=False), min_size=1, max_size=12
)


@settings(max_examples=200, deadline=None)
@given(scores_lists, st.data(), st.floats(min_value=0, max_value=100))
def test_svm_loss_is_nonnegative_and_grows_with_margin(
    scores: list[float], data: st.DataObject, margin: float
) -> None:
    selected = data.draw(st.integers(0, len(scores) - 1))
    values = np.array(scores)
    loss = svm_loss(values, selected)
    assert loss >= 0
    assert svm_loss(values, selected, margin) >= loss
    if values[selected] >= values.max():
        assert loss == 0


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 6), st.integers(1, 8), st.integers(0, 2**32 - 1))
def test_ranking_losses_equal_svm_loss_per_interaction(weights: int, rows: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    scores = rng.normal(size=(weights, 15))
    widths = rng.integers(1, 8, size=rows)
    shown = np.full((rows, 7), -1)
    selected = np.zeros(rows, dtype=np.int64)
    for r, width in enumerate(widths):
        shown[r, :width] = rng.choice(15, width, replace=False)
        selected[r] = rng.integers(0, width)
    got = ranking_losses(scores, shown, selected, 0.5)
    for r, width in enumerate(widths):
        expected = svm_loss(scores[:, shown[r, :width]], int(selected[r]), 0.5)
        np.testing.assert_allclose(got[:, r], expected)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(-1e9, 1e9, allow_nan=False), min_size=1, max_size=30))
def test_votes_are_ternary_descent_signs(gradient: list[float]) -> None:
    v = vote(np.array(gradient))
    assert set(v.tolist()) <= {-1, 0, 1}
    assert all(vi * g <= 0 for vi, g in zip(v.tolist(), gradient, strict=True))


WORDS = ["al", "alp", "alpha", "be", "beta", "bet", "ga", "gam", "x1", "pine", "pin"]
texts_strategy = st.lists(
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(
        lambda ws: ws[0] + ".com/" + "-".join(ws[1:]) + " " + " ".join(reversed(ws))
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(texts_strategy, st.integers(0, 2**32 - 1))
def test_batched_token_matching_equals_single(texts: list[str], seed: int) -> None:
    history = HistoryText(texts)
    rng = np.random.default_rng(seed)
    tokens = [str(rng.choice(WORDS)) + str(rng.choice(["", "a", ".c"])) for _ in range(5)]
    together = history.tokens_match_length(tokens)
    for row, token in enumerate(tokens):
        np.testing.assert_array_equal(together[row], history.token_match_length(token))


@settings(max_examples=60, deadline=None)
@given(texts_strategy, st.integers(0, 2**32 - 1), st.integers(1, 10))
def test_typing_shows_matches_in_model_order_and_selects_the_favourite(
    texts: list[str], seed: int, slots: int
) -> None:
    history = HistoryText(texts)
    rng = np.random.default_rng(seed)
    target = texts[int(rng.integers(0, len(texts)))]
    plan = history.plan(target.split(" ")[int(rng.integers(0, 2))])
    scores = rng.normal(size=len(texts))
    preference_of_page = rng.normal(size=len(texts))
    batch = QueryBatch.of([plan], [preference_of_page[plan.candidates]], [slots])
    outcome = type_queries(batch, scores[batch.page])
    [interaction] = outcome.interactions([plan.text])

    matching = history.matches(interaction.prefix)
    shown = list(interaction.shown)
    assert 1 <= len(shown) <= slots
    assert 1 <= interaction.chars_typed <= len(plan.text)
    assert set(shown) <= set(matching.tolist())
    # Shown: the first rows of the matches in the model's order.
    order = sorted(matching.tolist(), key=lambda p: (-scores[p], p))
    assert shown == order[: len(shown)]
    assert len(shown) == min(slots, matching.size)
    # Selected: the favourite among the rows shown ...
    favourite = max(shown, key=lambda p: preference_of_page[p])
    assert shown[interaction.selected] == favourite
    # ... and, when found, the favourite of every match; typing one character less
    # would not have shown it.
    if outcome.found[0]:
        assert favourite == max(matching.tolist(), key=lambda p: preference_of_page[p])
        if interaction.chars_typed > 1:
            shorter = history.matches(plan.text[: interaction.chars_typed - 1]).tolist()
            best_then = max(shorter, key=lambda p: preference_of_page[p])
            rank_then = sorted(shorter, key=lambda p: (-scores[p], p)).index(best_then)
            assert rank_then >= slots
