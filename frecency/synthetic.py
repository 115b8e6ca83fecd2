"""The synthetic population of the paper's simulation (section 5.1, "Simulations"; the
2018 notebook's mock dataset in reference/mozilla-2018-study.md), as real histories.

Each person has a history of pages on a handful of sites. A page is drawn as in the
notebook: a visit type (link 0.6 / typed 0.2 / bookmarked 0.2) and a recency bucket
(0.15 / 0.15 / 0.15 / 0.2 / 0.35 for visits within 4, 14, 31, 90, 365 days, the
firefox-2018 default buckets), independent of each other and of its visit count
(exponential, mean 7 = the paper's lambda, at least 1). Its newest ``min(count, 10)``
visits all have that type and ages inside that bucket, so the notebook's one-hot
(type x recency) feature is exactly what Firefox sees. Addresses and titles are built from
fixed word lists (:mod:`frecency.words`) so that typing a prefix narrows the matches.

The person's **true preference** for a page, unseen by the learner, is
``--preference paper``: the paper's simplified frecency (section 3), visit count x the mean
over sampled visits of type points {1.2, 2, 1.4} x recency points {100, 70, 50, 30, 10};
or ``--preference firefox``: the trained model's own score at its default weights. Each
query adds fresh N(0, sigma^2 = 30) noise to it (the paper's noise), and the person selects
as :mod:`frecency.urlbar` describes.

A person's queries come from a fixed catalogue of ``queries_per_person`` texts: the
address (without scheme/www) or title of pages drawn in proportion to their true
preference (people type towards pages they like). How many rows history gets in the
dropdown is drawn per query as N(10, 4), at least 1 and at most ``maxRichResults`` (10):
the notebook's "suggestions per query ~ N(10, 4)", capped by what Firefox can show.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from frecency.history import MICROSECONDS_PER_DAY, Page, Transition, Visit, VisitSource
from frecency.model import FrecencyModel, PageBatch
from frecency.urlbar import (
    MAX_RICH_RESULTS,
    HistoryText,
    QueryBatch,
    QueryPlan,
    searchable_url,
)
from frecency.words import PAGE_WORDS, SITE_WORDS, TOP_LEVEL_DOMAINS

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
Preference = Literal["paper", "firefox"]

#: Visit types of the notebook, in order: link ("visited"), typed, bookmarked.
VISIT_TYPES: tuple[Transition, ...] = (Transition.LINK, Transition.TYPED, Transition.BOOKMARK)
#: Paper section 3 type points and recency points (the notebook's ``frecency_points``).
TYPE_POINTS: tuple[float, ...] = (1.2, 2.0, 1.4)
RECENCY_POINTS: tuple[float, ...] = (100.0, 70.0, 50.0, 30.0, 10.0)
#: Whole-day ages of each recency bucket, as firefox-2018's defaults bucket them
#: (age_in_days <= 4, 14, 31, 90; the last bucket capped at a year).
BUCKET_DAYS: tuple[tuple[int, int], ...] = ((0, 4), (5, 14), (15, 31), (32, 90), (91, 365))
#: 2018-07-01 00:00 UTC, the simulation's "now" (PRTime).
DEFAULT_NOW_US = 1_530_403_200 * 1_000_000
_SAMPLED_VISITS = 10


@dataclass(frozen=True, slots=True)
class PopulationConfig:
    """Everything the synthetic population is drawn from (defaults: the paper's)."""

    type_probabilities: tuple[float, float, float] = (0.6, 0.2, 0.2)
    bucket_probabilities: tuple[float, float, float, float, float] = (0.15, 0.15, 0.15, 0.2, 0.35)
    mean_visits: float = 7.0
    noise_variance: float = 30.0
    sites_mean: float = 9.0
    pages_per_site_mean: float = 10.0
    pages_per_site_sd: float = 4.0
    slots_mean: float = 10.0
    slots_sd: float = 4.0
    max_results: int = MAX_RICH_RESULTS
    address_share: float = 0.5
    queries_per_person: int = 6
    now_us: int = DEFAULT_NOW_US

    def __post_init__(self) -> None:
        for name in ("type_probabilities", "bucket_probabilities"):
            if abs(sum(getattr(self, name)) - 1.0) > 1e-9:
                raise ValueError(f"{name} must sum to 1")
        if self.mean_visits <= 0 or self.noise_variance < 0 or self.max_results < 1:
            raise ValueError("mean_visits > 0, noise_variance >= 0, max_results >= 1")
        if self.queries_per_person < 1 or not 0.0 <= self.address_share <= 1.0:
            raise ValueError("queries_per_person >= 1 and address_share in [0, 1]")


@dataclass(frozen=True, slots=True, eq=False)
class History:
    """A drawn history: the pages and the notebook features they were drawn from."""

    pages: tuple[Page, ...]
    visit_type: IntArray
    bucket: IntArray
    visit_count: IntArray

    def paper_preference(self) -> FloatArray:
        """Paper section 3: visit count x type points x recency points (every sampled
        visit of a page has the page's type and bucket, so the mean is that product)."""
        points = np.asarray(TYPE_POINTS)[self.visit_type] * np.asarray(RECENCY_POINTS)[self.bucket]
        return np.asarray(self.visit_count * points, dtype=np.float64)


class VisitPool:
    """Visit tuples to draw pages from: for every (type, bucket, sampled count),
    ``variants`` tuples of that many visits of that type, ages (whole hours) uniform in the
    bucket, newest first. Visits are frozen values, so pages share them; this keeps drawing
    thousands of histories cheap without changing what any page looks like."""

    def __init__(self, rng: np.random.Generator, now_us: int, variants: int = 24) -> None:
        self.variants = variants
        self._tuples: dict[tuple[int, int, int], list[tuple[Visit, ...]]] = {}
        for visit_type, transition in enumerate(VISIT_TYPES):
            source = VisitSource.BOOKMARKED if visit_type == 2 else VisitSource.ORGANIC
            for bucket, (low, high) in enumerate(BUCKET_DAYS):
                ages = rng.integers(low, high + 1, size=(variants, _SAMPLED_VISITS)) * 24
                hours = np.sort(ages + rng.integers(1, 23, size=ages.shape), axis=1)
                for count in range(1, _SAMPLED_VISITS + 1):
                    self._tuples[(visit_type, bucket, count)] = [
                        tuple(
                            Visit(now_us - int(h) * _HOUR_US, transition, source)
                            for h in row[:count]
                        )
                        for row in hours
                    ]

    def get(self, visit_type: int, bucket: int, count: int, variant: int) -> tuple[Visit, ...]:
        return self._tuples[(visit_type, bucket, count)][variant]


_HOUR_US = MICROSECONDS_PER_DAY // 24


def draw_history(rng: np.random.Generator, config: PopulationConfig, pool: VisitPool) -> History:
    """One person's history (see the module docstring)."""
    site_count = max(1, int(rng.poisson(config.sites_mean)))
    site_count = min(site_count, len(SITE_WORDS))
    sites = rng.choice(len(SITE_WORDS), size=site_count, replace=False)
    sizes = np.maximum(
        1, rng.normal(config.pages_per_site_mean, config.pages_per_site_sd, site_count)
    ).astype(np.int64)
    total = int(sizes.sum())
    visit_type = rng.choice(3, size=total, p=config.type_probabilities).astype(np.int64)
    bucket = rng.choice(5, size=total, p=config.bucket_probabilities).astype(np.int64)
    visit_count = np.maximum(1, np.rint(rng.exponential(config.mean_visits, total))).astype(
        np.int64
    )
    sampled = np.minimum(visit_count, _SAMPLED_VISITS)
    variant = rng.integers(0, pool.variants, size=total)
    words = rng.integers(0, len(PAGE_WORDS), size=(total, 3))
    tlds = rng.integers(0, len(TOP_LEVEL_DOMAINS), size=site_count)

    word_rows = words.tolist()
    types, buckets, counts = visit_type.tolist(), bucket.tolist(), visit_count.tolist()
    sampled_counts, variants = sampled.tolist(), variant.tolist()
    pages: list[Page] = []
    row = 0
    for site_index, site in enumerate(sites.tolist()):
        name = SITE_WORDS[site]
        domain = f"{name}.{TOP_LEVEL_DOMAINS[int(tlds[site_index])]}"
        seen: set[str] = set()
        for _ in range(int(sizes[site_index])):
            w1, w2, w3 = (PAGE_WORDS[i] for i in word_rows[row])
            path = f"{w1}/{w2}-{w3}"
            if path in seen:
                path = f"{path}-{len(seen)}"
            seen.add(path)
            kind = types[row]
            visits = pool.get(kind, buckets[row], sampled_counts[row], variants[row])
            pages.append(
                Page(
                    url=f"https://www.{domain}/{path}",
                    title=f"{name.title()}: {w1.title()} {w2} {w3}",
                    visit_count=counts[row],
                    visits=visits,
                    bookmarked=kind == 2,
                    bookmark_added_us=visits[-1].time_us - _HOUR_US if kind == 2 else None,
                    typed=kind == 1,
                )
            )
            row += 1
    return History(
        pages=tuple(pages), visit_type=visit_type, bucket=bucket, visit_count=visit_count
    )


def concat_batches(batches: Sequence[PageBatch]) -> PageBatch:
    """Stack encoded histories into one batch (page indices shift by the sizes before).

    The shipped models' batches are dataclasses of arrays indexed by page on axis 0.
    """
    first = batches[0]
    if not dataclasses.is_dataclass(first):
        raise TypeError(f"cannot stack {type(first).__name__} batches")
    values = {
        f.name: np.concatenate([getattr(b, f.name) for b in batches], axis=0)
        for f in dataclasses.fields(first)
    }
    stacked: PageBatch = type(first)(**values)
    return stacked


def true_preference(
    history: History, batch: PageBatch, model: FrecencyModel, kind: Preference
) -> FloatArray:
    """The hidden preference: the paper's simplified frecency of ``history`` or the model's
    score at its defaults of every page of ``batch``."""
    if kind == "paper":
        return history.paper_preference()
    if kind == "firefox":
        scores = model.score(batch, model.spec.defaults()[np.newaxis, :])
        return np.asarray(scores[0], dtype=np.float64)
    raise ValueError(f"unknown preference {kind!r}")


def plan_queries(
    rng: np.random.Generator,
    config: PopulationConfig,
    history: History,
    preference: FloatArray,
    count: int,
) -> tuple[QueryPlan, ...]:
    """``count`` query texts: addresses or titles of pages drawn in proportion to the
    (positive part of the) true preference, without replacement."""
    text = HistoryText.of_pages(history.pages)
    weight = np.maximum(preference, 0.0) + 1e-9
    chosen = rng.choice(
        weight.size, size=min(count, weight.size), replace=False, p=weight / weight.sum()
    )
    address = rng.random(chosen.size) < config.address_share
    typed = [
        searchable_url(history.pages[page].url) if by_address else history.pages[page].title
        for page, by_address in zip(chosen.tolist(), address.tolist(), strict=True)
    ]
    plans = text.plan_many(typed)
    return tuple(plans)


@dataclass(frozen=True, slots=True, eq=False)
class Population:
    """People's histories encoded as one batch (person ``i`` owns pages
    ``offsets[i]:offsets[i + 1]``), the hidden preference of every page, and each
    person's query catalogue (page indices local to the person)."""

    batch: PageBatch
    preference: FloatArray
    offsets: IntArray
    catalogues: tuple[tuple[QueryPlan, ...], ...]
    #: The notebook features of every page (for checking the population's statistics).
    visit_type: IntArray
    bucket: IntArray
    visit_count: IntArray

    def __len__(self) -> int:
        return len(self.catalogues)

    def draw_queries(
        self, rng: np.random.Generator, config: PopulationConfig, people: IntArray
    ) -> QueryBatch:
        """One query for every entry of ``people``: a catalogue entry (uniformly), fresh
        N(0, sigma^2) noise on each candidate's preference, N(10, 4) history rows."""
        plans = []
        for person in people:
            catalogue = self.catalogues[int(person)]
            plans.append(catalogue[int(rng.integers(0, len(catalogue)))])
        shifts = self.offsets[np.asarray(people, dtype=np.int64)]
        sizes = np.array([p.candidates.size for p in plans], dtype=np.int64)
        pages = np.concatenate([p.candidates for p in plans]) + np.repeat(shifts, sizes)
        sigma = float(np.sqrt(config.noise_variance))
        noisy = self.preference[pages] + rng.normal(0.0, sigma, pages.size)
        return QueryBatch(
            offsets=np.concatenate(([0], np.cumsum(sizes))).astype(np.int64),
            page=pages,
            depth=np.concatenate([p.depth for p in plans]),
            preference=noisy,
            text_length=np.array([len(p.text) for p in plans], dtype=np.int64),
            slots=draw_slots(rng, config, len(plans)),
        )


def draw_slots(rng: np.random.Generator, config: PopulationConfig, count: int) -> IntArray:
    """History rows of ``count`` queries: N(slots_mean, slots_sd) in [1, max_results]."""
    slots = rng.normal(config.slots_mean, config.slots_sd, count).astype(np.int64)
    return np.clip(slots, 1, config.max_results).astype(np.int64)


def draw_population(
    rng: np.random.Generator,
    config: PopulationConfig,
    model: FrecencyModel,
    preference: Preference,
    people: int,
    chunk: int = 200,
) -> Population:
    """``people`` histories, encoded by ``model`` (a chunk of people at a time, so no more
    than ``chunk`` histories of ``Page`` objects are alive at once)."""
    if people < 1:
        raise ValueError("need at least one person")
    pool = VisitPool(rng, config.now_us)
    batches: list[PageBatch] = []
    truths: list[FloatArray] = []
    sizes: list[int] = []
    catalogues: list[tuple[QueryPlan, ...]] = []
    features: list[tuple[IntArray, IntArray, IntArray]] = []
    for begin in range(0, people, chunk):
        histories = [draw_history(rng, config, pool) for _ in range(min(chunk, people - begin))]
        batch = model.encode([p for h in histories for p in h.pages], config.now_us)
        batches.append(batch)
        local = stack_offsets([len(h.pages) for h in histories])
        if preference == "firefox":
            chunk_truth = true_preference(histories[0], batch, model, preference)
        for index, history in enumerate(histories):
            if preference == "firefox":
                truth = chunk_truth[local[index] : local[index + 1]]
            else:
                truth = true_preference(history, batch, model, preference)
            truths.append(truth)
            sizes.append(len(history.pages))
            catalogues.append(plan_queries(rng, config, history, truth, config.queries_per_person))
            features.append((history.visit_type, history.bucket, history.visit_count))
    return Population(
        batch=concat_batches(batches),
        preference=np.concatenate(truths),
        offsets=stack_offsets(sizes),
        catalogues=tuple(catalogues),
        visit_type=np.concatenate([f[0] for f in features]),
        bucket=np.concatenate([f[1] for f in features]),
        visit_count=np.concatenate([f[2] for f in features]),
    )


def stack_offsets(sizes: Sequence[int]) -> IntArray:
    """Offsets of histories of ``sizes`` pages stacked in one batch."""
    return np.concatenate(([0], np.cumsum(np.asarray(sizes, dtype=np.int64)))).astype(np.int64)
