"""Where a participant's URL-bar interactions come from (DESIGN.md section 3; paper
sections 3 and 5.1): a synthetic person of the simulation's population model, or a real
Firefox profile's input history.

Both are a :class:`HistorySource`: time passes in rounds (:meth:`HistorySource.observe`
is called once per round announcement, with the model then in force), and
:meth:`HistorySource.pending` returns the pages and the interactions since the last
contribution, ready for :mod:`participant.signal`.

**Synthetic** (``--synthetic SEED``): the person is drawn from ``(seed, participant id)``
and every round it sees, it uses the URL bar ``per_round`` times (default
``int(Exponential(0.8)) + 1``, the simulation's rate) under the announced model, with
randomness drawn from ``(seed, participant id, round)`` only. So anyone who knows the
seed, the id, the rounds it saw and their weights can recompute its interactions and vote
(:func:`synthetic_interactions`). The history's "now" is fixed (the simulation's
2018-07-01): ages do not advance.

**Places** (``--places FILE``): ``moz_inputhistory`` rows ``(input, url, use_count)``:
the prefix typed is ``input`` (``chars_typed = len(input)``), the suggestions are the
visible history pages matching it (``frecency.urlbar`` boundary matching; pages Firefox
hides and ``place:`` queries left out) ranked by the *current* model, top
``MAX_RICH_RESULTS``, and the page picked is ``url``. The picked page was shown (the user
clicked it), so if the model ranks it below the top rows it takes the last row. A row
counts as new while its ``use_count`` is above what was last contributed; the file is
re-read each round when it changed on disk.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from frecency.history import Interaction, Page
from frecency.model import FrecencyModel, PageBatch
from frecency.places import PlacesHistory, read_places
from frecency.synthetic import (
    PopulationConfig,
    VisitPool,
    draw_history,
    draw_slots,
    plan_queries,
    true_preference,
)
from frecency.urlbar import MAX_RICH_RESULTS, HistoryText, QueryBatch, type_queries

FloatArray = NDArray[np.float64]

#: The simulation's rate: ``int(Exponential(scale)) + 1`` interactions per round.
INTERACTIONS_SCALE = 0.8
_PERSON_STREAM = 0
_ROUND_STREAM = 1
_POOL_STREAM = 2


@dataclass(frozen=True, slots=True, eq=False)
class PendingInteractions:
    """Pages (encoded by the model) and the interactions over them since the last
    contribution; ``shown`` indexes ``batch``."""

    batch: PageBatch
    interactions: tuple[Interaction, ...]


class HistorySource(Protocol):
    """A participant's history as time passes."""

    @property
    def model(self) -> FrecencyModel: ...

    def observe(self, round_number: int, weights: FloatArray) -> None:
        """A round was announced with ``weights``: the person browses under them."""
        ...

    def has_new(self) -> bool:
        """Whether there are interactions not yet contributed."""
        ...

    def pending(self, weights: FloatArray) -> PendingInteractions:
        """The interactions not yet contributed (places: ranked under ``weights``)."""
        ...

    def mark_contributed(self) -> None:
        """What :meth:`pending` returned has been sent: it is not new any more."""
        ...


def _id_key(participant_id: str) -> int:
    return int.from_bytes(hashlib.sha256(participant_id.encode()).digest()[:8], "big")


@lru_cache(maxsize=4)
def _visit_pool(seed: int, now_us: int) -> VisitPool:
    """Visit tuples shared by every person of one seed (only ``seed`` decides them)."""
    return VisitPool(np.random.default_rng([seed, _POOL_STREAM]), now_us)


class SyntheticPerson:
    """One person of the population model, fixed by ``(seed, participant_id)``."""

    def __init__(
        self,
        seed: int,
        participant_id: str,
        model: FrecencyModel,
        per_round: int | None = None,
        config: PopulationConfig | None = None,
    ) -> None:
        if seed < 0:
            raise ValueError("the synthetic seed must be >= 0")
        if per_round is not None and per_round < 1:
            raise ValueError("interactions per round must be >= 1")
        self.seed = seed
        self.participant_id = participant_id
        self.model = model
        self.per_round = per_round
        self.config = config or PopulationConfig()
        rng = np.random.default_rng([seed, _id_key(participant_id), _PERSON_STREAM])
        history = draw_history(rng, self.config, _visit_pool(seed, self.config.now_us))
        self.pages: tuple[Page, ...] = history.pages
        self.batch = model.encode(history.pages, self.config.now_us)
        self.preference = true_preference(history, self.batch, model, "paper")
        self.catalogue = plan_queries(
            rng, self.config, history, self.preference, self.config.queries_per_person
        )

    def interactions(self, round_number: int, weights: FloatArray) -> tuple[Interaction, ...]:
        """What the person does in round ``round_number`` under ``weights`` (pure)."""
        rng = np.random.default_rng(
            [self.seed, _id_key(self.participant_id), _ROUND_STREAM, round_number]
        )
        count = self.per_round or int(rng.exponential(INTERACTIONS_SCALE)) + 1
        picks = rng.integers(0, len(self.catalogue), size=count)
        plans = [self.catalogue[int(i)] for i in picks]
        sigma = float(np.sqrt(self.config.noise_variance))
        noisy = [
            self.preference[p.candidates] + rng.normal(0.0, sigma, p.candidates.size) for p in plans
        ]
        queries = QueryBatch.of(plans, noisy, draw_slots(rng, self.config, count))
        matrix = np.asarray(weights, dtype=np.float64)[np.newaxis, :]
        scores = self.model.score(self.batch, matrix)[0]
        outcome = type_queries(queries, np.asarray(scores, dtype=np.float64)[queries.page])
        return tuple(outcome.interactions([p.text for p in plans]))


class SyntheticHistory:
    """A :class:`SyntheticPerson` as a :class:`HistorySource`: interactions accumulate
    once per round seen until contributed."""

    def __init__(self, person: SyntheticPerson) -> None:
        self.person = person
        self._seen: set[int] = set()
        self._pending: list[Interaction] = []

    @property
    def model(self) -> FrecencyModel:
        return self.person.model

    def observe(self, round_number: int, weights: FloatArray) -> None:
        if round_number in self._seen:
            return
        self._seen.add(round_number)
        self._pending.extend(self.person.interactions(round_number, weights))

    def has_new(self) -> bool:
        return bool(self._pending)

    def pending(self, weights: FloatArray) -> PendingInteractions:
        return PendingInteractions(self.person.batch, tuple(self._pending))

    def mark_contributed(self) -> None:
        self._pending.clear()


def synthetic_interactions(
    seed: int,
    participant_id: str,
    model: FrecencyModel,
    rounds: Sequence[tuple[int, FloatArray]],
    per_round: int | None = None,
) -> PendingInteractions:
    """The interactions a ``--synthetic seed`` participant accumulated over ``rounds``
    ``(round, weights announced)`` it saw since its last contribution: what it votes on."""
    person = SyntheticPerson(seed, participant_id, model, per_round)
    interactions = [i for r, w in rounds for i in person.interactions(r, w)]
    return PendingInteractions(person.batch, tuple(interactions))


# --- a real profile -----------------------------------------------------------------


def _visible(pages: Sequence[Page], hidden: frozenset[str]) -> list[int]:
    return [
        i for i, p in enumerate(pages) if p.url not in hidden and not p.url.startswith("place:")
    ]


def places_interactions(
    places: PlacesHistory,
    model: FrecencyModel,
    weights: FloatArray,
    now_us: int,
    only: Mapping[tuple[str, str], float] | None = None,
) -> PendingInteractions:
    """Interactions of ``places``' input history (see the module docstring), ranked under
    ``weights``; ``only`` limits them to the ``(input, url)`` keys it holds."""
    visible = _visible(places.pages, places.hidden_urls)
    pages = [places.pages[i] for i in visible]
    batch = model.encode(pages, now_us)
    position = {page.url: i for i, page in enumerate(pages)}
    text = HistoryText.of_pages(pages)
    scores = np.asarray(
        model.score(batch, np.asarray(weights, dtype=np.float64)[np.newaxis, :])[0],
        dtype=np.float64,
    )
    interactions = []
    for entry in places.input_history:
        if only is not None and (entry.input, entry.url) not in only:
            continue
        picked = position.get(entry.url)
        if picked is None or not entry.input.strip():
            continue
        matches = set(text.matches(entry.input).tolist()) | {picked}
        ranked = sorted(matches, key=lambda page: (-scores[page], page))
        shown = ranked[:MAX_RICH_RESULTS]
        if picked not in shown:
            shown = [*shown[: MAX_RICH_RESULTS - 1], picked]
        interactions.append(
            Interaction(
                prefix=entry.input,
                shown=tuple(shown),
                selected=shown.index(picked),
                chars_typed=len(entry.input),
            )
        )
    return PendingInteractions(batch, tuple(interactions))


class PlacesSource:
    """A Firefox ``places.sqlite`` as a :class:`HistorySource`."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        model: FrecencyModel,
        contributed: Mapping[tuple[str, str], float] | None = None,
        clock_us: Callable[[], int] = lambda: time.time_ns() // 1000,
    ) -> None:
        self.path = Path(path)
        self._model = model
        self._clock_us = clock_us
        self._contributed: dict[tuple[str, str], float] = dict(contributed or {})
        self._mtime = self.path.stat().st_mtime_ns
        self._places = read_places(self.path)
        self._offered: dict[tuple[str, str], float] = {}

    @property
    def model(self) -> FrecencyModel:
        return self._model

    @property
    def contributed(self) -> dict[tuple[str, str], float]:
        """``(input, url) -> use_count`` as of the last contribution (for persisting)."""
        return dict(self._contributed)

    def observe(self, round_number: int, weights: FloatArray) -> None:
        mtime = self.path.stat().st_mtime_ns
        if mtime != self._mtime:
            self._places = read_places(self.path)
            self._mtime = mtime

    def _new(self) -> dict[tuple[str, str], float]:
        return {
            (e.input, e.url): e.use_count
            for e in self._places.input_history
            if e.use_count > self._contributed.get((e.input, e.url), 0.0)
        }

    def has_new(self) -> bool:
        return bool(self._new())

    def pending(self, weights: FloatArray) -> PendingInteractions:
        self._offered = self._new()
        return places_interactions(
            self._places, self._model, weights, self._clock_us(), self._offered
        )

    def mark_contributed(self) -> None:
        self._contributed.update(self._offered)
        self._offered = {}
