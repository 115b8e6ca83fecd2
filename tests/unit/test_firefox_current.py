"""firefox-current against the SQL of Firefox 153's calculate_frecency, with expected values
worked out by hand (docs/frecency.md).

With lambda = ln 2 / 30, ln(s) / lambda = 30 * log2(s): 30 * log2(20) = 129.66,
30 * log2(50) = 169.32, 30 * log2(100) = 199.32, 30 * log2(200) = 229.32,
30 * log2(75) = 186.86, 30 * log2(150) = 216.86, 30 * log2(500) = 268.97,
30 * log2(600) = 276.86.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frecency.firefox_current import SPEC, FirefoxCurrentModel
from frecency.history import Page, PageView, Transition, Visit, VisitSource
from frecency.registry import get_model

SECOND = 1_000_000
DAY = 86_400 * SECOND
TODAY = 20_000
NOW = TODAY * DAY + 18 * 3600 * SECOND
MODEL = FirefoxCurrentModel()
DEFAULTS = SPEC.defaults()

LOW, MEDIUM, HIGH, VERY_HIGH = TODAY + 129, TODAY + 169, TODAY + 199, TODAY + 229


def on(day: int, seconds: int = 12 * 3600) -> int:
    return day * DAY + seconds * SECOND


def visit(
    transition: Transition = Transition.LINK,
    day: int = TODAY,
    seconds: int = 12 * 3600,
    source: VisitSource = VisitSource.ORGANIC,
    redirect_source: bool = False,
    redirect_from: Transition | None = None,
) -> Visit:
    return Visit(on(day, seconds), transition, source, redirect_source, redirect_from)


def page(
    *visits: Visit,
    visit_count: int | None = None,
    bookmarked: bool = False,
    bookmark_added_us: int | None = None,
    views: tuple[PageView, ...] = (),
    url: str = "https://example.com/",
) -> Page:
    count = (
        sum(v.transition not in (7, 8, 9) for v in visits) if visit_count is None else visit_count
    )
    return Page(url, "", count, tuple(visits), bookmarked, bookmark_added_us, False, views)


def frecency(pages: list[Page], weights: np.ndarray = DEFAULTS, now: int = NOW) -> list[int]:
    return [int(v) for v in MODEL.frecency(MODEL.encode(pages, now), weights)]


def with_weights(**changes: float) -> np.ndarray:
    weights = DEFAULTS.copy()
    for name, value in changes.items():
        weights[SPEC.index(name)] = value
    return weights


def test_spec_trains_half_life_and_the_four_kind_weights() -> None:
    assert SPEC.names == (
        "halfLifeDays",
        "veryHighWeight",
        "highWeight",
        "mediumWeight",
        "lowWeight",
    )
    assert list(SPEC.defaults()) == [30, 200, 100, 50, 20]
    assert SPEC.params[0].pref == "places.frecency.pages.halfLifeDays"
    assert not SPEC.params[0].integer and SPEC.integer_mask()[1:].all()
    assert SPEC.non_increasing == ((1, 2, 3, 4),)
    assert list(SPEC.lower_bounds()) == [1, 1, 1, 1, 1]
    assert get_model("firefox-current").spec is SPEC


@pytest.mark.parametrize(
    ("sample", "expected"),
    [
        (visit(Transition.LINK), MEDIUM),
        (visit(Transition.TYPED), HIGH),
        (visit(Transition.BOOKMARK), HIGH),
        (visit(Transition.LINK, source=VisitSource.BOOKMARKED), HIGH),
        (visit(Transition.TYPED, source=VisitSource.SEARCHED), MEDIUM),
        (visit(Transition.TYPED, source=VisitSource.SPONSORED), LOW),
        (visit(Transition.LINK, source=VisitSource.SPONSORED), LOW),
        (visit(Transition.LINK, source=VisitSource.SEARCHED), MEDIUM),
        (visit(Transition.EMBED), LOW),
        (visit(Transition.REDIRECT_PERMANENT), MEDIUM),
        (visit(Transition.LINK, redirect_source=True), LOW),
        (visit(Transition.TYPED, redirect_source=True), LOW),
        (visit(Transition.BOOKMARK, redirect_source=True), HIGH),
        (visit(Transition.REDIRECT_TEMPORARY, redirect_from=Transition.TYPED), HIGH),
        (visit(Transition.REDIRECT_PERMANENT, redirect_from=Transition.FRAMED_LINK), LOW),
    ],
)
def test_kind_of_one_visit_today(sample: Visit, expected: int) -> None:
    # One sample, visit_count 1: ref day + trunc(30 * log2(weight))
    assert frecency([page(sample, visit_count=1)]) == [expected]


def test_downloads_framed_links_and_reloads_are_not_samples() -> None:
    only_excluded = page(
        visit(Transition.DOWNLOAD), visit(Transition.FRAMED_LINK), visit(Transition.RELOAD)
    )
    newer_download = page(
        *(visit(Transition.LINK, seconds=i) for i in range(10)),
        visit(Transition.DOWNLOAD, day=TODAY + 1),
    )
    # No sample and no bookmark: 0.  Ten links today (the newer download is skipped):
    # 10 * 50 / 10 * max(10, 10) = 500 -> TODAY + trunc(268.97)
    assert frecency([only_excluded, newer_download]) == [0, TODAY + 268]


def test_decay_by_half_life() -> None:
    two = page(visit(day=TODAY), visit(day=TODAY - 30))
    # (50 + 50 * 2^(-30/30)) / 2 * 2 = 75 -> TODAY + trunc(186.86)
    assert frecency([two]) == [TODAY + 186]
    # halfLifeDays 15: (50 + 50 / 4) = 62.5 -> 15 * log2(62.5) = 89.49
    assert frecency([two], with_weights(halfLifeDays=15)) == [TODAY + 89]


def test_the_newest_sample_is_the_reference_day() -> None:
    old = page(visit(day=TODAY - 400))
    # 50 on day TODAY - 400: TODAY - 400 + 169, whatever the day of computation
    assert frecency([old]) == [TODAY - 400 + 169]
    assert frecency([old], now=NOW + 1000 * DAY) == [TODAY - 400 + 169]


def test_visit_count_scales_the_mean_sample() -> None:
    # 50 / 1 * max(4, 1) = 200 -> TODAY + trunc(229.32)
    assert frecency([page(visit(), visit_count=4)]) == [TODAY + 229]


def test_only_the_ten_newest_samples_count() -> None:
    visits = [visit(seconds=i) for i in range(10)] + [visit(Transition.TYPED, day=TODAY - 5)] * 2
    # 10 links today: 500 / 10 * max(12, 10) = 600 -> TODAY + trunc(276.86);
    # sampling the typed visits too would give (500 + 2 * 100 * 2^(-5/30)) / 12 * 12 = 678
    assert frecency([page(*visits)]) == [TODAY + 276]


@pytest.mark.parametrize(
    ("view_ms", "keys", "offset_s", "expected"),
    [
        (60_000, 0, 60, HIGH),  # viewTimeSeconds 60: interesting, medium -> high
        (59_999, 0, 60, MEDIUM),
        (20_000, 50, 60, HIGH),  # 20 s with manyKeypresses 50
        (19_999, 50, 60, MEDIUM),
        (20_000, 49, 60, MEDIUM),
        (60_000, 0, -120, HIGH),  # maxVisitGapSeconds 120, inclusive
        (60_000, 0, 120, HIGH),
    ],
)
def test_interesting_views_raise_the_kind(
    view_ms: int, keys: int, offset_s: int, expected: int
) -> None:
    view = PageView(on(TODAY) + offset_s * SECOND, view_ms, keys)
    assert frecency([page(visit(), views=(view,))]) == [expected]


def test_interesting_typed_visit_is_very_high_and_low_stays_low() -> None:
    view = (PageView(on(TODAY), 90_000, 0),)
    typed = page(visit(Transition.TYPED), views=view)
    sponsored = page(visit(source=VisitSource.SPONSORED), views=view)
    assert frecency([typed, sponsored]) == [VERY_HIGH, LOW]


def test_views_far_from_visits_are_virtual_visits() -> None:
    far = page(visit(), views=(PageView(on(TODAY) + 121 * SECOND, 60_000, 0),))
    # the view is 121 s after the visit: the visit stays medium (50) and the view becomes
    # an interesting link sample (100): (50 + 100) / 2 * max(1, 2) = 150 -> + 216.86
    assert frecency([far]) == [TODAY + 216]
    only_view = page(views=(PageView(on(TODAY), 60_000, 0),))
    # one virtual sample of 100, visit_count 0: 100 / 1 * max(0, 1) -> + 199.32
    assert frecency([only_view]) == [HIGH]
    next_day = page(visit(), views=(PageView(on(TODAY + 1), 60_000, 0),))
    # ref TODAY + 1: (100 + 50 * 2^(-1/30)) / 2 * 2 = 148.86 -> 30 * log2(148.86) = 216.53
    assert frecency([next_day]) == [TODAY + 1 + 216]


def test_a_view_near_a_download_is_not_a_virtual_visit() -> None:
    near_download = page(visit(Transition.DOWNLOAD), views=(PageView(on(TODAY), 60_000, 0),))
    # the download is no sample, and it keeps the view from becoming one: 0
    assert frecency([near_download]) == [0]


def test_bookmark_only_page_is_one_high_sample_on_the_day_it_was_added() -> None:
    added = on(TODAY - 45, 3600)
    bookmark = page(bookmarked=True, bookmark_added_us=added)
    # 100 on day TODAY - 45: TODAY - 45 + trunc(199.32)
    assert frecency([bookmark]) == [TODAY - 45 + 199]
    # with visits the bookmark adds nothing: one link today
    assert frecency([page(visit(), bookmarked=True, bookmark_added_us=added)]) == [MEDIUM]
    # highWeight 120 is what the bookmark sample weighs: 30 * log2(120) = 207.21
    assert frecency([bookmark], with_weights(highWeight=120)) == [TODAY - 45 + 207]


def test_place_urls_and_empty_pages_store_zero() -> None:
    query = page(visit(), url="place:sort=8&maxResults=10")
    assert frecency([query, page()]) == [0, 0]
    assert list(MODEL.score(MODEL.encode([query, page()], NOW), DEFAULTS)[0]) == [0.0, 0.0]


def test_score_is_the_untruncated_stored_day() -> None:
    two = page(visit(day=TODAY), visit(day=TODAY - 30))
    real = MODEL.score(MODEL.encode([two], NOW), np.stack([DEFAULTS, with_weights(lowWeight=21)]))
    # 75 -> TODAY + 30 * log2(75); lowWeight does not touch two medium samples
    assert real[0, 0] == pytest.approx(TODAY + 30 * math.log2(75), abs=1e-9)
    assert real[1, 0] == real[0, 0]
    steps = np.stack([with_weights(halfLifeDays=31), with_weights(mediumWeight=51)])
    moved = MODEL.score(MODEL.encode([two], NOW), steps)[:, 0]
    # 31 * log2(50 + 50 * 2^(-30/31)) and 30 * log2(51 * 1.5): both visible
    assert moved[0] == pytest.approx(TODAY + 31 * math.log2(50 + 50 * 2 ** (-30 / 31)), abs=1e-9)
    assert moved[1] == pytest.approx(TODAY + 30 * math.log2(76.5), abs=1e-9)


def test_frecency_reads_integer_prefs() -> None:
    two = page(visit(day=TODAY), visit(day=TODAY - 30))
    assert frecency([two], with_weights(halfLifeDays=30.4)) == [TODAY + 186]


KINDS = st.sampled_from(list(Transition))
SOURCES = st.sampled_from(list(VisitSource))
VISITS = st.builds(
    visit,
    KINDS,
    day=st.integers(TODAY - 120, TODAY),
    seconds=st.integers(0, 86_399),
    source=SOURCES,
    redirect_source=st.booleans(),
)
VIEWS = st.builds(
    PageView,
    time_us=st.integers(on(TODAY - 120), on(TODAY)),
    view_time_ms=st.sampled_from([5_000, 25_000, 70_000]),
    key_presses=st.sampled_from([0, 60]),
)
PAGES = st.builds(
    lambda visits, views, extra, bookmarked: page(
        *visits,
        visit_count=len(visits) + extra,
        views=tuple(views),
        bookmarked=bookmarked,
        bookmark_added_us=on(TODAY - 10),
    ),
    st.lists(VISITS, max_size=13),
    st.lists(VIEWS, max_size=3),
    st.integers(0, 4),
    st.booleans(),
)
VECTORS = st.lists(
    st.tuples(st.integers(10, 60), st.lists(st.integers(-1, 1), min_size=4, max_size=4)),
    min_size=1,
    max_size=5,
)


@settings(max_examples=40, deadline=None)
@given(st.lists(PAGES, min_size=1, max_size=8), VECTORS)
def test_stacked_weights_score_as_separate_calls(
    pages: list[Page], vectors: list[tuple[int, list[int]]]
) -> None:
    weights = np.array([[hl, 200 + a, 100 + b, 50 + c, 20 + d] for hl, (a, b, c, d) in vectors])
    batch = MODEL.encode(pages, NOW)
    stacked = MODEL.score(batch, weights)
    assert stacked.shape == (len(vectors), len(pages))
    for row, vector in enumerate(weights):
        assert np.array_equal(stacked[row], MODEL.score(batch, vector)[0])
    order = np.array([3 * i % len(pages) for i in range(len(pages))])
    assert np.array_equal(MODEL.score(batch.take(order), weights), stacked[:, order])


@settings(max_examples=40, deadline=None)
@given(st.lists(PAGES, min_size=2, max_size=10), VECTORS)
def test_score_and_frecency_agree_in_order(
    pages: list[Page], vectors: list[tuple[int, list[int]]]
) -> None:
    half_life, (a, b, c, d) = vectors[0]
    weights = np.array([half_life, 200 + a, 100 + b, 50 + c, 20 + d], dtype=np.float64)
    batch = MODEL.encode(pages, NOW)
    real = MODEL.score(batch, weights)[0]
    stored = MODEL.frecency(batch, weights)
    for i in range(len(pages)):
        for j in range(len(pages)):
            if real[i] < real[j] - 1e-9:
                assert stored[i] <= stored[j]


def test_a_half_life_stepped_to_zero_or_below_stays_finite() -> None:
    two = page(visit(day=TODAY), visit(day=TODAY - 30))
    batch = MODEL.encode([two], NOW)
    real = MODEL.score(
        batch, np.stack([with_weights(halfLifeDays=0), with_weights(halfLifeDays=-1)])
    )
    # taken as 1e-9 days: only today's sample counts, 50 / 2 * 2 = 50, and
    # 1e-9 * log2(50) days past the reference day
    assert real[:, 0] == pytest.approx([TODAY, TODAY], abs=1e-6)
    # Firefox's ln(2) / 0 is NULL in SQLite: the page stores 0
    assert frecency([two], with_weights(halfLifeDays=0)) == [0]
