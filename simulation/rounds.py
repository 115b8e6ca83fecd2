"""The rounds of the paper's simulation (section 5.1; the 2018 notebook: 5000 clients,
400 a round, 48 rounds), with the participant's signal of DESIGN.md section 3 and the
aggregator's step of section 4.

Every round:

1. every participant uses the URL bar ``int(Exponential(0.8)) + 1`` times under the model
   in force (what is shown depends on it; :mod:`frecency.urlbar`);
2. ``per_round`` participants are sampled; each computes the central-difference gradient
   of the SVM loss of all its interactions since its last contribution under the current
   model, and votes ``-sign`` of it (:mod:`frecency.learning`);
3. the votes are summed (:class:`simulation.aggregation.VoteAggregation`, the plain sum
   by default) and ``aggregator.optimizer.apply_votes`` steps the model (bounded Rprop,
   safeguards, poisoning bound);
4. the new model is evaluated on the held-out set (:mod:`simulation.evaluation`).

The model starts from the spec defaults. Everything is drawn from one ``seed``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from aggregator.optimizer import (
    OptimizerState,
    RpropConfig,
    StepApplied,
    apply_votes,
    initial_state,
)
from frecency.learning import (
    DEFAULT_EPSILON,
    DEFAULT_MARGIN,
    epsilons,
    grouped_gradients,
    perturbed_weights,
    vote,
)
from frecency.model import FrecencyModel
from frecency.registry import get_model
from frecency.synthetic import (
    Population,
    PopulationConfig,
    Preference,
    draw_population,
)
from frecency.urlbar import type_queries
from simulation.aggregation import PlainSum, VoteAggregation
from simulation.evaluation import (
    HeldOut,
    Metrics,
    draw_held_out,
    evaluate_oracle,
    evaluate_weights,
)

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
OptimizerName = Literal["relative", "deployed"]
LossName = Literal["svm", "relative"]


@dataclass(frozen=True, slots=True)
class SimulationConfig:
    """One run of ``fedrank simulate`` (defaults: the paper's notebook)."""

    participants: int = 5000
    per_round: int = 400
    rounds: int = 48
    seed: int = 0
    preference: Preference = "paper"
    model: str = "firefox-2018"
    optimizer: OptimizerName = "relative"
    #: The optimizer's dead band: a weight moves only where |vote total| / voters >= this
    #: (RpropConfig.min_agreement; 0.1 here, see docs/simulation.md "Results").
    min_agreement: float = 0.1
    margin: float = DEFAULT_MARGIN
    #: ``"svm"``: the shipped loss; ``"relative"``: scores divided by the selected one's
    #: (invariant to the model's overall scale; see frecency.learning.ranking_losses).
    loss: LossName = "relative"
    epsilon: float = DEFAULT_EPSILON
    #: ``int(Exponential(scale)) + 1`` interactions per participant and round.
    interactions_scale: float = 0.8
    held_out_people: int = 300
    held_out_queries_per_person: int = 6
    #: Participants whose gradients are computed in one ``model.score`` call.
    gradient_chunk: int = 50
    population: PopulationConfig = field(default_factory=PopulationConfig)

    def __post_init__(self) -> None:
        if not 1 <= self.per_round <= self.participants:
            raise ValueError("need 1 <= per_round <= participants")
        if self.rounds < 0 or self.held_out_people < 1 or self.held_out_queries_per_person < 1:
            raise ValueError("rounds >= 0, held-out people and queries >= 1")
        if self.optimizer not in ("relative", "deployed"):
            raise ValueError(f"unknown optimizer {self.optimizer!r}")
        if self.loss not in ("svm", "relative"):
            raise ValueError(f"unknown loss {self.loss!r}")

    def rprop(self) -> RpropConfig:
        base = RpropConfig.deployed() if self.optimizer == "deployed" else RpropConfig.default()
        return dataclasses.replace(base, min_agreement=self.min_agreement)

    def as_dict(self) -> dict[str, Any]:
        return {
            "participants": self.participants,
            "per_round": self.per_round,
            "rounds": self.rounds,
            "seed": self.seed,
            "preference": self.preference,
            "model": self.model,
            "optimizer": self.optimizer,
            "min_agreement": self.min_agreement,
            "margin": self.margin,
            "loss": self.loss,
            "epsilon": self.epsilon,
            "interactions_scale": self.interactions_scale,
            "held_out_people": self.held_out_people,
            "held_out_queries_per_person": self.held_out_queries_per_person,
        }


@dataclass(frozen=True, slots=True)
class RoundResult:
    """The model after one round and its held-out metrics."""

    round: int
    metrics: Metrics
    weights: tuple[float, ...]
    voters: int
    interactions: int
    direction: tuple[int, ...]
    rejected: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "round": self.round,
            **self.metrics.as_dict(),
            "weights": [int(w) if float(w).is_integer() else w for w in self.weights],
            "voters": self.voters,
            "interactions": self.interactions,
            "direction": list(self.direction),
            "rejected": self.rejected,
        }


@dataclass(frozen=True, slots=True)
class SimulationResult:
    config: SimulationConfig
    names: tuple[str, ...]
    baseline: Metrics
    oracle: Metrics
    rounds: tuple[RoundResult, ...]

    @property
    def final(self) -> RoundResult | None:
        return self.rounds[-1] if self.rounds else None

    def as_dict(self) -> dict[str, Any]:
        final = self.final
        return {
            "config": self.config.as_dict(),
            "weight_names": list(self.names),
            "baseline": self.baseline.as_dict(),
            "oracle": self.oracle.as_dict(),
            "rounds": [r.as_dict() for r in self.rounds],
            "final": None if final is None else final.as_dict(),
        }


class _Interactions:
    """Every participant's interactions, kept until it contributes them."""

    def __init__(self) -> None:
        self._owner: list[IntArray] = []
        self._shown: list[NDArray[np.int32]] = []
        self._selected: list[IntArray] = []
        self._round: list[int] = []

    def add(self, round_index: int, owner: IntArray, shown: IntArray, selected: IntArray) -> None:
        self._owner.append(owner)
        self._shown.append(shown.astype(np.int32))
        self._selected.append(selected)
        self._round.append(round_index)

    def since(self, sampled: IntArray, last: IntArray) -> tuple[IntArray, IntArray, IntArray]:
        """Interactions of the ``sampled`` participants newer than their ``last``
        contribution: (owner, shown, selected)."""
        chosen = np.zeros(last.shape[0], dtype=np.bool_)
        chosen[sampled] = True
        owners, shown, selected = [], [], []
        for round_index, owner, rows, picks in zip(
            self._round, self._owner, self._shown, self._selected, strict=True
        ):
            keep = chosen[owner] & (last[owner] < round_index)
            owners.append(owner[keep])
            shown.append(rows[keep])
            selected.append(picks[keep])
        return (
            np.concatenate(owners),
            np.concatenate(shown).astype(np.int64),
            np.concatenate(selected),
        )


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


def run_simulation(
    config: SimulationConfig,
    aggregation: VoteAggregation | None = None,
    progress: Callable[[RoundResult], None] | None = None,
    on_setup: Callable[[Metrics, Metrics], None] | None = None,
) -> SimulationResult:
    """Run the simulation; ``progress`` is called after every round."""
    model = get_model(config.model)
    spec = model.spec
    rng = np.random.default_rng(config.seed)
    summing = aggregation if aggregation is not None else PlainSum()
    population = draw_population(
        rng, config.population, model, config.preference, config.participants
    )
    held_out: HeldOut = draw_held_out(
        rng,
        config.population,
        model,
        config.preference,
        config.held_out_people,
        config.held_out_queries_per_person,
    )
    rprop = config.rprop()
    state: OptimizerState = initial_state(spec, rprop)
    baseline = evaluate_weights(held_out, np.asarray(state.weights), config.margin)
    oracle = evaluate_oracle(held_out, config.margin)
    if on_setup is not None:
        on_setup(baseline, oracle)

    store = _Interactions()
    last = np.full(config.participants, -1, dtype=np.int64)
    everyone = np.arange(config.participants, dtype=np.int64)
    results: list[RoundResult] = []
    for round_index in range(config.rounds):
        weights = np.asarray(state.weights, dtype=np.float64)
        # 1. Everyone searches under the model in force.
        counts = (rng.exponential(config.interactions_scale, config.participants)).astype(
            np.int64
        ) + 1
        owners = np.repeat(everyone, counts)
        queries = population.draw_queries(rng, config.population, owners)
        scores = model.score(population.batch, weights[np.newaxis, :])[0]
        outcome = type_queries(queries, scores[queries.page])
        store.add(round_index, owners, outcome.shown, outcome.selected)

        # 2. A sample votes on everything since its last contribution.
        sampled = np.sort(rng.choice(config.participants, config.per_round, replace=False))
        owner, shown, selected = store.since(sampled, last)
        voters, votes = participant_votes(
            model,
            population,
            weights,
            owner,
            shown,
            selected,
            config.margin,
            config.epsilon,
            config.gradient_chunk,
            config.loss == "relative",
        )
        last[sampled] = round_index

        # 3. Sum and step.
        total = summing.aggregate(list(votes))
        step = apply_votes(spec, rprop, state, total, int(voters.size))
        rejected = None
        direction: tuple[int, ...] = (0,) * spec.dimension
        if isinstance(step, StepApplied):
            state = step.state
            direction = step.direction
        else:
            rejected = step.reason

        # 4. Held-out evaluation of the new model.
        metrics = evaluate_weights(held_out, np.asarray(state.weights), config.margin)
        result = RoundResult(
            round=round_index + 1,
            metrics=metrics,
            weights=state.weights,
            voters=int(voters.size),
            interactions=int(owner.size),
            direction=direction,
            rejected=rejected,
        )
        results.append(result)
        if progress is not None:
            progress(result)
    return SimulationResult(
        config=config, names=spec.names, baseline=baseline, oracle=oracle, rounds=tuple(results)
    )
