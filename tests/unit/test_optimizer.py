"""Bounded Rprop and its safeguards (aggregator/optimizer.py, aggregator/safeguards.py):
hand-computed steps for the deployed 2018 settings and the relative default, the poisoning
bound, the projection, and state persistence. Paper sections 4.3 and 4.6, DESIGN.md 4."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from aggregator.optimizer import (
    OptimizerState,
    RpropConfig,
    StepApplied,
    StepRejected,
    apply_votes,
    directions,
    initial_state,
    max_moves,
)
from aggregator.safeguards import project, violations
from frecency.firefox2018 import SPEC as FIREFOX_2018
from frecency.spec import ModelSpec, Param

CUTOFFS = ("firstBucketCutoff", "secondBucketCutoff", "thirdBucketCutoff", "fourthBucketCutoff")
BUCKETS = (
    "firstBucketWeight",
    "secondBucketWeight",
    "thirdBucketWeight",
    "fourthBucketWeight",
    "defaultBucketWeight",
)
BONUSES = (
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


def firefox_2018_spec() -> ModelSpec:
    """The 22 prefs of DESIGN.md section 2, built here from the table."""
    params = [
        Param(name, f"places.frecency.{name}", default, lower=1.0 if i == 0 else 0.0)
        for i, (name, default) in enumerate(zip(CUTOFFS, (4, 14, 31, 90), strict=True))
    ]
    params += [
        Param(name, f"places.frecency.{name}", default)
        for name, default in zip(BUCKETS, (100, 70, 50, 30, 10), strict=True)
    ]
    params += [Param(name, f"places.frecency.{name}", default) for name, default in BONUSES]
    return ModelSpec(
        name="firefox-2018",
        description="DESIGN.md section 2",
        params=tuple(params),
        increasing=((0, 1, 2, 3),),
        non_increasing=((4, 5, 6, 7, 8),),
    )


SPEC = FIREFOX_2018


def test_the_shipped_firefox_2018_spec_matches_design_section_2() -> None:
    table = firefox_2018_spec()
    assert SPEC.names == table.names
    assert np.array_equal(SPEC.defaults(), table.defaults())
    assert np.array_equal(SPEC.lower_bounds(), table.lower_bounds())
    assert np.array_equal(SPEC.upper_bounds(), table.upper_bounds())
    assert bool(np.all(SPEC.integer_mask()))
    assert (SPEC.increasing, SPEC.non_increasing, SPEC.min_gap) == (
        table.increasing,
        table.non_increasing,
        table.min_gap,
    )


TYPED = SPEC.index("typedVisitBonus")
LINK = SPEC.index("linkVisitBonus")


def votes(**by_name: int) -> list[int]:
    total = [0] * SPEC.dimension
    for name, value in by_name.items():
        total[SPEC.index(name)] = value
    return total


def run(config: RpropConfig, rounds: list[list[int]], voters: int = 10) -> list[StepApplied]:
    state = initial_state(SPEC, config)
    applied = []
    for total in rounds:
        result = apply_votes(SPEC, config, state, total, voters)
        assert isinstance(result, StepApplied), result
        applied.append(result)
        state = result.state
    return applied


def typed_path(config: RpropConfig, signs: list[int]) -> list[float]:
    steps = run(config, [votes(typedVisitBonus=3 * s) for s in signs])
    return [s.state.weights[TYPED] for s in steps]


# --- deployed (2018) Rprop -------------------------------------------------------------


def test_deployed_first_step_is_two_then_repeat_doubles_clipped_at_three() -> None:
    deployed = RpropConfig.deployed()
    steps = run(deployed, [votes(typedVisitBonus=-5)] * 3)
    assert [s.state.weights[TYPED] for s in steps] == [1998.0, 1995.0, 1992.0]
    assert [s.state.steps[TYPED] for s in steps] == [2.0, 3.0, 3.0]
    assert steps[0].direction[TYPED] == -1
    assert steps[0].moved[TYPED] == -2.0


def test_deployed_flip_multiplies_by_point_six_and_rounds_the_move() -> None:
    # down 2, down 3 (4 clipped), up 1.8 -> moves 2, up 3.6 -> 3 (clipped), down 1.8 -> 2
    assert typed_path(RpropConfig.deployed(), [-1, -1, +1, +1, -1]) == [
        1998.0,
        1995.0,
        1997.0,
        2000.0,
        1998.0,
    ]
    # down 2, up 1.2 -> moves 1, down 1 (0.72 clipped to the minimum 1)
    assert typed_path(RpropConfig.deployed(), [-1, +1, -1]) == [1998.0, 1999.0, 1998.0]


def test_deployed_step_sizes_follow_rprop() -> None:
    steps = run(RpropConfig.deployed(), [votes(typedVisitBonus=s) for s in (-1, 1, 1, -1, -1)])
    assert [round(s.state.steps[TYPED], 9) for s in steps] == [2.0, 1.2, 2.4, 1.44, 2.88]


def test_zero_direction_keeps_step_and_weight_and_resets_memory() -> None:
    steps = run(RpropConfig.deployed(), [votes(typedVisitBonus=v) for v in (-4, -4, 0, -4)])
    assert [s.state.weights[TYPED] for s in steps] == [1998.0, 1995.0, 1995.0, 1992.0]
    # after a zero the step is neither grown nor shrunk: 3 stays 3
    assert [s.state.steps[TYPED] for s in steps] == [2.0, 3.0, 3.0, 3.0]
    assert steps[2].state.last_direction[TYPED] == 0
    assert steps[2].moved[TYPED] == 0.0


def test_deployed_cap_moves_typed_bonus_only_143_in_48_rounds() -> None:
    # 2 in the first round, then 3 in each of the 47 others: 2 + 47 * 3 = 143
    steps = run(RpropConfig.deployed(), [votes(typedVisitBonus=-1)] * 48)
    assert steps[-1].state.weights[TYPED] == 2000.0 - 143.0
    assert steps[-1].state.round == 48
    assert max(abs(s.moved[TYPED]) for s in steps) == 3.0


# --- relative (default) Rprop ----------------------------------------------------------


def test_relative_steps_are_log_space_with_rounding() -> None:
    path = typed_path(RpropConfig.default(), [-1, -1, +1])
    first = round(2000 * math.exp(-0.05))  # 1902 (moved 97.5 -> rounded)
    second = round(first * math.exp(-0.1))  # step 0.05 * 2 = 0.1
    third = round(second * math.exp(0.06))  # flip: 0.1 * 0.6
    assert path == [float(first), float(second), float(third)]
    assert path == [1902.0, 1721.0, 1827.0]


def test_relative_floor_lets_zero_weights_move_one_unit() -> None:
    embed = SPEC.index("embedVisitBonus")
    steps = run(RpropConfig.default(), [votes(embedVisitBonus=2)] * 3)
    assert [s.state.weights[embed] for s in steps] == [1.0, 2.0, 3.0]


def test_relative_reaches_a_far_preference_where_deployed_cannot() -> None:
    steps = run(RpropConfig.default(), [votes(typedVisitBonus=-1)] * 48)
    assert steps[-1].state.weights[TYPED] < 200.0
    before = [2000.0] + [s.state.weights[TYPED] for s in steps[:-1]]
    for old, step in zip(before, steps, strict=True):
        assert abs(step.moved[TYPED]) <= max(1.0, old * math.expm1(0.1))


def test_relative_max_moves_bound_each_weight_by_its_own_size() -> None:
    moves = max_moves(
        SPEC, RpropConfig.default(), initial_state(SPEC, RpropConfig.default()).weights
    )
    assert moves[TYPED] == pytest.approx(2000 * math.expm1(0.1))
    assert moves[LINK] == pytest.approx(100 * math.expm1(0.1))
    assert moves[SPEC.index("embedVisitBonus")] == 1.0
    assert list(max_moves(SPEC, RpropConfig.deployed(), [0.0] * 22)) == [3.0] * 22


def test_min_agreement_zeroes_weak_majorities() -> None:
    config = RpropConfig(mode="deployed", initial_step=2.0, min_agreement=0.5)
    assert directions(config, [3, -5, 6, 0], voters=10) == (0, -1, 1, 0)
    assert directions(RpropConfig.deployed(), [3, -5, 6, 0], voters=10) == (1, -1, 1, 0)


# --- safeguards ------------------------------------------------------------------------


def test_first_cutoff_never_below_one_and_cutoffs_stay_strictly_increasing() -> None:
    steps = run(RpropConfig.deployed(), [votes(firstBucketCutoff=-9, secondBucketCutoff=-9)] * 20)
    final = steps[-1].state.weights
    assert final[0] == 1.0
    assert final[1] == 2.0
    cutoffs = final[:4]
    assert all(cutoffs[i + 1] - cutoffs[i] >= 1 for i in range(3))


def test_bucket_weights_never_increase_with_age() -> None:
    steps = run(RpropConfig.default(), [votes(secondBucketWeight=9, firstBucketWeight=-9)] * 20)
    for step in steps:
        buckets = step.state.weights[4:9]
        assert list(buckets) == sorted(buckets, reverse=True)
    assert steps[-1].state.weights[4] == steps[-1].state.weights[5]


def test_weights_never_negative() -> None:
    steps = run(RpropConfig.deployed(), [votes(redirectSourceVisitBonus=-9)] * 12)
    redirect = SPEC.index("redirectSourceVisitBonus")
    assert [s.state.weights[redirect] for s in steps][-1] == 0.0
    assert min(min(s.state.weights) for s in steps) == 0.0


def test_projection_pools_an_order_violation_within_the_step_box() -> None:
    previous = SPEC.defaults()
    proposed = previous.copy()
    proposed[7], proposed[8] = 30.0, 33.0  # defaultBucketWeight above fourthBucketWeight
    result = project(SPEC, proposed, previous, np.full(22, 3.0))
    # least squares with w7 >= w8, |w - previous| <= 3: w8 = 13 (its box), w7 stays 30
    assert (result[7], result[8]) == (30.0, 13.0)
    proposed[8] = 12.0
    proposed[7] = 11.0  # asks both to cross: pooled to their mean 11.5 then boxed
    result = project(SPEC, proposed, previous, np.full(22, 20.0))
    assert result[7] == result[8] == 12.0  # mean 11.5 rounded half to even
    assert not violations(SPEC, result, previous, np.full(22, 20.0))


def test_projection_refuses_an_infeasible_previous_point() -> None:
    broken = SPEC.defaults()
    broken[1] = broken[0]
    with pytest.raises(ValueError, match="secondBucketCutoff"):
        project(SPEC, broken, broken, np.full(22, 3.0))


# --- poisoning bound -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("total", "voters", "expected"),
    [
        (votes(typedVisitBonus=11), 10, "coordinate 12 (typedVisitBonus) is 11, outside [-10, 10]"),
        (votes(firstBucketCutoff=-4), 3, "coordinate 0 (firstBucketCutoff) is -4, outside [-3, 3]"),
        ([0] * 21, 5, "shape (21,), expected (22,)"),
        ([0] * 22, 0, "voters = 0"),
        ([0.5] + [0] * 21, 5, "coordinate 0 (firstBucketCutoff) is 0.5, not an integer"),
        ([0] * 22, True, "voters must be an integer"),
    ],
)
def test_poisoned_or_malformed_votes_abort_the_step(
    total: list[int], voters: int, expected: str
) -> None:
    config = RpropConfig.default()
    state = initial_state(SPEC, config)
    result = apply_votes(SPEC, config, state, total, voters)
    assert isinstance(result, StepRejected)
    assert expected in result.reason


def test_vote_total_at_the_bound_is_accepted() -> None:
    state = initial_state(SPEC, RpropConfig.deployed())
    total = np.array(votes(typedVisitBonus=-7, linkVisitBonus=7), dtype=np.int64)
    assert isinstance(apply_votes(SPEC, RpropConfig.deployed(), state, total, 7), StepApplied)


def test_state_that_breaks_a_safeguard_is_not_stepped() -> None:
    state = initial_state(SPEC, RpropConfig.deployed())
    bad = OptimizerState((-1.0, *state.weights[1:]), state.steps, state.last_direction, 3)
    result = apply_votes(SPEC, RpropConfig.deployed(), bad, [0] * 22, 4)
    assert isinstance(result, StepRejected)
    assert "firstBucketCutoff" in result.reason


# --- state -----------------------------------------------------------------------------


def test_state_round_trips_through_json() -> None:
    state = run(RpropConfig.deployed(), [votes(typedVisitBonus=-1, linkVisitBonus=1)] * 3)[-1].state
    data = json.loads(json.dumps(state.to_dict()))
    assert OptimizerState.from_dict(data) == state
    assert data["weights"][TYPED] == 1992 and isinstance(data["weights"][TYPED], int)


@pytest.mark.parametrize(
    "change",
    [
        {"round": -1},
        {"last_direction": [2] * 22},
        {"steps": [0.0] * 22},
        {"weights": [1.0] * 21},
        {"weights": [math.nan] * 22},
        {"extra": 1},
    ],
)
def test_malformed_state_is_refused(change: dict[str, object]) -> None:
    data = initial_state(SPEC, RpropConfig.deployed()).to_dict()
    data.update(change)
    with pytest.raises(ValueError):
        OptimizerState.from_dict(data)


def test_initial_state_starts_from_firefox_defaults() -> None:
    state = initial_state(SPEC, RpropConfig.deployed())
    assert state.weights[TYPED] == 2000.0 and state.weights[0] == 4.0
    assert state.steps == (2.0,) * 22
    assert state.last_direction == (0,) * 22 and state.round == 0


def test_invalid_configs_are_refused() -> None:
    with pytest.raises(ValueError):
        RpropConfig(mode="deployed", initial_step=5.0, min_step=1.0, max_step=3.0)
    with pytest.raises(ValueError):
        RpropConfig(mode="deployed", initial_step=2.0, decrease=1.5)


def test_noise_slack_widens_the_poisoning_bound_for_noisy_sums() -> None:
    noisy = RpropConfig(mode="deployed", initial_step=2.0, noise_slack=5)
    state = initial_state(SPEC, noisy)
    assert isinstance(apply_votes(SPEC, noisy, state, votes(typedVisitBonus=-15), 10), StepApplied)
    beyond = apply_votes(SPEC, noisy, state, votes(typedVisitBonus=-16), 10)
    assert isinstance(beyond, StepRejected)
    assert "is -16, outside [-15, 15] for 10 voters" in beyond.reason


def test_default_ignores_a_net_vote_below_ten_percent() -> None:
    config = RpropConfig.default()
    state = initial_state(SPEC, config)
    weak = apply_votes(SPEC, config, state, votes(typedVisitBonus=-3, linkVisitBonus=4), 40)
    assert isinstance(weak, StepApplied)
    assert weak.direction[TYPED] == 0 and weak.moved[TYPED] == 0.0
    assert weak.direction[LINK] == 1 and weak.moved[LINK] == 5.0  # 100 * (e^0.05 - 1) = 5.1
