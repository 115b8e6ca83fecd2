"""Bounded Rprop on the vote-sum direction: paper section 4.3 ("Rprop") with the
safeguards of section 4.6, DESIGN.md section 4, protocol step 7 ("Step and publish").

Pure, no I/O. The secure sum gives the vote total ``v`` (each participant's vote is the
sign of its descent direction, so ``v_k > 0`` means "increase weight k"); the direction is
``sign(v)``, optionally zeroed where fewer than ``min_agreement * voters`` more voters
agree than disagree. Each weight keeps its own Rprop step: times ``increase`` when the
direction repeats, times ``decrease`` when it flips, unchanged when either direction is 0,
clipped to ``[min_step, max_step]``. Two ways to read a step (``RpropConfig.mode``):

* ``"deployed"`` — the 2018 server (telemetry-streaming ``FederatedLearningRPropOptimizer``):
  the step is in the weight's own units; start 2, x2.0, x0.6, clipped to [1, 3].
* ``"relative"`` (the default) — the step is a log-space step: a weight moves by the factor
  ``exp(+-step)``, at least ``floor_units`` (>= 1 unit for integer prefs) so weights at 0
  can move. Frecency is a product of a bucket weight and a bonus, so a cap of ``max_step``
  in log space bounds every page's score change per round by the factor
  ``exp(2 max_step)`` (docs/optimizer.md explains the choice and the cutoffs).

Either way :func:`aggregator.safeguards.project` then keeps the spec's bounds, orders and
integrality without moving any weight more than its per-round maximum, and a vote total
outside ``[-n, n]`` aborts the step (poisoning bound) with the model unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from aggregator.safeguards import project, violations, vote_total_problem
from frecency.spec import ModelSpec

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
Mode = Literal["relative", "deployed"]


@dataclass(frozen=True, slots=True)
class RpropConfig:
    """Rprop hyperparameters. Steps are in weight units (``deployed``) or in natural-log
    units of the weight (``relative``: 0.1 means a factor e^0.1 ≈ 1.105 per round)."""

    mode: Mode
    initial_step: float
    increase: float = 2.0
    decrease: float = 0.6
    min_step: float = 1.0
    max_step: float = 3.0
    #: relative mode: the least absolute move in weight units (integer prefs: at least 1)
    floor_units: float = 1.0
    #: direction is 0 where |v_k| / voters is below this (0.0: plain sign, as deployed)
    min_agreement: float = 0.0
    #: poisoning bound widened to [-(n + slack), n + slack] when the sum carries central-DP
    #: noise (set it to a high-probability bound of that noise); 0: the exact bound
    noise_slack: int = 0

    def __post_init__(self) -> None:
        if self.mode not in ("relative", "deployed"):
            raise ValueError(f"mode must be 'relative' or 'deployed', got {self.mode!r}")
        if not 0 < self.min_step <= self.initial_step <= self.max_step < math.inf:
            raise ValueError("need 0 < min_step <= initial_step <= max_step < inf")
        if not self.increase >= 1.0 or not 0.0 < self.decrease <= 1.0:
            raise ValueError("need increase >= 1 and 0 < decrease <= 1")
        if not 0.0 <= self.floor_units < math.inf:
            raise ValueError("floor_units must be finite and >= 0")
        if not 0.0 <= self.min_agreement <= 1.0:
            raise ValueError("min_agreement must be in [0, 1]")
        if self.noise_slack < 0:
            raise ValueError("noise_slack must be >= 0")

    @classmethod
    def deployed(cls) -> RpropConfig:
        """The 2018 study's server: step 2, x2.0 on repeat, x0.6 on flip, in [1, 3] units,
        integer weights."""
        return cls(mode="deployed", initial_step=2.0, min_step=1.0, max_step=3.0)

    @classmethod
    def default(cls) -> RpropConfig:
        """The relative bound: log-space steps from 0.05 up to 0.1 (a weight changes by at
        most ~10.5 % a round, every page score by at most ~22 %), floor 1 unit, and a
        weight moves only when the net vote is at least 10 % of the voters (stops the
        1-unit limit cycles of small integer weights; docs/optimizer.md)."""
        return cls(
            mode="relative",
            initial_step=0.05,
            min_step=0.005,
            max_step=0.1,
            floor_units=1.0,
            min_agreement=0.1,
        )


@dataclass(frozen=True, slots=True)
class OptimizerState:
    """What the optimizer carries from round to round (persisted by aggregator/state.py)."""

    weights: tuple[float, ...]
    steps: tuple[float, ...]
    last_direction: tuple[int, ...]
    round: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; integral weights are written as ints."""
        return {
            "weights": [int(w) if float(w).is_integer() else float(w) for w in self.weights],
            "steps": [float(s) for s in self.steps],
            "last_direction": [int(d) for d in self.last_direction],
            "round": int(self.round),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OptimizerState:
        """Inverse of :meth:`to_dict`; ``ValueError`` on any malformed field."""
        expected = {"weights", "steps", "last_direction", "round"}
        if set(data) != expected:
            raise ValueError(f"optimizer state needs exactly the keys {sorted(expected)}")
        weights = _float_tuple(data["weights"], "weights")
        steps = _float_tuple(data["steps"], "steps")
        raw_direction = data["last_direction"]
        if not isinstance(raw_direction, list | tuple) or not all(
            type(d) is int and d in (-1, 0, 1) for d in raw_direction
        ):
            raise ValueError("last_direction must be a list of -1, 0, +1")
        rounds = data["round"]
        if type(rounds) is not int or rounds < 0:
            raise ValueError("round must be a nonnegative integer")
        if not len(weights) == len(steps) == len(raw_direction):
            raise ValueError("weights, steps and last_direction differ in length")
        if any(s <= 0 for s in steps):
            raise ValueError("steps must be positive")
        return cls(weights, steps, tuple(raw_direction), rounds)


@dataclass(frozen=True, slots=True)
class StepApplied:
    """A step was taken: the new state, the voted direction and the actual deltas."""

    state: OptimizerState
    direction: tuple[int, ...]
    moved: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class StepRejected:
    """The step was refused; the model and optimizer state stay as they were."""

    reason: str


def initial_state(spec: ModelSpec, config: RpropConfig) -> OptimizerState:
    """Round 0: the spec's defaults (Firefox's own weights), every step at its initial
    value, no previous direction. ``ValueError`` if the defaults break a safeguard."""
    defaults = spec.defaults()
    problems = violations(spec, defaults)
    if problems:
        raise ValueError(f"{spec.name} defaults break the safeguards: " + "; ".join(problems))
    d = spec.dimension
    return OptimizerState(
        weights=tuple(float(w) for w in defaults),
        steps=(float(config.initial_step),) * d,
        last_direction=(0,) * d,
        round=0,
    )


def max_moves(spec: ModelSpec, config: RpropConfig, weights: Sequence[float]) -> FloatArray:
    """The most each weight may move this round from ``weights``: ``max_step`` units
    (deployed), or the move of a full ``max_step`` in log space with its floor
    (relative). The safeguard projection never exceeds it."""
    w = np.asarray(weights, dtype=np.float64)
    if config.mode == "deployed":
        return np.full(spec.dimension, config.max_step, dtype=np.float64)
    return _relative_moves(spec, config, w, np.full(spec.dimension, config.max_step), up=True)


def directions(
    config: RpropConfig, vote_total: Sequence[int] | IntArray, voters: int
) -> tuple[int, ...]:
    """sign(v_k), or 0 where |v_k| / voters < ``config.min_agreement``."""
    totals = np.asarray(vote_total, dtype=np.float64)
    agreed = np.abs(totals) >= config.min_agreement * voters
    return tuple(int(s) for s in np.where(agreed, np.sign(totals), 0.0))


def apply_votes(
    spec: ModelSpec,
    config: RpropConfig,
    state: OptimizerState,
    vote_total: Sequence[int] | IntArray,
    voters: int,
) -> StepApplied | StepRejected:
    """One Rprop step on the vote total of ``voters`` participants, under the safeguards.

    Rejected (state unchanged) if the votes break the poisoning bound, if the state does not
    fit the spec, or if the current weights already break a safeguard.
    """
    problem = vote_total_problem(spec, vote_total, voters, config.noise_slack)
    if problem is not None:
        return StepRejected(problem)
    d = spec.dimension
    if not len(state.weights) == len(state.steps) == len(state.last_direction) == d:
        return StepRejected(f"optimizer state does not have {d} weights for spec {spec.name}")
    problems = violations(spec, state.weights)
    if problems:
        return StepRejected("current weights break the safeguards: " + "; ".join(problems))

    direction = np.asarray(directions(config, vote_total, voters), dtype=np.float64)
    previous = np.asarray(state.last_direction, dtype=np.float64)
    steps = np.asarray(state.steps, dtype=np.float64)
    agreement = direction * previous
    steps = np.where(agreement > 0, steps * config.increase, steps)
    steps = np.where(agreement < 0, steps * config.decrease, steps)
    steps = np.clip(steps, config.min_step, config.max_step)

    weights = np.asarray(state.weights, dtype=np.float64)
    if config.mode == "deployed":
        proposed = weights + steps * direction
    else:
        up = _relative_moves(spec, config, weights, steps, up=True)
        down = _relative_moves(spec, config, weights, steps, up=False)
        proposed = weights + np.where(direction > 0, up, 0.0) - np.where(direction < 0, down, 0.0)
    new_weights = project(spec, proposed, weights, max_moves(spec, config, state.weights))

    new_state = OptimizerState(
        weights=tuple(float(w) for w in new_weights),
        steps=tuple(float(s) for s in steps),
        last_direction=tuple(int(s) for s in direction),
        round=state.round + 1,
    )
    return StepApplied(
        state=new_state,
        direction=new_state.last_direction,
        moved=tuple(float(n - o) for n, o in zip(new_weights, weights, strict=True)),
    )


def _relative_moves(
    spec: ModelSpec, config: RpropConfig, weights: FloatArray, steps: FloatArray, *, up: bool
) -> FloatArray:
    """Absolute size of a log-space step ``steps`` up (``w (e^s - 1)``) or down
    (``w (1 - e^-s)``), at least the floor (``floor_units``, and 1 for integer prefs)."""
    scale = np.abs(weights)
    move = scale * (np.expm1(steps) if up else -np.expm1(-steps))
    floor = np.where(spec.integer_mask(), max(config.floor_units, 1.0), config.floor_units)
    return np.asarray(np.maximum(move, floor), dtype=np.float64)


def _float_tuple(raw: object, name: str) -> tuple[float, ...]:
    if not isinstance(raw, list | tuple) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in raw
    ):
        raise ValueError(f"{name} must be a list of finite numbers")
    return tuple(float(v) for v in raw)
