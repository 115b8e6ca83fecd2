"""firefox-2018 against Firefox's calculate_frecency (SQLFunctions.cpp, Firefox 60-68),
with expected values worked out by hand from that formula (docs/frecency.md)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frecency.firefox2018 import SPEC, Firefox2018Model
from frecency.history import Page, Transition, Visit
from frecency.registry import get_model

SECOND = 1_000_000
DAY = 86_400 * SECOND
NOW = 1_700_000_000 * SECOND
MODEL = Firefox2018Model()
DEFAULTS = SPEC.defaults()


def ago(days: int, seconds: int = 0) -> int:
    return NOW - days * DAY - seconds * SECOND


def page(
    *visits: Visit,
    visit_count: int | None = None,
    bookmarked: bool = False,
    typed: bool = False,
    url: str = "https://example.com/",
) -> Page:
    count = len(visits) if visit_count is None else visit_count
    return Page(url, "", count, tuple(visits), bookmarked=bookmarked, typed=typed)


def frecency(pages: list[Page], weights: np.ndarray = DEFAULTS) -> list[int]:
    return [int(v) for v in MODEL.frecency(MODEL.encode(pages, NOW), weights)]


def score(pages: list[Page], weights: np.ndarray = DEFAULTS) -> list[float]:
    return [float(v) for v in MODEL.score(MODEL.encode(pages, NOW), weights)[0]]


def with_weights(**changes: float) -> np.ndarray:
    weights = DEFAULTS.copy()
    for name, value in changes.items():
        weights[SPEC.index(name)] = value
    return weights


def test_spec_is_the_22_prefs_of_design_section_2_in_order() -> None:
    assert SPEC.names[:4] == (
        "firstBucketCutoff",
        "secondBucketCutoff",
        "thirdBucketCutoff",
        "fourthBucketCutoff",
    )
    assert SPEC.names[-1] == "reloadVisitBonus"
    assert SPEC.dimension == 22
    assert SPEC.params[12].pref == "places.frecency.typedVisitBonus"
    assert list(SPEC.defaults()[:14]) == [4, 14, 31, 90, 100, 70, 50, 30, 10, 0, 0, 100, 2000, 75]
    assert list(SPEC.defaults()[14:]) == [0, 0, 0, 25, 0, 140, 200, 0]
    assert SPEC.increasing == ((0, 1, 2, 3),)
    assert SPEC.non_increasing == ((4, 5, 6, 7, 8),)
    assert SPEC.lower_bounds()[0] == 1 and SPEC.lower_bounds()[1:].max() == 0
    assert SPEC.integer_mask().all()
    assert get_model("firefox-2018").spec is SPEC


# Distinct bonuses so each transition shows which pref it reads; one visit a day old is
# in the first bucket (100), so frecency = ceil(1 * ceil(100 * bonus / 100) / 1) = bonus.
DISTINCT_BONUSES = with_weights(
    embedVisitBonus=11,
    framedLinkVisitBonus=13,
    downloadVisitBonus=17,
    permRedirectVisitBonus=19,
    tempRedirectVisitBonus=23,
    defaultVisitBonus=29,
    reloadVisitBonus=31,
)


@pytest.mark.parametrize(
    ("transition", "bonus"),
    [
        (Transition.LINK, 100),
        (Transition.TYPED, 2000),
        (Transition.BOOKMARK, 75),
        (Transition.EMBED, 11),
        (Transition.REDIRECT_PERMANENT, 19),
        (Transition.REDIRECT_TEMPORARY, 23),
        (Transition.DOWNLOAD, 17),
        (Transition.FRAMED_LINK, 13),
        (Transition.RELOAD, 31),
    ],
)
def test_each_visit_type_earns_its_bonus(transition: Transition, bonus: int) -> None:
    assert frecency([page(Visit(ago(1), transition))], DISTINCT_BONUSES) == [bonus]


def test_zero_bonus_visits_store_minus_one() -> None:
    # Defaults give embed, download, redirects, framed links and reloads 0 points:
    # Firefox stores -1 for a visited page with no points.
    pages = [page(Visit(ago(1), t)) for t in (Transition.EMBED, Transition.DOWNLOAD)]
    assert frecency(pages) == [-1, -1]
    assert score(pages) == [-1.0, -1.0]


@pytest.mark.parametrize(
    ("days", "seconds", "bucket_weight"),
    [
        (0, 0, 100),
        (4, 0, 100),  # age 4 <= firstBucketCutoff 4
        (4, 86_399, 100),  # (now - visit) / 86400 truncates to 4
        (5, 0, 70),
        (14, 0, 70),
        (15, 0, 50),
        (31, 0, 50),
        (32, 0, 30),
        (90, 0, 30),
        (91, 0, 10),
        (400, 0, 10),
    ],
)
def test_buckets_and_their_boundaries(days: int, seconds: int, bucket_weight: int) -> None:
    # A link visit: bucket_weight * 100 / 100.
    assert frecency([page(Visit(ago(days, seconds), Transition.LINK))]) == [bucket_weight]


def test_cutoffs_are_read_from_the_weights() -> None:
    visit = page(Visit(ago(6), Transition.LINK))
    # firstBucketCutoff 6 puts age 6 in the first bucket (100), 5 in the second (70).
    assert frecency([visit], with_weights(firstBucketCutoff=6)) == [100]
    assert frecency([visit], with_weights(firstBucketCutoff=5)) == [70]


def test_only_the_ten_newest_visits_are_sampled() -> None:
    newest = [Visit(ago(1, i), Transition.LINK) for i in range(10)]
    oldest = [Visit(ago(100), Transition.TYPED), Visit(ago(120), Transition.TYPED)]
    shuffled = (oldest[0], *newest[:5], oldest[1], *newest[5:])
    # points = 10 * 100 = 1000 (the typed visits are not sampled);
    # ceil(12 * 1000 / 10) = 1200.  Sampling all 12 would give 12 * 1400 / 12 = 1400.
    assert frecency([page(*shuffled)]) == [1200]


def test_visit_count_scales_the_sampled_points() -> None:
    visits = [Visit(ago(1), Transition.LINK) for _ in range(3)]
    # ceil(30 * 300 / 3) = 3000
    assert frecency([page(*visits, visit_count=30)]) == [3000]


def test_bookmarked_page_adds_the_bookmark_bonus_to_every_visit() -> None:
    bookmarked = page(Visit(ago(1), Transition.LINK), Visit(ago(100), Transition.LINK))
    bookmarked = page(*bookmarked.visits, visit_count=3, bookmarked=True)
    # points = 100 * 175/100 + 10 * 175/100 = 175 + 17.5 = 192.5; ceil -> 193;
    # ceil(3 * 193 / 2) = ceil(289.5) = 290.  Before ceiling: 3 * 192.5 / 2 = 288.75
    assert frecency([bookmarked]) == [290]
    assert score([bookmarked]) == [290 + 0.5 * 288.75 / (288.75 + 290)]


def test_points_are_ceiled_before_scaling() -> None:
    visit = page(Visit(ago(20), Transition.LINK), bookmarked=True)
    # 50 * 175 / 100 = 87.5 -> ceil 88; the score breaks ties with 87.5
    assert frecency([visit]) == [88]
    assert score([visit]) == [88 + 0.5 * 87.5 / (87.5 + 88)]


def test_redirect_source_earns_the_redirect_source_bonus() -> None:
    link = page(Visit(ago(1), Transition.LINK, redirect_source=True))
    typed = page(Visit(ago(1), Transition.TYPED, redirect_source=True))
    marked = page(Visit(ago(1), Transition.LINK, redirect_source=True), bookmarked=True)
    # 100 * 25/100 = 25; typed counts as permanently redirected: 25;
    # bookmarked: 100 * (25 + 75)/100 = 100
    assert frecency([link, typed, marked]) == [25, 25, 100]
    assert frecency([link], with_weights(redirectSourceVisitBonus=40)) == [40]


def test_redirect_target_counts_as_its_source_transition() -> None:
    typed_source = page(
        Visit(ago(1), Transition.REDIRECT_TEMPORARY, redirect_from=Transition.TYPED)
    )
    unknown_source = page(Visit(ago(1), Transition.REDIRECT_TEMPORARY))
    # typed bonus 2000 * 100 / 100; with no source the temporary redirect bonus, 0 -> -1
    assert frecency([typed_source, unknown_source]) == [2000, -1]


def test_unvisited_pages() -> None:
    bookmark = page(bookmarked=True)
    bookmark_typed = page(bookmarked=True, typed=True)
    typed_only = page(typed=True)
    query = page(bookmarked=True, url="place:parent=toolbar_____")
    nothing = page()
    downloads_only = page(Visit(ago(1), Transition.DOWNLOAD), visit_count=0, bookmarked=True)
    pages = [bookmark, bookmark_typed, typed_only, query, nothing, downloads_only]
    # firstBucketWeight * (140 [+ 200]) / 100; typed alone, place: and nothing give 0;
    # visit_count 0 samples no visit, so the download-only bookmark is unvisited: 140.
    assert frecency(pages) == [140, 340, 0, 0, 0, 140]
    # stored + 0.5 * x / (x + stored), x = stored here
    assert score(pages) == [140.25, 340.25, 0.0, 0.0, 0.0, 140.25]


def test_unvisited_bookmark_in_float32() -> None:
    weights = with_weights(firstBucketWeight=70, unvisitedBookmarkBonus=33)
    # 70 * (33 / 100.0f) = 23.1 (float) -> ceilf 24
    assert frecency([page(bookmarked=True)], weights) == [24]
    assert score([page(bookmarked=True)], weights) == pytest.approx(
        [24 + 0.5 * 23.1 / (23.1 + 24)], abs=1e-6
    )


def test_a_step_of_one_in_any_weight_is_visible_in_the_score() -> None:
    typed = page(Visit(ago(1), Transition.TYPED))
    assert score([typed], with_weights(typedVisitBonus=2001)) == [2001.25]
    aged = page(Visit(ago(5), Transition.LINK))
    assert score([aged], with_weights(firstBucketCutoff=5)) == [100.25]


def test_a_step_the_ceiling_hides_still_changes_the_score() -> None:
    visit = page(Visit(ago(20), Transition.LINK), bookmarked=True)
    # bookmarkVisitBonus 75 -> 76: points 87.5 -> 50 * 1.76 = 88, both stored as 88
    weights = np.stack([DEFAULTS, with_weights(bookmarkVisitBonus=76)])
    stored = MODEL.frecency(MODEL.encode([visit], NOW), weights[1])
    assert list(stored) == [88]
    before, after = MODEL.score(MODEL.encode([visit], NOW), weights)[:, 0]
    assert before == 88 + 0.5 * 87.5 / (87.5 + 88)
    assert after == 88 + 0.5 * 88 / (88 + 88)


def test_weights_of_wrong_shape_are_refused() -> None:
    batch = MODEL.encode([page()], NOW)
    with pytest.raises(ValueError, match="shape"):
        MODEL.score(batch, np.zeros((2, 21)))
    with pytest.raises(ValueError, match="shape"):
        MODEL.frecency(batch, np.zeros((1, 22)))


TRANSITIONS = st.sampled_from(list(Transition))
VISITS = st.builds(
    Visit,
    time_us=st.integers(NOW - 200 * DAY, NOW),
    transition=TRANSITIONS,
    redirect_source=st.booleans(),
)
PAGES = st.builds(
    lambda visits, extra, bookmarked, typed: page(
        *visits, visit_count=len(visits) + extra, bookmarked=bookmarked, typed=typed
    ),
    st.lists(VISITS, max_size=14),
    st.integers(0, 5),
    st.booleans(),
    st.booleans(),
)
PERTURBATIONS = st.lists(st.integers(-1, 1), min_size=22, max_size=22)


@settings(max_examples=40, deadline=None)
@given(st.lists(PAGES, min_size=1, max_size=8), st.lists(PERTURBATIONS, min_size=1, max_size=6))
def test_stacked_weights_score_as_separate_calls(
    pages: list[Page], perturbations: list[list[int]]
) -> None:
    weights = DEFAULTS + np.array(perturbations, dtype=np.float64)
    batch = MODEL.encode(pages, NOW)
    stacked = MODEL.score(batch, weights)
    assert stacked.shape == (len(perturbations), len(pages))
    for row, vector in enumerate(weights):
        assert np.array_equal(stacked[row], MODEL.score(batch, vector[np.newaxis, :])[0])
    order = np.array([2 * i % len(pages) for i in range(len(pages))])
    assert np.array_equal(MODEL.score(batch.take(order), weights), stacked[:, order])


@settings(max_examples=40, deadline=None)
@given(st.lists(PAGES, min_size=2, max_size=10), PERTURBATIONS)
def test_score_and_frecency_agree_in_order(pages: list[Page], perturbation: list[int]) -> None:
    weights = DEFAULTS + np.array(perturbation, dtype=np.float64)
    batch = MODEL.encode(pages, NOW)
    real = MODEL.score(batch, weights)[0]
    stored = MODEL.frecency(batch, weights)
    for i in range(len(pages)):
        for j in range(len(pages)):
            if real[i] < real[j]:
                assert stored[i] <= stored[j]
