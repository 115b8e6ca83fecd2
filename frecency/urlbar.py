"""A person using the Firefox URL bar (paper section 3, "Search in the Firefox URL bar";
DESIGN.md section 3, the interaction a participant learns from).

Searching history is two steps (paper section 3): *matching* is a binary decision, then
the matches are *ranked* by frecency and the first few are shown. This module models both
and a person typing one character at a time:

* **Matching** follows Firefox's ``MATCH_BOUNDARY`` behaviour
  (``MatchAutoCompleteFunction::findOnBoundary`` in toolkit/components/places
  SQLFunctions.cpp, used by ``UrlbarProviderPlaces``): the typed string is split on
  whitespace into tokens; a page matches when *every* token matches, case-insensitively, at
  a word boundary of its URL or of its title. The URL is searched as ``fixupURISpec``
  leaves it: without ``http://``/``https://`` and a leading ``www.``. Simplifications:
  text is ASCII-lowercased first, so a word boundary is the start of the text or any
  position after a character that is not ``a``-``z`` (Firefox also starts a word at an
  upper-case letter inside CamelCase); the ``MATCH_BOUNDARY_ANYWHERE`` fallback (match
  mid-word when too few boundary matches) and tags are not modelled.
* **Ranking**: matches sorted by the model's real-valued ``score`` (descending; ties by
  page index), the first ``slots`` shown. Firefox shows at most
  ``browser.urlbar.maxRichResults`` = 10 rows (:data:`MAX_RICH_RESULTS`); a query's
  ``slots`` (how many rows history gets; search suggestions and other providers take the
  rest) is at most that.
* **The person** types a query text (a page's address or title) character by character.
  At every prefix they want the page they prefer most (highest noisy true preference)
  among the pages matching what they have typed; as soon as that page is shown they
  select it. If it is never shown, after the whole text they select the shown page they
  prefer most. Either way the selected page is the most preferred of the suggestions
  shown, so every suggestion ranked above it is one the person ranks below it: the
  pointwise SVM loss then points towards the person's preference (the paper's "the user
  clicks the highest true score" of section 5.1, made consistent with typing).

Matching is model independent, so a query is planned once (:meth:`HistoryText.plan`:
for every page, the longest prefix of the text it still matches; match sets only shrink
as a person types) and typing under any number of models is a few vectorized operations
over many queries at once (:func:`type_queries`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from frecency.history import Interaction, Page

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]

#: ``browser.urlbar.maxRichResults``: rows in the URL-bar dropdown.
MAX_RICH_RESULTS = 10

_LOWER_A, _LOWER_Z = ord("a"), ord("z")


def searchable_url(url: str) -> str:
    """The URL as Firefox's matcher sees it: lowercase, no http(s) scheme, no ``www.``."""
    text = url.lower()
    for scheme in ("http://", "https://"):
        if text.startswith(scheme):
            text = text[len(scheme) :]
            break
    if text.startswith("www."):
        text = text[4:]
    return text


def searchable_text(page: Page) -> str:
    """URL and title, lowercased, separated by a space (no token spans the two)."""
    return f"{searchable_url(page.url)} {page.title.lower()}"


def _ascii(text: str) -> NDArray[np.uint8]:
    return np.frombuffer(text.encode("ascii", "replace"), dtype=np.uint8)


def _boundaries(codes: NDArray[np.uint8]) -> IntArray:
    """Positions where a word starts: the first one and every one after a non-letter."""
    if codes.size == 0:
        return np.zeros(0, dtype=np.int64)
    previous_letter = (codes[:-1] >= _LOWER_A) & (codes[:-1] <= _LOWER_Z)
    starts = np.concatenate(([True], ~previous_letter))
    return np.flatnonzero(starts).astype(np.int64)


@dataclass(frozen=True, slots=True, eq=False)
class QueryPlan:
    """What typing ``text`` can show, independent of any model.

    ``candidates`` are the pages matching the first character, ``depth[i]`` the longest
    prefix of ``text`` (in characters) that ``candidates[i]`` still matches (>= 1).
    """

    text: str
    candidates: IntArray
    depth: IntArray


class HistoryText:
    """The searchable text of one history, indexed for boundary matching.

    All pages' texts are one byte array; ``starts`` are its word-boundary positions and
    ``page_of_start`` the page each belongs to. Matching a token is a gather and a compare
    over the boundaries whose first letter fits.
    """

    def __init__(self, texts: Sequence[str]) -> None:
        self.page_count = len(texts)
        joined = "\x00".join(t.lower() for t in texts) + "\x00"
        codes = _ascii(joined)
        starts = _boundaries(codes)
        # A boundary at the NUL separator is not a word of any page.
        starts = starts[codes[starts] != 0]
        lengths = np.array([len(t) + 1 for t in texts], dtype=np.int64)
        page_offsets = np.concatenate(([0], np.cumsum(lengths)))
        self._codes = codes
        self._starts = starts
        self._page_of_start = (np.searchsorted(page_offsets, starts, side="right") - 1).astype(
            np.int64
        )
        self._first_code = codes[starts]

    @classmethod
    def of_pages(cls, pages: Sequence[Page]) -> HistoryText:
        return cls([searchable_text(p) for p in pages])

    def token_match_length(self, token: str) -> IntArray:
        """For every page, the longest prefix of ``token`` found at a word boundary of its
        text (0 if none), shape ``(P,)``."""
        best = np.zeros(self.page_count, dtype=np.int64)
        code = _ascii(token.lower())
        if code.size == 0:
            return best
        rows = np.flatnonzero(self._first_code == code[0])
        if rows.size == 0:
            return best
        starts = self._starts[rows]
        offsets = np.arange(code.size, dtype=np.int64)
        window = np.minimum(starts[:, np.newaxis] + offsets, self._codes.size - 1)
        equal = self._codes[window] == code[np.newaxis, :]
        # Length of the common prefix: the first mismatch (a False column closes each row).
        closed = np.concatenate((equal, np.zeros((rows.size, 1), dtype=np.bool_)), axis=1)
        length = closed.argmin(axis=1)
        pages = self._page_of_start[rows]
        # ``pages`` is sorted (boundaries are in text order): reduce each page's run.
        first = np.concatenate(([0], np.flatnonzero(pages[1:] != pages[:-1]) + 1))
        best[pages[first]] = np.maximum.reduceat(length, first)
        return best

    def matches(self, typed: str) -> IntArray:
        """Pages matching every token of ``typed`` at a word boundary (sorted indices)."""
        tokens = typed.split()
        if not tokens:
            return np.zeros(0, dtype=np.int64)
        ok = np.ones(self.page_count, dtype=np.bool_)
        for token in tokens:
            ok &= self.token_match_length(token) >= len(token)
        return np.flatnonzero(ok).astype(np.int64)

    def plan(self, text: str) -> QueryPlan:
        """How far each page keeps matching while ``text`` is typed (see QueryPlan)."""
        return self.plan_many([text])[0]

    def tokens_match_length(self, tokens: Sequence[str]) -> IntArray:
        """:meth:`token_match_length` of many tokens in one pass, ``(T, P)``."""
        width = max((len(t) for t in tokens), default=0)
        best = np.zeros((len(tokens), self.page_count), dtype=np.int64)
        if width == 0 or self._starts.size == 0:
            return best
        wanted = np.zeros((len(tokens), width), dtype=np.uint8)
        lengths = np.zeros(len(tokens), dtype=np.int64)
        for row, token in enumerate(tokens):
            code = _ascii(token.lower())
            wanted[row, : code.size] = code
            lengths[row] = code.size
        # Only boundaries starting with some token's first letter can match at all.
        rows = np.flatnonzero(np.isin(self._first_code, wanted[:, 0]))
        if rows.size == 0:
            return best
        offsets = np.arange(width, dtype=np.int64)
        window = self._codes[
            np.minimum(self._starts[rows, np.newaxis] + offsets, self._codes.size - 1)
        ]
        equal = window[np.newaxis, :, :] == wanted[:, np.newaxis, :]
        closed = np.concatenate(
            (equal, np.zeros((len(tokens), rows.size, 1), dtype=np.bool_)), axis=2
        )
        length = np.minimum(closed.argmin(axis=2), lengths[:, np.newaxis])
        pages = self._page_of_start[rows]
        first = np.concatenate(([0], np.flatnonzero(pages[1:] != pages[:-1]) + 1))
        best[:, pages[first]] = np.maximum.reduceat(length, first, axis=1)
        return best

    def plan_many(self, texts: Sequence[str]) -> list[QueryPlan]:
        """:meth:`plan` of many texts, matching all their tokens in one pass.

        A page matches ``text[:L]`` iff every complete token before the one being typed
        matches fully and the partial one matches as far as typed; so its depth is the
        offset of its first token that does not match fully plus how much of it does.
        """
        cleaned = [t.lower().strip() for t in texts]
        split = [t.split() for t in cleaned]
        matched = self.tokens_match_length([token for tokens in split for token in tokens])
        plans = []
        row = 0
        for text, tokens in zip(cleaned, split, strict=True):
            depth = np.full(self.page_count, len(text), dtype=np.int64)
            alive = np.ones(self.page_count, dtype=np.bool_)
            offset = 0
            for token in tokens:
                offset = text.index(token, offset)
                failing = alive & (matched[row] < len(token))
                depth[failing] = offset + matched[row][failing]
                alive &= ~failing
                offset += len(token)
                row += 1
            candidates = np.flatnonzero(depth >= 1).astype(np.int64)
            plans.append(QueryPlan(text=text, candidates=candidates, depth=depth[candidates]))
        return plans


@dataclass(frozen=True, slots=True, eq=False)
class QueryBatch:
    """Many planned queries, concatenated: query ``q`` owns elements
    ``offsets[q]:offsets[q + 1]`` of ``page``, ``depth`` and ``preference`` (the person's
    noisy preference for that candidate). ``slots[q]`` rows are shown."""

    offsets: IntArray
    page: IntArray
    depth: IntArray
    preference: FloatArray
    text_length: IntArray
    slots: IntArray

    def __len__(self) -> int:
        return int(self.text_length.shape[0])

    @classmethod
    def of(
        cls,
        plans: Sequence[QueryPlan],
        preferences: Sequence[FloatArray],
        slots: Sequence[int] | IntArray,
        page_offsets: Sequence[int] | IntArray | None = None,
    ) -> QueryBatch:
        """Concatenate plans; ``preferences[q]`` is aligned with ``plans[q].candidates``;
        ``page_offsets[q]`` is added to the page indices (histories stacked in one batch)."""
        if not plans:
            raise ValueError("no queries")
        if any(p.candidates.size == 0 for p in plans):
            raise ValueError("a query matches no page at its first character")
        sizes = np.array([p.candidates.size for p in plans], dtype=np.int64)
        shift = (
            np.zeros(len(plans), dtype=np.int64)
            if page_offsets is None
            else np.asarray(page_offsets, dtype=np.int64)
        )
        return cls(
            offsets=np.concatenate(([0], np.cumsum(sizes))).astype(np.int64),
            page=np.concatenate([p.candidates for p in plans]) + np.repeat(shift, sizes),
            depth=np.concatenate([p.depth for p in plans]),
            preference=np.concatenate([np.asarray(x, dtype=np.float64) for x in preferences]),
            text_length=np.array([len(p.text) for p in plans], dtype=np.int64),
            slots=np.asarray(slots, dtype=np.int64),
        )


@dataclass(frozen=True, slots=True, eq=False)
class TypingOutcome:
    """What typing each query produced: ``shown`` pages padded with -1 to ``(Q, K)``,
    ``selected`` the position in ``shown``, ``chars_typed`` the prefix length selected at,
    ``found`` whether the most preferred match was shown before the text ran out."""

    shown: IntArray
    shown_count: IntArray
    selected: IntArray
    chars_typed: IntArray
    found: BoolArray

    def interactions(self, texts: Sequence[str]) -> list[Interaction]:
        """As :class:`Interaction` records (``texts`` are the queries' full texts)."""
        return [
            Interaction(
                prefix=texts[q][: int(self.chars_typed[q])],
                shown=tuple(int(p) for p in self.shown[q, : int(self.shown_count[q])]),
                selected=int(self.selected[q]),
                chars_typed=int(self.chars_typed[q]),
            )
            for q in range(self.shown.shape[0])
        ]


def _segment_first(segment: IntArray, flags: BoolArray, count: int) -> IntArray:
    """Index of the first flagged element of each segment (-1 if none); ``segment`` sorted."""
    first = np.full(count, -1, dtype=np.int64)
    where = np.flatnonzero(flags)
    segments, index = np.unique(segment[where], return_index=True)
    first[segments] = where[index]
    return first


def type_queries(batch: QueryBatch, scores: FloatArray) -> TypingOutcome:
    """Type every query under the model scores ``scores`` (one per element of
    ``batch.page``, i.e. already gathered for each query's pages and model version).

    Only the prefixes where some candidate stops matching can change what is shown, so
    those (and the first character) are the ones examined.
    """
    count = len(batch)
    sizes = np.diff(batch.offsets)
    element_query = np.repeat(np.arange(count, dtype=np.int64), sizes)
    scores = np.asarray(scores, dtype=np.float64)

    # Position of every candidate in its query's ranking (score desc, then page index).
    order = np.lexsort((batch.page, -scores, element_query))
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size) - batch.offsets[element_query[order]]

    # Prefix lengths to examine: 1, and one past each candidate's depth (within the text).
    grows = batch.depth + 1 <= batch.text_length[element_query]
    step_query = np.concatenate((np.arange(count, dtype=np.int64), element_query[grows]))
    step_length = np.concatenate((np.ones(count, dtype=np.int64), batch.depth[grows] + 1))
    key = np.unique(step_query * (int(batch.text_length.max()) + 2) + step_length)
    step_query = key // (int(batch.text_length.max()) + 2)
    step_length = key % (int(batch.text_length.max()) + 2)

    # Every (step, candidate of its query) pair.
    step_sizes = sizes[step_query]
    step_offsets = np.concatenate(([0], np.cumsum(step_sizes)))
    pair_step = np.repeat(np.arange(step_query.size, dtype=np.int64), step_sizes)
    pair_element = batch.offsets[step_query][pair_step] + (
        np.arange(pair_step.size, dtype=np.int64) - step_offsets[pair_step]
    )
    matching = batch.depth[pair_element] >= step_length[pair_step]
    wanted = np.where(matching, batch.preference[pair_element], -np.inf)
    best_value = np.maximum.reduceat(wanted, step_offsets[:-1])
    is_best = matching & (wanted == best_value[pair_step])
    best_element = np.zeros(step_query.size, dtype=np.int64)
    best_element[pair_step[is_best]] = pair_element[is_best]
    above = matching & (rank[pair_element] < rank[best_element][pair_step])
    ranked_above = np.add.reduceat(above.astype(np.int64), step_offsets[:-1])
    shown_then = (ranked_above < batch.slots[step_query]) & (best_value > -np.inf)

    first_found = _segment_first(step_query, shown_then, count)
    found = first_found >= 0
    chars = np.where(found, step_length[np.maximum(first_found, 0)], batch.text_length)
    chars = np.minimum(chars, batch.text_length)

    # What is shown at the chosen prefix: the first ``slots`` matches in ranking order.
    ordered_query = element_query[order]
    still = batch.depth[order] >= chars[ordered_query]
    running: IntArray = np.cumsum(still, dtype=np.int64)
    before_query = np.concatenate(([0], running))[batch.offsets[:-1]]
    kept: IntArray = running - before_query[ordered_query]
    visible = still & (kept <= batch.slots[ordered_query])
    width = int(max(1, batch.slots.max()))
    shown = np.full((count, width), -1, dtype=np.int64)
    shown[ordered_query[visible], kept[visible] - 1] = batch.page[order][visible]
    shown_count = np.bincount(ordered_query[visible], minlength=count).astype(np.int64)

    # The selection: the most preferred match if shown, else the most preferred shown.
    preference_shown = np.full((count, width), -np.inf)
    preference_shown[ordered_query[visible], kept[visible] - 1] = batch.preference[order][visible]
    fallback = preference_shown.argmax(axis=1)
    best_page = batch.page[best_element[np.maximum(first_found, 0)]]
    found_position = (shown == best_page[:, np.newaxis]).argmax(axis=1)
    selected = np.where(found, found_position, fallback).astype(np.int64)
    return TypingOutcome(
        shown=shown,
        shown_count=shown_count,
        selected=selected,
        chars_typed=chars.astype(np.int64),
        found=found,
    )


def type_query(
    plan: QueryPlan, preference: FloatArray, scores: FloatArray, slots: int = MAX_RICH_RESULTS
) -> Interaction:
    """One person typing ``plan.text``: ``preference`` is aligned with
    ``plan.candidates``; ``scores`` is the model's score of every page of the history."""
    batch = QueryBatch.of([plan], [preference], [slots])
    outcome = type_queries(batch, np.asarray(scores, dtype=np.float64)[batch.page])
    return outcome.interactions([plan.text])[0]
