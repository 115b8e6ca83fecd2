"""Properties of the vote DP mechanisms and the RDP accountant (crypto/dp.py, accountant.py)."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from crypto.accountant import (
    BudgetExhausted,
    ParticipantBudget,
    PrivacyBudget,
    RdpCurve,
    gaussian_rdp,
    pure_dp_rdp,
    randomized_response_rdp,
    skellam_rdp,
)
from crypto.dp import (
    SeededRandomSource,
    calibrate_skellam,
    randomized_response,
    sample_poisson,
    skellam_noise,
)

FAST = settings(max_examples=60, deadline=None)
SLOW = settings(max_examples=20, deadline=None)

epsilons = st.floats(min_value=0.0, max_value=8.0, allow_nan=False)
positive_epsilons = st.floats(min_value=0.01, max_value=8.0, allow_nan=False)
variances = st.floats(min_value=0.5, max_value=1e6, allow_nan=False)
deltas = st.floats(min_value=1e-12, max_value=0.5, allow_nan=False)


@st.composite
def curves(draw: st.DrawFn) -> RdpCurve:
    kind = draw(st.sampled_from(["rr", "gaussian", "skellam", "pure"]))
    if kind == "rr":
        return randomized_response_rdp(draw(epsilons), draw(st.integers(1, 30)))
    if kind == "gaussian":
        return gaussian_rdp(draw(st.floats(0.1, 1e3)), draw(st.floats(0.1, 50.0)))
    if kind == "skellam":
        l2 = draw(st.floats(0.5, 20.0))
        return skellam_rdp(draw(variances), l2 * draw(st.floats(1.0, 5.0)), l2)
    return pure_dp_rdp(draw(epsilons))


@FAST
@given(curves())
def test_rdp_is_nonnegative_and_nondecreasing_in_the_order(curve: RdpCurve) -> None:
    assert all(e >= 0 for e in curve.epsilons)
    assert all(a <= b * (1 + 1e-12) + 1e-15 for a, b in itertools.pairwise(curve.epsilons))


@FAST
@given(curves(), curves(), st.integers(0, 500))
def test_composition_is_additive(first: RdpCurve, second: RdpCurve, rounds: int) -> None:
    both = first + second
    for a, b, total in zip(first.epsilons, second.epsilons, both.epsilons, strict=True):
        assert total == a + b
    assert first.times(rounds).epsilons == tuple(rounds * e for e in first.epsilons)
    assert (first + second).epsilons == (second + first).epsilons


@FAST
@given(curves(), deltas, deltas)
def test_epsilon_does_not_grow_with_delta(curve: RdpCurve, d1: float, d2: float) -> None:
    small, large = sorted((d1, d2))
    assert curve.epsilon(large) <= curve.epsilon(small)


@FAST
@given(curves(), st.integers(1, 50), deltas)
def test_more_rounds_never_cost_less(curve: RdpCurve, rounds: int, delta: float) -> None:
    assert curve.times(rounds).epsilon(delta) <= curve.times(rounds + 1).epsilon(delta)


@FAST
@given(positive_epsilons, st.integers(1, 22))
def test_randomized_response_rdp_never_exceeds_its_pure_ldp(epsilon: float, d: int) -> None:
    curve = randomized_response_rdp(epsilon, d)
    assert all(e <= d * epsilon * (1 + 1e-12) for e in curve.epsilons)


@FAST
@given(
    st.lists(st.sampled_from([-1, 0, 1]), min_size=0, max_size=40),
    epsilons,
    st.binary(min_size=1, max_size=8),
)
def test_randomized_response_outputs_votes_of_the_same_shape(
    votes: list[int], epsilon: float, seed: bytes
) -> None:
    out = randomized_response(votes, epsilon, SeededRandomSource(seed))
    assert out.shape == (len(votes),)
    assert set(out.tolist()) <= {-1, 0, 1}


@FAST
@given(st.lists(st.sampled_from([-1, 0, 1]), max_size=40), st.binary(min_size=1, max_size=8))
def test_randomized_response_with_huge_epsilon_is_the_identity(
    votes: list[int], seed: bytes
) -> None:
    out = randomized_response(votes, 60.0, SeededRandomSource(seed))
    assert out.tolist() == votes


@FAST
@given(st.floats(0.0, 12.0), st.integers(0, 12), st.binary(min_size=1, max_size=8))
def test_noise_is_integer_and_poisson_nonnegative(
    variance: float, dimension: int, seed: bytes
) -> None:
    source = SeededRandomSource(seed)
    noise = skellam_noise(dimension, variance, source)
    assert noise.dtype == np.int64 and noise.shape == (dimension,)
    assert sample_poisson(variance, source) >= 0
    if variance == 0.0:
        assert not noise.any()


@SLOW
@given(positive_epsilons, positive_epsilons, st.integers(1, 2000), st.integers(1, 100))
def test_calibration_gives_less_noise_for_more_epsilon(
    e1: float, e2: float, survivors: int, rounds: int
) -> None:
    low, high = sorted((e1, e2))
    noisier = calibrate_skellam(low, 1e-6, 44.0, 9.38, survivors, rounds)
    quieter = calibrate_skellam(high, 1e-6, 44.0, 9.38, survivors, rounds)
    assert quieter <= noisier * (1 + 2e-6)


@FAST
@given(
    st.floats(0.5, 20.0),
    st.lists(st.floats(0.001, 0.5), min_size=1, max_size=40),
)
def test_a_ledger_never_spends_past_its_budget(budget_epsilon: float, costs: list[float]) -> None:
    ledger = ParticipantBudget(PrivacyBudget(budget_epsilon, 1e-6))
    for per_coordinate in costs:
        cost = randomized_response_rdp(per_coordinate, 22)
        allowed = ledger.can_spend(cost)
        try:
            ledger.spend(cost)
            assert allowed
        except BudgetExhausted:
            assert not allowed
        assert ledger.epsilon_spent() <= budget_epsilon
