"""The rounds of the paper's simulation (section 5.1; the 2018 notebook: 5000 clients,
400 a round, 48 rounds), with the participant's signal of DESIGN.md section 3 and the
aggregator's step of section 4.

Every round:

1. every participant uses the URL bar ``int(Exponential(0.8)) + 1`` times under the model
   in force (what is shown depends on it; :mod:`frecency.urlbar`);
2. ``per_round`` participants are sampled; each computes the central-difference gradient
   of the SVM loss of all its interactions since its last contribution under the current
   model, and votes ``-sign`` of it (:mod:`frecency.learning`);
3. the votes are summed (:class:`simulation.aggregation.VoteAggregation`: the plain sum
   by default, or :class:`simulation.secure.SecureSum`, whose round may abort below its
   threshold, leaving the model unchanged) and ``aggregator.optimizer.apply_votes`` steps
   the model over the votes in the total (bounded Rprop, safeguards, poisoning bound);
4. the new model is evaluated on the held-out set (:mod:`simulation.evaluation`).

Steps 1-2 and the held-out set live in :mod:`simulation.world`. The model starts from the
spec defaults. Everything is drawn from one ``seed``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from aggregator.optimizer import OptimizerState, RpropConfig, StepApplied, apply_votes
from frecency.learning import DEFAULT_EPSILON, DEFAULT_MARGIN
from frecency.synthetic import PopulationConfig, Preference
from simulation.aggregation import AggregationAborted, PlainSum, VoteAggregation
from simulation.evaluation import Metrics
from simulation.world import World

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
OptimizerName = Literal["relative", "deployed"]
LossName = Literal["svm", "relative"]
RoundOutcome = Literal["completed", "aborted"]


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
    #: ``"completed"``: the model stepped; ``"aborted"``: secure aggregation gave up
    #: (below threshold) or the step was rejected, and the model is unchanged.
    outcome: RoundOutcome = "completed"
    #: Voters whose votes are in the total (secure aggregation: masked input arrived).
    survivors: int | None = None
    abort_reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "round": self.round,
            **self.metrics.as_dict(),
            "weights": [int(w) if float(w).is_integer() else w for w in self.weights],
            "voters": self.voters,
            "interactions": self.interactions,
            "direction": list(self.direction),
            "rejected": self.rejected,
            "outcome": self.outcome,
            "survivors": self.voters if self.survivors is None else self.survivors,
            "abort_reason": self.abort_reason,
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


def run_simulation(
    config: SimulationConfig,
    aggregation: VoteAggregation | None = None,
    progress: Callable[[RoundResult], None] | None = None,
    on_setup: Callable[[Metrics, Metrics], None] | None = None,
) -> SimulationResult:
    """Run the simulation; ``progress`` is called after every round."""
    summing = aggregation if aggregation is not None else PlainSum()
    world = World(config)
    spec = world.spec
    state: OptimizerState = world.initial_state()
    baseline = world.evaluate(state.weights)
    oracle = world.oracle()
    if on_setup is not None:
        on_setup(baseline, oracle)

    results: list[RoundResult] = []
    for round_index in range(config.rounds):
        weights = np.asarray(state.weights, dtype=np.float64)
        # 1. Everyone searches under the model in force; 2. a sample votes on
        # everything since its last contribution.
        sample = world.begin_round(round_index, weights)
        voters, votes = world.votes(sample, weights)
        world.contributed(sample.sampled, round_index)

        # 3. Sum (a secure aggregation may abort: the model stays) and step.
        summed = summing.run_round(list(votes), round_index + 1)
        direction: tuple[int, ...] = (0,) * spec.dimension
        rejected = abort_reason = None
        if isinstance(summed, AggregationAborted):
            survivors, abort_reason = 0, summed.reason
        else:
            survivors = len(summed.included)
            step = apply_votes(spec, world.rprop, state, summed.total, survivors)
            if isinstance(step, StepApplied):
                state = step.state
                direction = step.direction
            else:
                rejected = step.reason
                abort_reason = f"step rejected: {step.reason}"

        # 4. Held-out evaluation of the new model.
        result = RoundResult(
            round=round_index + 1,
            metrics=world.evaluate(state.weights),
            weights=state.weights,
            voters=int(voters.size),
            interactions=int(sample.interactions.owner.size),
            direction=direction,
            rejected=rejected,
            outcome="completed" if abort_reason is None else "aborted",
            survivors=survivors,
            abort_reason=abort_reason,
        )
        results.append(result)
        if progress is not None:
            progress(result)
    return SimulationResult(
        config=config, names=spec.names, baseline=baseline, oracle=oracle, rounds=tuple(results)
    )
