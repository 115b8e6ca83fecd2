"""Where a participant's interactions come from (participant/history.py) and what it
votes (participant/signal.py): the synthetic person's determinism, a real profile's
input history (tests/fixtures/places/places.sqlite)."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from frecency.learning import loss_and_gradient, vote
from frecency.places import read_places
from frecency.registry import get_model
from frecency.urlbar import MAX_RICH_RESULTS, HistoryText
from participant.history import (
    PlacesSource,
    SyntheticHistory,
    SyntheticPerson,
    places_interactions,
    synthetic_interactions,
)
from participant.signal import compute_contribution

MODEL = get_model("firefox-2018")
DEFAULTS = MODEL.spec.defaults()
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "places" / "places.sqlite"
BASE = "http://127.0.0.1:38517/"


def test_synthetic_person_is_a_function_of_seed_and_id() -> None:
    a, b = SyntheticPerson(5, "alice-0", MODEL), SyntheticPerson(5, "alice-0", MODEL)
    assert a.pages == b.pages
    for r in range(4):
        assert a.interactions(r, DEFAULTS) == b.interactions(r, DEFAULTS)
    other = SyntheticPerson(5, "alice-1", MODEL)
    assert other.pages != a.pages
    assert SyntheticPerson(6, "alice-0", MODEL).pages != a.pages


def test_rounds_draw_different_interactions() -> None:
    person = SyntheticPerson(5, "alice-0", MODEL, per_round=3)
    rounds = [person.interactions(r, DEFAULTS) for r in range(6)]
    assert all(len(r) == 3 for r in rounds)
    assert len({r for r in rounds}) > 1


def test_default_rate_is_at_least_one_interaction() -> None:
    person = SyntheticPerson(5, "alice-0", MODEL)
    counts = [len(person.interactions(r, DEFAULTS)) for r in range(20)]
    assert min(counts) >= 1 and max(counts) > 1


def test_what_is_shown_depends_on_the_model() -> None:
    person = SyntheticPerson(3, "w-0", MODEL, per_round=4)
    changed = DEFAULTS.copy()
    changed[MODEL.spec.index("typedVisitBonus")] = 0
    changed[MODEL.spec.index("linkVisitBonus")] = 5000
    under_defaults = [person.interactions(r, DEFAULTS) for r in range(5)]
    under_changed = [person.interactions(r, changed) for r in range(5)]
    assert under_defaults != under_changed
    # the same choices of query, only the ranking differs
    assert [[i.prefix[:1] for i in r] for r in under_defaults] == [
        [i.prefix[:1] for i in r] for r in under_changed
    ]


def test_synthetic_history_accumulates_until_contributed() -> None:
    history = SyntheticHistory(SyntheticPerson(5, "h-0", MODEL, per_round=2))
    assert not history.has_new()
    history.observe(1, DEFAULTS)
    history.observe(1, DEFAULTS)  # the same round again: browsed once
    history.observe(2, DEFAULTS)
    pending = history.pending(DEFAULTS)
    assert len(pending.interactions) == 4
    replay = synthetic_interactions(5, "h-0", MODEL, [(1, DEFAULTS), (2, DEFAULTS)], 2)
    assert pending.interactions == replay.interactions
    history.mark_contributed()
    assert not history.has_new()
    history.observe(3, DEFAULTS)
    assert len(history.pending(DEFAULTS).interactions) == 2


def test_contribution_is_the_sign_of_the_descent_direction() -> None:
    pending = synthetic_interactions(5, "c-0", MODEL, [(1, DEFAULTS), (2, DEFAULTS)], 3)
    contribution = compute_contribution(MODEL, pending, DEFAULTS)
    expected = loss_and_gradient(
        MODEL, pending.batch, DEFAULTS, list(pending.interactions), relative=True
    )
    assert np.array_equal(contribution.vote, vote(expected.gradient))
    assert set(contribution.vote.tolist()) <= {-1, 0, 1}
    metrics = contribution.metrics
    assert metrics.interactions == 6
    assert metrics.loss == pytest.approx(expected.loss)
    assert metrics.chars_typed == sum(i.chars_typed for i in pending.interactions)
    assert metrics.rank_selected == sum(i.selected for i in pending.interactions)
    assert metrics.suggestions_displayed == sum(len(i.shown) for i in pending.interactions)


def test_contribution_with_the_shipped_loss() -> None:
    pending = synthetic_interactions(5, "c-1", MODEL, [(1, DEFAULTS)], 4)
    plain = compute_contribution(MODEL, pending, DEFAULTS, loss="svm")
    expected = loss_and_gradient(MODEL, pending.batch, DEFAULTS, list(pending.interactions))
    assert np.array_equal(plain.vote, vote(expected.gradient))
    assert plain.metrics.loss == pytest.approx(expected.loss)
    relative = compute_contribution(MODEL, pending, DEFAULTS)
    assert relative.metrics.loss != pytest.approx(plain.metrics.loss)


# --- a real profile ---------------------------------------------------------------------


def test_places_input_history_becomes_interactions() -> None:
    places = read_places(FIXTURE)
    now = places.newest_visit_us or 0
    pending = places_interactions(places, MODEL, DEFAULTS, now)
    by_prefix = {i.prefix: i for i in pending.interactions}
    assert set(by_prefix) == {"dash", "man", "n"}
    visible = [p for p in places.pages if p.url not in places.hidden_urls]
    visible = [p for p in visible if not p.url.startswith("place:")]
    scores = MODEL.score(pending.batch, DEFAULTS[np.newaxis, :])[0]
    for prefix, picked in (
        ("dash", "dashboard.html"),
        ("man", "docs/manual.html"),
        ("n", "news.html"),
    ):
        interaction = by_prefix[prefix]
        assert interaction.chars_typed == len(prefix)
        assert visible[interaction.shown[interaction.selected]].url == BASE + picked
        assert len(interaction.shown) <= MAX_RICH_RESULTS
        shown_scores = [scores[i] for i in interaction.shown]
        assert shown_scores == sorted(shown_scores, reverse=True) or (
            interaction.selected == len(interaction.shown) - 1
        )
    # "n" matches many pages at a word boundary: all of them (up to 10) are shown
    text = HistoryText.of_pages(visible)
    assert len(by_prefix["n"].shown) == min(MAX_RICH_RESULTS, len(text.matches("n")))
    assert len(by_prefix["n"].shown) > 1


def test_places_source_offers_each_use_once(tmp_path: Path) -> None:
    copy = tmp_path / "places.sqlite"
    shutil.copy(FIXTURE, copy)
    source = PlacesSource(copy, MODEL)
    assert source.has_new()
    assert len(source.pending(DEFAULTS).interactions) == 3
    source.mark_contributed()
    assert not source.has_new()
    contributed = source.contributed
    assert contributed[("dash", BASE + "dashboard.html")] == pytest.approx(1.9)
    # a restart with the persisted counts has nothing new either
    assert not PlacesSource(copy, MODEL, contributed).has_new()
    # the person uses "man" again: only that row is new, once the file is re-read
    with sqlite3.connect(copy) as connection:
        connection.execute(
            "UPDATE moz_inputhistory SET use_count = use_count + 1 WHERE input = 'man'"
        )
    connection.close()
    source.observe(2, DEFAULTS)
    assert source.has_new()
    assert [i.prefix for i in source.pending(DEFAULTS).interactions] == ["man"]


def test_places_contribution_votes() -> None:
    source = PlacesSource(FIXTURE, MODEL)
    contribution = compute_contribution(MODEL, source.pending(DEFAULTS), DEFAULTS)
    assert contribution.metrics.interactions == 3
    assert contribution.metrics.chars_typed == len("dash") + len("man") + len("n")
    assert contribution.vote.shape == (MODEL.spec.dimension,)
