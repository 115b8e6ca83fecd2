"""The URL-bar user model: boundary matching, typing, chars typed, shown rows."""

from __future__ import annotations

import numpy as np
import pytest

from frecency.history import Page
from frecency.urlbar import (
    HistoryText,
    QueryBatch,
    searchable_text,
    searchable_url,
    type_queries,
    type_query,
)


def _page(url: str, title: str) -> Page:
    return Page(url=url, title=title, visit_count=1)


def test_searchable_url_drops_scheme_and_www() -> None:
    assert searchable_url("https://www.Example.com/Path") == "example.com/path"
    assert searchable_url("http://news.example.org/") == "news.example.org/"
    assert searchable_url("ftp://www.example.org/") == "ftp://www.example.org/"


def test_searchable_text_joins_url_and_title() -> None:
    page = _page("https://www.mozilla.org/firefox", "Get Firefox")
    assert searchable_text(page) == "mozilla.org/firefox get firefox"


def test_tokens_match_only_at_word_boundaries() -> None:
    text = HistoryText(["mozilla.org/firefox", "example.com/foxes", "a1b2/xfox"])
    assert text.matches("fox").tolist() == [1]
    assert text.matches("fire").tolist() == [0]
    assert text.matches("org").tolist() == [0]
    # After a digit a new word starts; mid-word never matches.
    assert text.matches("b2").tolist() == [2]
    assert text.matches("ozilla").tolist() == []


def test_matching_is_case_insensitive_and_needs_every_token() -> None:
    text = HistoryText(["mozilla.org/firefox release notes", "mozilla.org/thunderbird"])
    assert text.matches("FIRE").tolist() == [0]
    assert text.matches("moz thu").tolist() == [1]
    assert text.matches("moz fire notes").tolist() == [0]
    assert text.matches("moz fox").tolist() == []
    assert text.matches("   ").tolist() == []


def test_no_match_spans_two_pages() -> None:
    text = HistoryText(["abc", "def"])
    assert text.matches("abcdef").tolist() == []
    assert text.token_match_length("abcd").tolist() == [3, 0]


def test_plan_depth_is_longest_matching_prefix() -> None:
    text = HistoryText(["garden.com/tools", "garage.org/doors", "gate.net/garden tools"])
    plan = text.plan("garden.com/tools")
    depth = dict(zip(plan.candidates.tolist(), plan.depth.tolist(), strict=True))
    # "garage" shares "gar"; "gate" shares "ga"; page 2 has the word "garden" (6 chars).
    assert depth == {0: 16, 1: 3, 2: 6}


def test_plan_of_several_tokens() -> None:
    text = HistoryText(["alpha beta", "alpha gamma", "beta alpha"])
    plan = text.plan("alpha beta")
    depth = dict(zip(plan.candidates.tolist(), plan.depth.tolist(), strict=True))
    # Page 1 matches "alpha " (6 chars) but no word starting with "b".
    assert depth == {0: 10, 1: 6, 2: 10}
    for length in range(1, 11):
        typed = "alpha beta"[:length]
        expected = [p for p, d in depth.items() if d >= length]
        assert text.matches(typed).tolist() == expected, typed


def test_person_selects_preferred_match_once_shown() -> None:
    # 12 pages start with "a"; the preferred one ("ab...") ranks last by the model.
    urls = [f"a{chr(ord('c') + i)}.com" for i in range(11)] + ["ab.com"]
    text = HistoryText(urls)
    plan = text.plan("ab.com")
    scores = np.arange(12, 0, -1, dtype=np.float64)  # page 0 best, page 11 worst
    preference = np.where(plan.candidates == 11, 100.0, 1.0)
    interaction = type_query(plan, preference, scores, slots=10)
    # After "a" the favourite is 12th of 12 and not shown; after "ab" it is alone.
    assert interaction.chars_typed == 2
    assert interaction.prefix == "ab"
    assert interaction.shown == (11,)
    assert interaction.selected == 0


def test_person_selects_on_first_character_when_shown() -> None:
    urls = [f"a{chr(ord('c') + i)}.com" for i in range(11)] + ["ab.com"]
    text = HistoryText(urls)
    plan = text.plan("ab.com")
    scores = np.arange(12, 0, -1, dtype=np.float64)
    scores[11] = 10.5  # now third by the model
    preference = np.where(plan.candidates == 11, 100.0, 1.0)
    interaction = type_query(plan, preference, scores, slots=10)
    assert interaction.chars_typed == 1
    assert interaction.shown[:3] == (0, 1, 11)
    assert len(interaction.shown) == 10
    assert interaction.selected == 2


@pytest.mark.parametrize("slots", [1, 3, 10])
def test_slots_limit_rows(slots: int) -> None:
    urls = [f"a{chr(ord('b') + i)}.com" for i in range(12)]
    text = HistoryText(urls)
    plan = text.plan("ac.com")
    scores = np.linspace(2.0, 1.0, 12)  # page 0 best, page 1 ("ac") second
    preference = np.where(plan.candidates == 1, 100.0, 1.0)
    interaction = type_query(plan, preference, scores, slots=slots)
    if slots == 1:
        # Not shown after "a" (one row, page 0 first): typed "ac", alone.
        assert (interaction.chars_typed, interaction.shown) == (2, (1,))
    else:
        assert interaction.chars_typed == 1
        assert interaction.shown == tuple(range(slots))
        assert interaction.selected == 1


def test_when_text_runs_out_the_preferred_shown_page_is_selected() -> None:
    # Three pages match the whole text; one row only; the favourite ranks last.
    text = HistoryText(["ab one", "ab two", "ab three"])
    plan = text.plan("ab")
    scores = np.array([3.0, 2.0, 1.0])
    preference = np.array([5.0, 1.0, 9.0])[plan.candidates]
    interaction = type_query(plan, preference, scores, slots=1)
    assert interaction.chars_typed == 2
    assert interaction.shown == (0,)
    assert interaction.selected == 0


def test_batched_typing_equals_one_by_one() -> None:
    rng = np.random.default_rng(3)
    words = ["alpha", "alpine", "beta", "bet", "gamma", "gam", "delta", "dell"]
    texts = [f"{rng.choice(words)}.com/{rng.choice(words)} {rng.choice(words)}" for _ in range(40)]
    history = HistoryText(texts)
    scores = rng.normal(size=40)
    plans = history.plan_many([texts[i] for i in range(0, 40, 4)])
    preferences = [rng.normal(size=p.candidates.size) for p in plans]
    slots = rng.integers(1, 11, size=len(plans))
    batch = QueryBatch.of(plans, preferences, slots)
    together = type_queries(batch, scores[batch.page]).interactions([p.text for p in plans])
    alone = [
        type_query(p, pref, scores, int(s))
        for p, pref, s in zip(plans, preferences, slots, strict=True)
    ]
    assert together == alone
