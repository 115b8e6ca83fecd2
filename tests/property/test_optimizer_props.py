"""Properties of bounded Rprop and the safeguard projection (aggregator/optimizer.py,
aggregator/safeguards.py; paper sections 4.3 and 4.6, DESIGN.md section 4).

For random specs (random dimension, integer and real weights, bounds, disjoint increasing
and non-increasing groups, random feasible defaults) and random honest vote totals, every
step keeps every safeguard and moves no weight more than its max step; poisoned totals are
rejected; the projection is least-squares optimal on real-valued groups; state survives
JSON.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize

from aggregator.optimizer import (
    Mode,
    OptimizerState,
    RpropConfig,
    StepApplied,
    StepRejected,
    apply_votes,
    initial_state,
    max_moves,
)
from aggregator.safeguards import project, violations
from frecency.firefox2018 import SPEC as FIREFOX_2018
from frecency.firefox_current import SPEC as FIREFOX_CURRENT
from frecency.spec import ModelSpec, Param

FAST = settings(max_examples=60, deadline=None)


@dataclass(frozen=True)
class Layout:
    integer: tuple[bool, ...]
    groups: tuple[tuple[int, ...], ...]
    kinds: tuple[str, ...]  # "increasing", "non_increasing" or "free" per group


@st.composite
def layouts(draw: st.DrawFn) -> Layout:
    dimension = draw(st.integers(1, 9))
    integer = tuple(draw(st.lists(st.booleans(), min_size=dimension, max_size=dimension)))
    order = draw(st.permutations(range(dimension)))
    cuts = sorted(draw(st.sets(st.integers(1, dimension - 1), max_size=3))) if dimension > 1 else []
    bounds = [0, *cuts, dimension]
    groups = tuple(tuple(order[a:b]) for a, b in itertools.pairwise(bounds))
    kinds = tuple(draw(st.sampled_from(("increasing", "non_increasing", "free"))) for _ in groups)
    return Layout(integer, groups, kinds)


@st.composite
def specs(draw: st.DrawFn) -> ModelSpec:
    """A random spec whose defaults keep all its constraints."""
    layout = draw(layouts())
    gap = draw(st.sampled_from((0.5, 1.0, 2.0)))
    dimension = len(layout.integer)
    lower = [draw(st.sampled_from((0.0, 0.0, 1.0, 2.5))) for _ in range(dimension)]
    slack = st.floats(0.0, 300.0, allow_nan=False)
    value = [0.0] * dimension
    for group, kind in zip(layout.groups, layout.kinds, strict=True):
        walk = group if kind != "non_increasing" else tuple(reversed(group))
        previous: float | None = None
        for k in walk:
            floor = lower[k]
            if previous is not None and kind == "increasing":
                floor = max(floor, previous + gap)
            if previous is not None and kind == "non_increasing":
                floor = max(floor, previous)
            v = floor + draw(slack)
            value[k] = float(math.ceil(v)) if layout.integer[k] else v
            previous = value[k]
    params = []
    for k in range(dimension):
        upper = value[k] + draw(st.sampled_from((0.0, 5.0, 1000.0, math.inf)))
        params.append(Param(f"w{k}", f"pref.w{k}", value[k], layout.integer[k], lower[k], upper))

    def pick(kind: str) -> tuple[tuple[int, ...], ...]:
        pairs = zip(layout.groups, layout.kinds, strict=True)
        return tuple(g for g, kd in pairs if kd == kind and len(g) > 1)

    return ModelSpec(
        name="random",
        description="hypothesis",
        params=tuple(params),
        increasing=pick("increasing"),
        non_increasing=pick("non_increasing"),
        min_gap=gap,
    )


@st.composite
def configs(draw: st.DrawFn) -> RpropConfig:
    choice = draw(st.sampled_from(("deployed", "relative", "preset")))
    if choice == "preset":
        return draw(st.sampled_from((RpropConfig.deployed(), RpropConfig.default())))
    mode: Mode = "deployed" if choice == "deployed" else "relative"
    if mode == "deployed":
        low = draw(st.floats(0.1, 3.0))
        high = low * draw(st.floats(1.0, 4.0))
    else:
        low = draw(st.floats(0.001, 0.1))
        high = low * draw(st.floats(1.0, 10.0))
    return RpropConfig(
        mode=mode,
        initial_step=draw(st.floats(low, high)),
        min_step=low,
        max_step=high,
        increase=draw(st.floats(1.0, 3.0)),
        decrease=draw(st.floats(0.1, 1.0)),
        floor_units=draw(st.floats(0.0, 3.0)),
        min_agreement=draw(st.sampled_from((0.0, 0.0, 0.2))),
    )


def honest_totals(dimension: int, voters: int) -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(-voters, voters), min_size=dimension, max_size=dimension)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[ModelSpec, RpropConfig, int, list[list[int]]]:
    spec = draw(specs())
    voters = draw(st.integers(1, 40))
    rounds = draw(st.lists(honest_totals(spec.dimension, voters), min_size=1, max_size=6))
    return spec, draw(configs()), voters, rounds


def assert_step_safe(
    spec: ModelSpec, config: RpropConfig, old: OptimizerState, step: StepApplied
) -> None:
    bound = max_moves(spec, config, old.weights)
    assert violations(spec, step.state.weights, old.weights, bound) == ()
    for k, moved in enumerate(step.moved):
        assert moved == step.state.weights[k] - old.weights[k]
        assert abs(moved) <= bound[k] + 1e-9 * max(1.0, abs(old.weights[k]))
    assert step.state.round == old.round + 1
    assert all(config.min_step <= s <= config.max_step for s in step.state.steps)


@FAST
@given(scenarios())
def test_every_honest_step_keeps_every_safeguard(
    scenario: tuple[ModelSpec, RpropConfig, int, list[list[int]]],
) -> None:
    spec, config, voters, rounds = scenario
    state = initial_state(spec, config)
    for total in rounds:
        result = apply_votes(spec, config, state, total, voters)
        assert isinstance(result, StepApplied), result
        assert_step_safe(spec, config, state, result)
        state = result.state


@FAST
@given(scenarios(), st.data())
def test_a_poisoned_total_is_rejected_and_changes_nothing(
    scenario: tuple[ModelSpec, RpropConfig, int, list[list[int]]], data: st.DataObject
) -> None:
    spec, config, voters, rounds = scenario
    state = initial_state(spec, config)
    first = apply_votes(spec, config, state, rounds[0], voters)
    assert isinstance(first, StepApplied)
    state = first.state
    snapshot = state.to_dict()
    poisoned = list(rounds[-1])
    k = data.draw(st.integers(0, spec.dimension - 1))
    poisoned[k] = data.draw(st.sampled_from((-1, 1))) * data.draw(
        st.integers(voters + 1, 10 * voters + 10)
    )
    result = apply_votes(spec, config, state, poisoned, voters)
    assert isinstance(result, StepRejected)
    assert f"coordinate {k} (w{k})" in result.reason and str(poisoned[k]) in result.reason
    assert state.to_dict() == snapshot
    # the same state still steps normally afterwards
    again = apply_votes(spec, config, state, rounds[-1], voters)
    assert isinstance(again, StepApplied)
    assert_step_safe(spec, config, state, again)


@FAST
@given(specs(), st.data())
def test_projection_of_any_proposal_is_feasible_and_inside_the_box(
    spec: ModelSpec, data: st.DataObject
) -> None:
    previous = spec.defaults()
    wild = st.floats(-1e4, 1e4, allow_nan=False)
    proposed = np.array(data.draw(st.lists(wild, min_size=spec.dimension, max_size=spec.dimension)))
    box = np.array(
        data.draw(st.lists(st.floats(0.0, 50.0), min_size=spec.dimension, max_size=spec.dimension))
    )
    result = project(spec, proposed, previous, box)
    assert violations(spec, result, previous, box) == ()
    # a proposal that already keeps everything is returned as is
    assert np.array_equal(project(spec, previous, previous, box), previous)


@settings(max_examples=25, deadline=None)
@given(
    st.integers(2, 5).flatmap(
        lambda n: st.tuples(
            st.lists(st.floats(0.0, 50.0), min_size=n, max_size=n),
            st.lists(st.floats(-40.0, 40.0), min_size=n, max_size=n),
            st.lists(st.floats(0.0, 20.0), min_size=n, max_size=n),
        )
    )
)
def test_projection_is_least_squares_optimal_on_a_real_group(
    drawn: tuple[list[float], list[float], list[float]],
) -> None:
    gaps, shift, box_list = drawn
    n = len(gaps)
    previous = np.cumsum(np.asarray(gaps) + 1.0)  # strictly increasing by >= 1
    spec = ModelSpec(
        name="real",
        description="one increasing real group",
        params=tuple(Param(f"w{k}", "p", float(previous[k]), integer=False) for k in range(n)),
        increasing=(tuple(range(n)),),
        min_gap=1.0,
    )
    proposed = previous + np.asarray(shift)
    box = np.asarray(box_list)
    result = project(spec, proposed, previous, box)
    reference = minimize(
        lambda w: float(np.sum((w - proposed) ** 2)),
        previous,
        method="SLSQP",
        bounds=[(max(0.0, p - b), p + b) for p, b in zip(previous, box, strict=True)],
        constraints=[
            {"type": "ineq", "fun": lambda w, i=i: w[i + 1] - w[i] - 1.0} for i in range(n - 1)
        ],
        options={"ftol": 1e-12, "maxiter": 500},
    )
    ours = float(np.sum((result - proposed) ** 2))
    assert ours <= float(reference.fun) + 1e-6 * (1.0 + float(reference.fun))


@FAST
@given(scenarios())
def test_state_round_trips_through_json(
    scenario: tuple[ModelSpec, RpropConfig, int, list[list[int]]],
) -> None:
    spec, config, voters, rounds = scenario
    state = initial_state(spec, config)
    for total in rounds:
        result = apply_votes(spec, config, state, total, voters)
        assert isinstance(result, StepApplied)
        state = result.state
        restored = OptimizerState.from_dict(json.loads(json.dumps(state.to_dict())))
        assert restored == state


@settings(max_examples=30, deadline=None)
@given(
    st.sampled_from((RpropConfig.deployed(), RpropConfig.default())),
    st.integers(1, 30).flatmap(
        lambda n: st.tuples(
            st.just(n), st.lists(honest_totals(FIREFOX_2018.dimension, n), min_size=1, max_size=30)
        )
    ),
)
def test_firefox_2018_steps_keep_the_paper_safeguards(
    config: RpropConfig, drawn: tuple[int, list[list[int]]]
) -> None:
    voters, rounds = drawn
    state = initial_state(FIREFOX_2018, config)
    for total in rounds:
        result = apply_votes(FIREFOX_2018, config, state, total, voters)
        assert isinstance(result, StepApplied)
        assert_step_safe(FIREFOX_2018, config, state, result)
        w = result.state.weights
        assert w[0] >= 1 and all(w[i + 1] >= w[i] + 1 for i in range(3))
        assert all(w[i + 1] <= w[i] for i in range(4, 8))
        assert all(x >= 0 and float(x).is_integer() for x in w)
        state = result.state


@settings(max_examples=30, deadline=None)
@given(
    st.sampled_from((RpropConfig.deployed(), RpropConfig.default())),
    st.integers(1, 30).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.lists(honest_totals(FIREFOX_CURRENT.dimension, n), min_size=1, max_size=30),
        )
    ),
)
def test_firefox_current_steps_keep_kind_weights_ordered(
    config: RpropConfig, drawn: tuple[int, list[list[int]]]
) -> None:
    voters, rounds = drawn
    state = initial_state(FIREFOX_CURRENT, config)
    for total in rounds:
        result = apply_votes(FIREFOX_CURRENT, config, state, total, voters)
        assert isinstance(result, StepApplied)
        assert_step_safe(FIREFOX_CURRENT, config, state, result)
        w = result.state.weights
        assert w[0] >= 1.0
        assert all(w[i + 1] <= w[i] for i in range(1, 4))
        state = result.state
