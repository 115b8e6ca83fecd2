"""The simulated world of the paper's simulation (section 5.1; the 2018 notebook): the
population, the held-out set and what happens in a round before the votes are summed
(steps 1 and 2 of :mod:`simulation.rounds`).

Split out of ``simulation/rounds.py`` so that the same world, drawn from the same seed
in the same order, feeds both the in-process loop (:func:`simulation.rounds.run_simulation`)
and the run over the broker (:mod:`simulation.broker_round`), where real participant
sessions read their interactions from it.

Order of draws from the one seeded generator: population, held-out set, then per round
the interaction counts, the queries, the sample. Secure aggregation's dropouts come from
their own generator (:mod:`simulation.secure`), so they change nothing here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from aggregator.optimizer import OptimizerState, initial_state
from frecency.history import Interaction
from frecency.learning import epsilons, grouped_gradients, perturbed_weights, vote
from frecency.model import FrecencyModel
from frecency.registry import get_model
from frecency.synthetic import Population, draw_population
from frecency.urlbar import type_queries
from simulation.evaluation import (
    HeldOut,
    Metrics,
    draw_held_out,
    evaluate_oracle,
    evaluate_weights,
)

if TYPE_CHECKING:
    from simulation.rounds import SimulationConfig

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


class _Interactions:
    """Every participant's interactions, kept until it contributes them."""

    def __init__(self) -> None:
        self._owner: list[IntArray] = []
        self._shown: list[NDArray[np.int32]] = []
        self._selected: list[IntArray] = []
        self._chars: list[IntArray] = []
        self._round: list[int] = []

    def add(
        self,
        round_index: int,
        owner: IntArray,
        shown: IntArray,
        selected: IntArray,
        chars_typed: IntArray,
    ) -> None:
        self._owner.append(owner)
        self._shown.append(shown.astype(np.int32))
        self._selected.append(selected)
        self._chars.append(np.asarray(chars_typed, dtype=np.int64))
        self._round.append(round_index)

    def since(self, sampled: IntArray, last: IntArray) -> RoundInteractions:
        """Interactions of the ``sampled`` participants newer than their ``last``
        contribution."""
        chosen = np.zeros(last.shape[0], dtype=np.bool_)
        chosen[sampled] = True
        owners, shown, selected, chars = [], [], [], []
        for round_index, owner, rows, picks, typed in zip(
            self._round, self._owner, self._shown, self._selected, self._chars, strict=True
        ):
            keep = chosen[owner] & (last[owner] < round_index)
            owners.append(owner[keep])
            shown.append(rows[keep])
            selected.append(picks[keep])
            chars.append(typed[keep])
        return RoundInteractions(
            owner=np.concatenate(owners),
            shown=np.concatenate(shown).astype(np.int64),
            selected=np.concatenate(selected),
            chars_typed=np.concatenate(chars),
        )


@dataclass(frozen=True, slots=True, eq=False)
class RoundInteractions:
    """Interactions as arrays: ``shown`` (population page indices, padded with -1),
    ``selected`` position in ``shown``, characters typed, and whose they are."""

    owner: IntArray
    shown: IntArray
    selected: IntArray
    chars_typed: IntArray


@dataclass(frozen=True, slots=True, eq=False)
class RoundSample:
    """Round ``round_index`` (0-based): who was sampled (ascending) and their
    interactions since their last contribution."""

    round_index: int
    sampled: IntArray
    interactions: RoundInteractions


def participant_votes(
    model: FrecencyModel,
    population: Population,
    weights: FloatArray,
    owner: IntArray,
    shown: IntArray,
    selected: IntArray,
    margin: float,
    epsilon: float,
    chunk: int,
    relative: bool = False,
) -> tuple[IntArray, IntArray]:
    """Each owner's vote over its interactions (shown pages are population pages):
    returns (owners in ascending order, votes ``(n, d)``)."""
    people, group = np.unique(owner, return_inverse=True)
    steps = epsilons(model.spec, epsilon)
    stacked = perturbed_weights(weights, steps)
    votes = np.zeros((people.size, model.spec.dimension), dtype=np.int64)
    for begin in range(0, people.size, chunk):
        rows = (group >= begin) & (group < begin + chunk)
        part = shown[rows]
        pages = np.unique(part[part >= 0])
        local = np.where(part >= 0, np.searchsorted(pages, np.maximum(part, 0)), -1)
        scores = model.score(population.batch.take(pages), stacked)
        gradient, _ = grouped_gradients(
            scores,
            local,
            selected[rows],
            group[rows] - begin,
            min(chunk, people.size - begin),
            steps,
            margin,
            relative,
        )
        votes[begin : begin + gradient.shape[0]] = vote(gradient)
    return people, votes


class World:
    """Population, held-out set and the per-round draws of one seeded run."""

    def __init__(self, config: SimulationConfig) -> None:
        self.config = config
        self.model = get_model(config.model)
        self.spec = self.model.spec
        self.rng = np.random.default_rng(config.seed)
        self.population = draw_population(
            self.rng, config.population, self.model, config.preference, config.participants
        )
        self.held_out: HeldOut = draw_held_out(
            self.rng,
            config.population,
            self.model,
            config.preference,
            config.held_out_people,
            config.held_out_queries_per_person,
        )
        self.rprop = config.rprop()
        self._store = _Interactions()
        #: Round index of every participant's last contribution (-1: never).
        self.last = np.full(config.participants, -1, dtype=np.int64)

    def initial_state(self) -> OptimizerState:
        return initial_state(self.spec, self.rprop)

    def evaluate(self, weights: tuple[float, ...] | FloatArray) -> Metrics:
        return evaluate_weights(self.held_out, np.asarray(weights), self.config.margin)

    def oracle(self) -> Metrics:
        return evaluate_oracle(self.held_out, self.config.margin)

    def begin_round(self, round_index: int, weights: FloatArray) -> RoundSample:
        """Step 1 (everyone searches under ``weights``) and the sample of step 2."""
        config = self.config
        everyone = np.arange(config.participants, dtype=np.int64)
        counts = (self.rng.exponential(config.interactions_scale, config.participants)).astype(
            np.int64
        ) + 1
        owners = np.repeat(everyone, counts)
        queries = self.population.draw_queries(self.rng, config.population, owners)
        scores = self.model.score(self.population.batch, weights[np.newaxis, :])[0]
        outcome = type_queries(queries, scores[queries.page])
        self._store.add(round_index, owners, outcome.shown, outcome.selected, outcome.chars_typed)
        sampled = np.sort(self.rng.choice(config.participants, config.per_round, replace=False))
        return RoundSample(round_index, sampled, self._store.since(sampled, self.last))

    def votes(self, sample: RoundSample, weights: FloatArray) -> tuple[IntArray, IntArray]:
        """Every sampled participant's vote: (voters ascending, votes ``(n, d)``)."""
        config = self.config
        found = sample.interactions
        return participant_votes(
            self.model,
            self.population,
            weights,
            found.owner,
            found.shown,
            found.selected,
            config.margin,
            config.epsilon,
            config.gradient_chunk,
            config.loss == "relative",
        )

    def contributed(self, people: IntArray | int, round_index: int) -> None:
        self.last[people] = round_index

    def person_interactions(self, sample: RoundSample) -> dict[int, tuple[Interaction, ...]]:
        """The sample's interactions per participant as :class:`Interaction` records
        whose ``shown`` index the participant's own pages (:meth:`person_pages`); the
        prefix text is not kept (nothing downstream reads it)."""
        found = sample.interactions
        offsets = self.population.offsets
        grouped: dict[int, list[Interaction]] = {}
        for row in range(found.owner.size):
            person = int(found.owner[row])
            shown = found.shown[row]
            local = tuple(int(p) - int(offsets[person]) for p in shown[shown >= 0])
            grouped.setdefault(person, []).append(
                Interaction(
                    prefix="",
                    shown=local,
                    selected=int(found.selected[row]),
                    chars_typed=int(found.chars_typed[row]),
                )
            )
        return {person: tuple(rows) for person, rows in grouped.items()}

    def person_pages(self, person: int) -> IntArray:
        """Population page indices of ``person``'s history, in order."""
        offsets = self.population.offsets
        return np.arange(int(offsets[person]), int(offsets[person + 1]), dtype=np.int64)
