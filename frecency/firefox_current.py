"""The ``firefox-current`` model: the decay-based page frecency Firefox stores in
``moz_places.frecency`` today (DESIGN.md section 2, reference/firefox-current-frecency.md).

It reproduces the SQL of ``CalculateFrecencyFunction::OnFunctionCall`` (toolkit/components/
places/SQLFunctions.cpp, as shipped in Firefox 153 ESR, run by PlacesFrecencyRecalculator
as ``CALCULATE_FRECENCY(id)``): samples are the newest 10 visits that are not downloads,
framed links or reloads, plus "virtual visits" from interesting page views of
``moz_places_metadata``; each sample weighs by its kind; the stored value is
``ref_day + trunc(ln(score) / lambda)``. Every rule and its source is in docs/frecency.md.

Trained: ``halfLifeDays`` and the four kind weights, each at least 1 (a page's score is
then at least its newest sample's weight, so ``ln(score) >= 0``: the stored day never
precedes that sample, and the learning score's order is exactly the stored order).
``numSampledVisits`` and the interaction thresholds stay fixed model settings: they decide
which samples exist (the encoded shape), not how they are weighed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Self

import numpy as np

from frecency._arrays import (
    BoolArray,
    FloatArray,
    IntArray,
    as_pref_integers,
    kbn_sum,
    trunc_div,
    weight_matrix,
    weight_vector,
)
from frecency.history import MICROSECONDS_PER_DAY, Page, PageView, Transition, Visit, VisitSource
from frecency.model import PageBatch
from frecency.spec import ModelSpec, Param

_PREF_PREFIX = "places.frecency.pages."

SPEC = ModelSpec(
    name="firefox-current",
    description=(
        "Firefox's page frecency today: 10 samples weighted by kind "
        "(200/100/50/20) and decayed with a 30-day half-life"
    ),
    params=(
        Param("halfLifeDays", _PREF_PREFIX + "halfLifeDays", 30.0, integer=False, lower=1.0),
        Param("veryHighWeight", _PREF_PREFIX + "veryHighWeight", 200.0, lower=1.0),
        Param("highWeight", _PREF_PREFIX + "highWeight", 100.0, lower=1.0),
        Param("mediumWeight", _PREF_PREFIX + "mediumWeight", 50.0, lower=1.0),
        Param("lowWeight", _PREF_PREFIX + "lowWeight", 20.0, lower=1.0),
    ),
    non_increasing=((1, 2, 3, 4),),
)

HALF_LIFE, VERY_HIGH, HIGH, MEDIUM, LOW = 0, 1, 2, 3, 4
_EXCLUDED = (Transition.DOWNLOAD, Transition.FRAMED_LINK, Transition.RELOAD)
_REDIRECTS = (Transition.REDIRECT_PERMANENT, Transition.REDIRECT_TEMPORARY)
_NOT_MEDIUM = (Transition.EMBED, Transition.FRAMED_LINK, Transition.RELOAD)
_SMALLEST_HALF_LIFE = 1e-9


@dataclass(frozen=True, slots=True)
class InteractionSettings:
    """The fixed ``places.frecency.pages.*`` prefs that decide which samples exist."""

    num_sampled_visits: int = 10
    view_time_seconds: int = 60
    view_time_if_many_keypresses_seconds: int = 20
    many_keypresses: int = 50
    max_visit_gap_seconds: int = 120

    def is_interesting(self, view: PageView) -> bool:
        """The ``interactions`` CTE: viewed long enough, or shorter with many keypresses."""
        return view.view_time_ms >= self.view_time_seconds * 1000 or (
            view.view_time_ms >= self.view_time_if_many_keypresses_seconds * 1000
            and view.key_presses >= self.many_keypresses
        )


@dataclass(frozen=True, slots=True, eq=False)
class FirefoxCurrentBatch:
    """Encoded pages: ``(P, K)`` per sample, ``(P,)`` per page. Masks are 0.0/1.0 floats
    and ages whole days as floats, so scoring does no casting."""

    #: Index into the weight vector of each sample's kind weight.
    kind_index: IntArray
    #: ``reference.days - samples.days``: whole UTC days (``visit_date / 86400000000``)
    #: between the newest sample and this one; 0 in empty slots.
    age_days: FloatArray
    #: 1.0 where the slot holds a sample.
    sampled: FloatArray
    #: Samples taken (``samples_count``).
    sampled_count: IntArray
    #: ``max(visit_count, samples)``.
    count: IntArray
    #: The newest sample's day (0 when there is no sample).
    reference_day: IntArray
    #: Stored as 0 whatever the weights: no sample, or a ``place:`` URL.
    zero: BoolArray
    #: ``count / max(samples, 1)``, the factor of the mean sample.
    scale: FloatArray

    def __len__(self) -> int:
        return int(self.count.shape[0])

    def take(self, pages: Sequence[int] | IntArray) -> Self:
        index = np.asarray(pages, dtype=np.int64)
        return type(self)(**{f.name: getattr(self, f.name)[index] for f in fields(self)})


@dataclass(frozen=True, slots=True)
class _Sample:
    time_us: int
    kind_index: int


def _own(batch: PageBatch) -> FirefoxCurrentBatch:
    if not isinstance(batch, FirefoxCurrentBatch):
        raise TypeError(f"firefox-current scores its own batches, not {type(batch).__name__}")
    return batch


def visit_kind(visit: Visit, interesting: bool) -> int:
    """The weight of a real visit (the ``visits`` CTE's CASE), as an index into the spec.

    A redirect target takes its source's transition; a redirect source is never high or
    medium. ``CALCULATE_FRECENCY(id)`` is called without ``isRedirect``, so only the
    stored redirect relation counts.
    """
    transition = visit.transition
    if transition in _REDIRECTS and visit.redirect_from is not None:
        transition = visit.redirect_from
    source = visit.source
    if (
        transition == Transition.BOOKMARK
        or source == VisitSource.BOOKMARKED
        or (
            transition == Transition.TYPED
            and source not in (VisitSource.SPONSORED, VisitSource.SEARCHED)
            and not visit.redirect_source
        )
    ):
        return VERY_HIGH if interesting else HIGH
    if (
        not visit.redirect_source
        and transition not in _NOT_MEDIUM
        and source != VisitSource.SPONSORED
    ):
        return HIGH if interesting else MEDIUM
    return LOW


def page_samples(page: Page, now_us: int, settings: InteractionSettings) -> list[_Sample]:
    """A page's samples, newest first: the ``visit_interaction`` and ``bookmark`` CTEs."""
    limit = settings.num_sampled_visits
    gap_us = settings.max_visit_gap_seconds * 1_000_000
    interactions = sorted(
        (view.time_us for view in page.views if settings.is_interesting(view)), reverse=True
    )[:limit]
    candidates = sorted(
        (visit for visit in page.visits if visit.transition not in _EXCLUDED),
        key=lambda visit: visit.time_us,
        reverse=True,
    )[:limit]
    samples = [
        _Sample(
            visit.time_us,
            visit_kind(visit, any(abs(visit.time_us - when) <= gap_us for when in interactions)),
        )
        for visit in candidates
    ]
    # Virtual visits: interesting views with no visit of any type within the gap; they
    # count as an interesting organic link visit.
    samples += [
        _Sample(when, HIGH)
        for when in interactions
        if not any(abs(visit.time_us - when) <= gap_us for visit in page.visits)
    ]
    samples.sort(key=lambda sample: sample.time_us, reverse=True)
    samples = samples[:limit]
    if not samples and page.bookmarked:
        added = page.bookmark_added_us if page.bookmark_added_us is not None else now_us
        samples = [_Sample(added, HIGH)]
    return samples


class FirefoxCurrentModel:
    """``FrecencyModel`` for today's decay-based frecency (see the module docstring)."""

    def __init__(self, settings: InteractionSettings | None = None) -> None:
        self.settings = settings if settings is not None else InteractionSettings()

    @property
    def spec(self) -> ModelSpec:
        return SPEC

    def encode(self, pages: Sequence[Page], now_us: int) -> FirefoxCurrentBatch:
        """Samples and their kinds; ``now_us`` only dates a bookmark with no ``dateAdded``
        (the stored value does not depend on when it is computed)."""
        count, width = len(pages), self.settings.num_sampled_visits
        kind_index = np.full((count, width), LOW, dtype=np.int64)
        time_us = np.zeros((count, width), dtype=np.int64)
        sampled = np.zeros((count, width), dtype=np.bool_)
        visit_count = np.zeros(count, dtype=np.int64)
        place_url = np.zeros(count, dtype=np.bool_)
        for row, page in enumerate(pages):
            for column, sample in enumerate(page_samples(page, now_us, self.settings)):
                kind_index[row, column] = sample.kind_index
                time_us[row, column] = sample.time_us
                sampled[row, column] = True
            visit_count[row] = page.visit_count
            # substr(url, 0, 7) = 'place:' compares the first six characters.
            place_url[row] = page.url.startswith("place:")
        day = np.where(sampled, trunc_div(time_us, MICROSECONDS_PER_DAY), 0)
        samples = sampled.sum(axis=1)
        reference_day = np.where(
            samples > 0, np.where(sampled, day, np.iinfo(np.int64).min).max(axis=1), 0
        )
        counted = np.maximum(visit_count, samples)
        return FirefoxCurrentBatch(
            kind_index=kind_index,
            age_days=np.where(sampled, reference_day[:, np.newaxis] - day, 0).astype(np.float64),
            sampled=sampled.astype(np.float64),
            sampled_count=samples.astype(np.int64),
            count=counted.astype(np.int64),
            reference_day=reference_day.astype(np.int64),
            zero=np.asarray((samples == 0) | place_url, dtype=np.bool_),
            scale=counted / np.maximum(samples, 1),
        )

    def score(self, batch: PageBatch, weights: FloatArray) -> FloatArray:
        """``ref_day + ln(score) / lambda`` as a float (not truncated), ``(W, P)``.

        Pages Firefox stores as 0 (no sample, ``place:`` URL, or a score of 0) score 0. A
        half-life at or below 0 (a finite difference at the bound) is taken as 1e-9 days,
        the limit where only the newest day's samples count.
        """
        batch = _own(batch)
        matrix = weight_matrix(weights, SPEC.dimension)
        half_life = np.maximum(matrix[:, HALF_LIFE], _SMALLEST_HALF_LIFE)
        decay = (math.log(2.0) / half_life)[:, np.newaxis]
        terms = matrix[:, batch.kind_index] * np.exp(-decay[:, :, np.newaxis] * batch.age_days)
        value = np.einsum("wpk,pk->wp", terms, batch.sampled) * batch.scale
        positive = (value > 0) & ~batch.zero
        days = np.log(np.where(positive, value, 1.0)) / decay
        return np.asarray(np.where(positive, batch.reference_day + days, 0.0), dtype=np.float64)

    def frecency(self, batch: PageBatch, weights: FloatArray) -> IntArray:
        """The integer ``calculate_frecency`` stores, in SQLite's double arithmetic, ``(P,)``.

        Prefs are bound as integers, so the weights are rounded first (a half-life of 0
        divides by zero, NULL in SQLite: every page stores 0). ``exp`` and ``ln`` are the C
        library's (Python's ``math``), the sum is SQLite's compensated ``sum()``.
        """
        batch = _own(batch)
        prefs = as_pref_integers(weight_vector(weights, SPEC.dimension))
        result = np.zeros(len(batch), dtype=np.int64)
        if prefs[HALF_LIFE] == 0:
            return result
        decay = math.log(2.0) / float(prefs[HALF_LIFE])
        decayed = np.vectorize(lambda days: math.exp(-decay * days), otypes=[np.float64])(
            batch.age_days
        )
        terms = prefs[batch.kind_index].astype(np.float64) * decayed
        total = kbn_sum(terms, batch.sampled > 0)
        for page in np.flatnonzero(~batch.zero):
            # sum(score) / samples_count * MAX(visit_count, samples_count), left to right
            value = float(total[page]) / int(batch.sampled_count[page]) * int(batch.count[page])
            if value > 0:
                days = math.log(value) / decay
                result[page] = int(batch.reference_day[page]) + int(days)
        return result


__all__ = [
    "SPEC",
    "FirefoxCurrentBatch",
    "FirefoxCurrentModel",
    "InteractionSettings",
    "page_samples",
    "visit_kind",
]
