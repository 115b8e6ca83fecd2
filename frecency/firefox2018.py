"""The ``firefox-2018`` model: Firefox's bucket-and-bonus frecency under the 22 integer
``places.frecency.*`` prefs the 2018 study trained (DESIGN.md section 2, paper section 3).

It reproduces ``CalculateFrecencyFunction::OnFunctionCall`` (the SQL function
``calculate_frecency`` in toolkit/components/places/SQLFunctions.cpp, Firefox 60-68, the
code the 2018 add-on ran through ``SELECT CALCULATE_FRECENCY(id)``) with
``nsNavHistory::GetFrecencyTransitionBonus`` / ``GetFrecencyAgedWeight``. Every rule and
its source is listed in docs/frecency.md.

Pages are encoded once (``encode``): the newest ``numVisits`` (10) visits of each page,
as the index of the bonus weight each one earns, its age in days and a mask. ``score``
then evaluates any number of weight vectors in a few broadcast numpy operations.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Self

import numpy as np
from numpy.typing import NDArray

from frecency._arrays import (
    BoolArray,
    FloatArray,
    IntArray,
    as_pref_integers,
    trunc_div,
    weight_matrix,
    weight_vector,
)
from frecency.history import Page, Transition
from frecency.model import PageBatch
from frecency.spec import ModelSpec, Param

_NAMES_AND_DEFAULTS: tuple[tuple[str, int], ...] = (
    ("firstBucketCutoff", 4),
    ("secondBucketCutoff", 14),
    ("thirdBucketCutoff", 31),
    ("fourthBucketCutoff", 90),
    ("firstBucketWeight", 100),
    ("secondBucketWeight", 70),
    ("thirdBucketWeight", 50),
    ("fourthBucketWeight", 30),
    ("defaultBucketWeight", 10),
    ("embedVisitBonus", 0),
    ("framedLinkVisitBonus", 0),
    ("linkVisitBonus", 100),
    ("typedVisitBonus", 2000),
    ("bookmarkVisitBonus", 75),
    ("downloadVisitBonus", 0),
    ("permRedirectVisitBonus", 0),
    ("tempRedirectVisitBonus", 0),
    ("redirectSourceVisitBonus", 25),
    ("defaultVisitBonus", 0),
    ("unvisitedBookmarkBonus", 140),
    ("unvisitedTypedBonus", 200),
    ("reloadVisitBonus", 0),
)

SPEC = ModelSpec(
    name="firefox-2018",
    description=(
        "Firefox's 2018 frecency: the 10 newest visits, each worth "
        "bucket_weight(age) * transition bonus / 100 (DESIGN.md section 2)"
    ),
    params=tuple(
        Param(
            name=name,
            pref=f"places.frecency.{name}",
            default=float(default),
            integer=True,
            lower=1.0 if name == "firstBucketCutoff" else 0.0,
        )
        for name, default in _NAMES_AND_DEFAULTS
    ),
    increasing=((0, 1, 2, 3),),
    non_increasing=((4, 5, 6, 7, 8),),
    min_gap=1.0,
)

CUTOFFS = slice(0, 4)
BUCKET_WEIGHTS = slice(4, 9)
FIRST_BUCKET_WEIGHT = 4
EMBED, FRAMED_LINK, LINK, TYPED, BOOKMARK = 9, 10, 11, 12, 13
DOWNLOAD, PERM_REDIRECT, TEMP_REDIRECT, REDIRECT_SOURCE, DEFAULT_BONUS = 14, 15, 16, 17, 18
UNVISITED_BOOKMARK, UNVISITED_TYPED, RELOAD = 19, 20, 21
NO_BONUS = 22

#: ``GetFrecencyTransitionBonus(type, visited=true)``: the bonus weight of each transition.
_BONUS_OF_TRANSITION: dict[int, int] = {
    Transition.EMBED: EMBED,
    Transition.FRAMED_LINK: FRAMED_LINK,
    Transition.LINK: LINK,
    Transition.TYPED: TYPED,
    Transition.BOOKMARK: BOOKMARK,
    Transition.DOWNLOAD: DOWNLOAD,
    Transition.REDIRECT_PERMANENT: PERM_REDIRECT,
    Transition.REDIRECT_TEMPORARY: TEMP_REDIRECT,
    Transition.RELOAD: RELOAD,
}
_REDIRECTS = (Transition.REDIRECT_PERMANENT, Transition.REDIRECT_TEMPORARY)

#: ``places.frecency.numVisits``: visits sampled per page (not trained: it changes shape).
NUM_VISITS = 10
_MICROSECONDS_PER_SECOND = 1_000_000
_SECONDS_PER_DAY = 86_400


@dataclass(frozen=True, slots=True, eq=False)
class Firefox2018Batch:
    """Encoded pages: ``(P, K)`` arrays for the K sampled visits, ``(P,)`` per page.

    Flags are 0.0/1.0 floats, ages whole days as floats, and the per-page factors of the
    final formula are precomputed in the types Firefox uses, so scoring does no casting.
    """

    #: Index into the weight vector of each sampled visit's transition bonus; empty slots
    #: hold ``NO_BONUS``, an index past the weights that reads 0.
    bonus_index: IntArray
    #: ``age_in_days`` of each sampled visit, as Firefox's SQL computed it.
    age_days: FloatArray
    #: 1.0 where the slot holds a sampled visit of a bookmarked page (it earns
    #: ``bookmarkVisitBonus`` on top of its transition's bonus).
    bookmarked_visit: FloatArray
    #: ``moz_places.visit_count``.
    visit_count: IntArray
    #: Visits sampled (``numSampledVisits`` in Firefox's code).
    sampled_count: IntArray
    #: 1.0 for a page with ``moz_places.typed``.
    typed: FloatArray
    #: No visit sampled, bookmarked, not a ``place:`` query: the unvisited-bookmark rule.
    unvisited_bookmark: BoolArray
    #: ``visit_count`` and ``max(sampled_count, 1)`` as C's int-to-float conversions.
    visit_count_f32: NDArray[np.float32]
    divisor_f32: NDArray[np.float32]
    #: ``visit_count / max(sampled_count, 1)``, for the value before ceilings.
    visit_scale: FloatArray
    #: Stored value when the points are 0: -1 with sampled visits, else 0.
    no_points_value: NDArray[np.float32]

    @classmethod
    def build(
        cls,
        bonus_index: IntArray,
        age_days: FloatArray,
        bookmarked_visit: FloatArray,
        visit_count: IntArray,
        sampled_count: IntArray,
        typed: FloatArray,
        unvisited_bookmark: BoolArray,
    ) -> Firefox2018Batch:
        divisor = np.maximum(sampled_count, 1)
        return cls(
            bonus_index=bonus_index,
            age_days=age_days,
            bookmarked_visit=bookmarked_visit,
            visit_count=visit_count,
            sampled_count=sampled_count,
            typed=typed,
            unvisited_bookmark=unvisited_bookmark,
            visit_count_f32=visit_count.astype(np.float32),
            divisor_f32=divisor.astype(np.float32),
            visit_scale=visit_count / divisor,
            no_points_value=np.where(sampled_count > 0, -1.0, 0.0).astype(np.float32),
        )

    def __len__(self) -> int:
        return int(self.visit_count.shape[0])

    def take(self, pages: Sequence[int] | IntArray) -> Self:
        index = np.asarray(pages, dtype=np.int64)
        return type(self)(**{f.name: getattr(self, f.name)[index] for f in fields(self)})


def _own(batch: PageBatch) -> Firefox2018Batch:
    if not isinstance(batch, Firefox2018Batch):
        raise TypeError(f"firefox-2018 scores its own batches, not {type(batch).__name__}")
    return batch


def _visit_bonus_index(transition: int, redirect_from: int | None, redirect_source: bool) -> int:
    """The bonus a visit earns (SQLFunctions.cpp, the loop over ``getVisits``).

    A redirect target counts as its source's transition (``IFNULL(origin.visit_type,
    v.visit_type)``); a visit that was the source of a redirect earns
    ``redirectSourceVisitBonus``, except a typed visit redirected temporarily. The
    history types record only that a visit was a redirect source, not whether the redirect
    was permanent, so every redirect source is treated as permanently redirected.
    """
    if transition in _REDIRECTS and redirect_from is not None:
        transition = redirect_from
    if redirect_source:
        return REDIRECT_SOURCE
    return _BONUS_OF_TRANSITION.get(transition, DEFAULT_BONUS)


class Firefox2018Model:
    """``FrecencyModel`` for the 2018 prefs (see the module docstring)."""

    def __init__(self, num_visits: int = NUM_VISITS) -> None:
        if num_visits < 1:
            raise ValueError("num_visits must be at least 1")
        self.num_visits = num_visits

    @property
    def spec(self) -> ModelSpec:
        return SPEC

    def encode(self, pages: Sequence[Page], now_us: int) -> Firefox2018Batch:
        """Sample each page's newest visits and their ages as of ``now_us``.

        ``age_in_days`` is ``ROUND((strftime('%s','now') - visit_date/1000000)/86400)`` in
        SQLite integer arithmetic: whole seconds, divisions truncated toward zero.
        """
        count, width = len(pages), self.num_visits
        bonus_index = np.full((count, width), NO_BONUS, dtype=np.int64)
        visit_time_us = np.zeros((count, width), dtype=np.int64)
        sampled = np.zeros((count, width), dtype=np.bool_)
        for row, page in enumerate(pages):
            # Firefox samples visits only when visit_count > 0.
            if page.visit_count <= 0:
                continue
            newest = sorted(page.visits, key=lambda visit: visit.time_us, reverse=True)[:width]
            for column, visit in enumerate(newest):
                bonus_index[row, column] = _visit_bonus_index(
                    int(visit.transition),
                    None if visit.redirect_from is None else int(visit.redirect_from),
                    visit.redirect_source,
                )
                visit_time_us[row, column] = visit.time_us
                sampled[row, column] = True
        now_seconds = now_us // _MICROSECONDS_PER_SECOND
        seconds = now_seconds - trunc_div(visit_time_us, _MICROSECONDS_PER_SECOND)
        age_days = np.where(sampled, trunc_div(seconds, _SECONDS_PER_DAY), 0)
        bookmarked = np.array([p.bookmarked for p in pages], dtype=np.bool_)
        is_query = np.array([p.url.startswith("place:") for p in pages], dtype=np.bool_)
        sampled_count = sampled.sum(axis=1).astype(np.int64)
        return Firefox2018Batch.build(
            bonus_index=bonus_index,
            age_days=age_days.astype(np.float64),
            bookmarked_visit=(sampled & bookmarked[:, np.newaxis]).astype(np.float64),
            visit_count=np.array([p.visit_count for p in pages], dtype=np.int64),
            sampled_count=sampled_count,
            typed=np.array([p.typed for p in pages], dtype=np.float64),
            unvisited_bookmark=(sampled_count == 0) & bookmarked & ~is_query,
        )

    @staticmethod
    def _bucket_weights(batch: Firefox2018Batch, weights: FloatArray) -> FloatArray:
        """``GetFrecencyAgedWeight(age)`` for every (weight vector, page, visit): the first
        cutoff with ``age <= cutoff`` picks its bucket weight, else the default bucket."""
        age = batch.age_days
        cutoffs = weights[:, CUTOFFS, np.newaxis, np.newaxis]
        buckets = weights[:, BUCKET_WEIGHTS, np.newaxis, np.newaxis]
        result = np.where(age <= cutoffs[:, 3], buckets[:, 3], buckets[:, 4])
        for bucket in (2, 1, 0):
            result = np.where(age <= cutoffs[:, bucket], buckets[:, bucket], result)
        return np.asarray(result, dtype=np.float64)

    @staticmethod
    def _visit_bonuses(batch: Firefox2018Batch, weights: FloatArray) -> FloatArray:
        """Bonus of every (weight vector, page, visit), with ``bookmarkVisitBonus`` added to
        every visit of a bookmarked page; 0 in empty slots."""
        padded = np.concatenate([weights, np.zeros((weights.shape[0], 1))], axis=1)
        bonus = padded[:, batch.bonus_index]
        bonus += weights[:, BOOKMARK, np.newaxis, np.newaxis] * batch.bookmarked_visit
        return np.asarray(bonus, dtype=np.float64)

    def _stored_and_smooth(
        self, batch: Firefox2018Batch, weights: FloatArray
    ) -> tuple[FloatArray, FloatArray]:
        """Firefox's stored value and the same value before its ceilings, both ``(W, P)``.

        The stored value follows ``calculate_frecency`` in its float32 arithmetic:
        ``points += (float)(weight * (bonus / 100.0))`` newest visit first, then
        ``ceilf(visit_count * ceilf(points) / sampled)``, -1 when the points are 0; an
        unvisited bookmark is ``ceilf(weight(bucket 1) * (bonus / 100.0f))``.
        """
        per_visit = self._bucket_weights(batch, weights) * (
            self._visit_bonuses(batch, weights) / 100.0
        )
        # cumsum accumulates left to right in float32, as the C++ loop does.
        points = np.cumsum(per_visit.astype(np.float32), axis=2)[:, :, -1]
        estimate = np.ceil(batch.visit_count_f32 * np.ceil(points) / batch.divisor_f32)
        stored = np.where(points != 0, estimate, batch.no_points_value).astype(np.float64)
        smooth = points * batch.visit_scale
        if batch.unvisited_bookmark.any():
            bonus = (
                weights[:, UNVISITED_BOOKMARK, np.newaxis]
                + weights[:, UNVISITED_TYPED, np.newaxis] * batch.typed
            ).astype(np.float32)
            first_bucket = weights[:, FIRST_BUCKET_WEIGHT, np.newaxis].astype(np.float32)
            unvisited = first_bucket * (bonus / np.float32(100.0))
            stored = np.where(batch.unvisited_bookmark, np.ceil(unvisited), stored)
            smooth = np.where(batch.unvisited_bookmark, unvisited, smooth)
        return stored, smooth

    def score(self, batch: PageBatch, weights: FloatArray) -> FloatArray:
        """Firefox's stored value plus a tie-break below 1/2, ``(W, P)``.

        The two ceilings make the stored value a step function, so it is refined by
        ``0.5 * x / (x + stored)`` with ``x = visit_count * points / sampled`` (the value
        before ceiling): the order of scores is the order of stored values, and any change
        of the points (a step of 1 in any weight that matters) changes the score.
        """
        batch = _own(batch)
        stored, smooth = self._stored_and_smooth(batch, weight_matrix(weights, SPEC.dimension))
        positive = stored > 0
        tie_break = 0.5 * smooth / np.where(positive, smooth + stored, 1.0)
        return np.asarray(np.where(positive, stored + tie_break, stored), dtype=np.float64)

    def frecency(self, batch: PageBatch, weights: FloatArray) -> IntArray:
        """The integer ``calculate_frecency`` returns for each page, ``(P,)``; the weights
        are rounded to the integer prefs Firefox reads."""
        batch = _own(batch)
        prefs = as_pref_integers(weight_vector(weights, SPEC.dimension))
        stored, _ = self._stored_and_smooth(batch, prefs[np.newaxis, :].astype(np.float64))
        return np.asarray(stored[0], dtype=np.int64)
