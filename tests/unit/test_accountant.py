"""The RDP accountant against closed forms and exact divergences (crypto/accountant.py)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp

from crypto.accountant import (
    DEFAULT_ORDERS,
    BudgetExhausted,
    Conversion,
    ParticipantBudget,
    PrivacyBudget,
    RdpCurve,
    gaussian_rdp,
    pure_dp_rdp,
    randomized_response_rdp,
    skellam_rdp,
    total_epsilon,
)


def _gaussian_exact_delta(epsilon: float, sigma: float, sensitivity: float) -> float:
    """Exact delta(epsilon) of the Gaussian mechanism (Balle & Wang 2018, Theorem 8)."""
    a = sensitivity / (2 * sigma)
    b = epsilon * sigma / sensitivity
    return float(stats.norm.cdf(a - b) - math.exp(epsilon) * stats.norm.cdf(-a - b))


def _renyi_divergence(log_p: np.ndarray, log_q: np.ndarray, alpha: float) -> float:
    return float(logsumexp(alpha * log_p + (1 - alpha) * log_q) / (alpha - 1))


def _ternary_rr_log_row(value: int, epsilon: float) -> np.ndarray:
    """log P[output = (-1, 0, 1)] of ternary RR on input ``value``, from the definition."""
    keep = math.exp(epsilon) / (math.exp(epsilon) + 2)
    other = 1 / (math.exp(epsilon) + 2)
    probabilities = np.array([keep if out == value else other for out in (-1, 0, 1)])
    return np.asarray(np.log(probabilities), dtype=np.float64)


def test_gaussian_composition_equals_one_gaussian_with_smaller_sigma() -> None:
    # T rounds of N(0, sigma^2) are as private as one round of N(0, sigma^2 / T).
    sigma, rounds = 3.0, 25
    composed = gaussian_rdp(sigma).times(rounds)
    single = gaussian_rdp(sigma / math.sqrt(rounds))
    assert composed.epsilons == pytest.approx(single.epsilons, rel=1e-12)


def test_gaussian_mironov_conversion_matches_continuous_optimum() -> None:
    # min over alpha of T alpha/(2 s^2) + L/(alpha-1) is a + 2 sqrt(a L), a = T/(2 s^2).
    sigma, rounds, delta = 20.0, 100, 1e-6
    a, log_inv_delta = rounds / (2 * sigma**2), math.log(1 / delta)
    closed_form = a + 2 * math.sqrt(a * log_inv_delta)
    on_grid = total_epsilon(gaussian_rdp(sigma), rounds, delta, Conversion.MIRONOV_2017)
    assert closed_form <= on_grid <= closed_form * 1.01


@pytest.mark.parametrize("sigma", [0.8, 2.0, 10.0])
@pytest.mark.parametrize("conversion", list(Conversion))
def test_gaussian_conversion_is_sound_against_exact_delta(
    sigma: float, conversion: Conversion
) -> None:
    delta = 1e-5
    epsilon = gaussian_rdp(sigma).epsilon(delta, conversion)
    assert _gaussian_exact_delta(epsilon, sigma, 1.0) <= delta
    # ...and not absurdly loose: the exact curve needs at least 60 % of that epsilon.
    assert _gaussian_exact_delta(0.6 * epsilon, sigma, 1.0) > delta


def test_balle_conversion_is_never_worse_than_mironov() -> None:
    for sigma in (0.5, 1.0, 5.0, 50.0):
        curve = gaussian_rdp(sigma).times(10)
        balle = curve.epsilon(1e-6, Conversion.BALLE_2020)
        mironov = curve.epsilon(1e-6, Conversion.MIRONOV_2017)
        assert balle < mironov


def test_ternary_rr_matches_enumerated_divergence_of_two_coordinate_vectors() -> None:
    epsilon = 0.7
    curve = randomized_response_rdp(epsilon, coordinates=2)
    rows = {v: _ternary_rr_log_row(v, epsilon) for v in (-1, 0, 1)}

    def vector_log_distribution(vote: tuple[int, ...]) -> np.ndarray:
        return np.array([rows[vote[0]][i] + rows[vote[1]][j] for i in range(3) for j in range(3)])

    votes = list(itertools.product((-1, 0, 1), repeat=2))
    for alpha, claimed in zip(curve.orders, curve.epsilons, strict=True):
        if alpha > 64:
            continue
        worst = max(
            _renyi_divergence(vector_log_distribution(x), vector_log_distribution(y), alpha)
            for x in votes
            for y in votes
        )
        assert claimed == pytest.approx(worst, rel=1e-9)


def test_ternary_rr_small_epsilon_matches_second_order_formula() -> None:
    # chi^2 between rows is 6 ((e^eps - 1)/(e^eps + 2))^2 ~ 2 eps^2 / 3, so D_alpha ~ alpha eps^2/3.
    epsilon = 0.01
    curve = randomized_response_rdp(epsilon, coordinates=1)
    for alpha, value in zip(curve.orders, curve.epsilons, strict=True):
        if alpha <= 10:
            assert value == pytest.approx(alpha * epsilon**2 / 3, rel=0.01)


def test_ternary_rr_tends_to_its_pure_epsilon_at_large_order() -> None:
    curve = randomized_response_rdp(1.0, coordinates=3)
    assert curve.epsilons[-1] == pytest.approx(3.0, rel=0.01)
    assert curve.epsilons[-1] < 3.0


@pytest.mark.parametrize("epsilon", [0.05, 0.5, 1.0, 3.0])
def test_ternary_rr_is_within_the_pure_dp_rdp_bounds(epsilon: float) -> None:
    rr = randomized_response_rdp(epsilon, coordinates=1)
    bound = pure_dp_rdp(epsilon)
    for exact, limit, alpha in zip(rr.epsilons, bound.epsilons, rr.orders, strict=True):
        assert exact <= limit + 1e-12, alpha
        assert exact <= epsilon
        assert exact <= alpha * epsilon**2 / 2 + 1e-12


@pytest.mark.parametrize("variance", [4.0, 50.0, 400.0])
def test_skellam_bound_dominates_exact_divergence_of_shifted_skellam(variance: float) -> None:
    # One coordinate, replace-one: the total moves by 2 (L1 = L2 = 2).
    reach = int(20 * math.sqrt(variance) + 60)
    support = np.arange(-reach, reach + 1)
    log_p = stats.skellam.logpmf(support, variance / 2, variance / 2)
    log_q = stats.skellam.logpmf(support - 2, variance / 2, variance / 2)
    orders = (2.0, 3.0, 5.0, 8.0, 16.0)
    bound = skellam_rdp(variance, 2.0, 2.0, orders)
    for alpha, claimed in zip(orders, bound.epsilons, strict=True):
        exact = _renyi_divergence(log_p, log_q, alpha)
        assert exact <= claimed
        if variance >= 50:
            assert claimed <= 1.15 * exact


def test_skellam_approaches_gaussian_with_the_same_variance() -> None:
    # The bound holds for integer orders; a fractional order borrows the next integer's.
    integer_orders = tuple(a for a in DEFAULT_ORDERS if a == int(a))
    for variance, tolerance in ((1e4, 0.01), (1e6, 1e-4)):
        skellam = skellam_rdp(variance, 44.0, 2 * math.sqrt(22), integer_orders)
        gaussian = gaussian_rdp(math.sqrt(variance), 2 * math.sqrt(22), integer_orders)
        for s, g in zip(skellam.epsilons, gaussian.epsilons, strict=True):
            assert g <= s <= g * (1 + tolerance)
    fractional = skellam_rdp(1e4, 44.0, 2 * math.sqrt(22), (1.5,))
    assert fractional.epsilons == skellam_rdp(1e4, 44.0, 2 * math.sqrt(22), (2.0,)).epsilons


def test_composition_of_t_rounds_is_t_times_one_round() -> None:
    one = randomized_response_rdp(0.3, 22) + skellam_rdp(900.0, 44.0, 9.4)
    step_by_step = RdpCurve.zero()
    for _ in range(7):
        step_by_step = step_by_step + one
    assert step_by_step.epsilons == pytest.approx(one.times(7).epsilons, rel=1e-12)


def test_rdp_composition_beats_basic_composition_over_many_rounds() -> None:
    per_round = 0.1
    rounds = 1000
    composed = total_epsilon(pure_dp_rdp(per_round), rounds, 1e-6)
    assert composed < rounds * per_round / 3


def test_epsilon_decreases_as_delta_grows() -> None:
    curve = randomized_response_rdp(0.2, 22).times(30)
    epsilons = [curve.epsilon(delta) for delta in (1e-12, 1e-9, 1e-6, 1e-3, 0.1)]
    assert epsilons == sorted(epsilons, reverse=True)
    assert epsilons[0] > epsilons[-1]


def test_curves_reject_bad_input() -> None:
    with pytest.raises(ValueError):
        RdpCurve((1.0,), (0.0,))
    with pytest.raises(ValueError):
        RdpCurve((2.0,), (-1.0,))
    with pytest.raises(ValueError):
        RdpCurve((2.0, 3.0), (0.0,))
    with pytest.raises(ValueError):
        gaussian_rdp(1.0, orders=(2.0,)) + gaussian_rdp(1.0, orders=(3.0,))
    with pytest.raises(ValueError):
        gaussian_rdp(1.0).epsilon(0.0)
    with pytest.raises(ValueError):
        skellam_rdp(0.0, 1.0, 1.0)


def test_participant_refuses_to_vote_once_budget_is_spent() -> None:
    ledger = ParticipantBudget(PrivacyBudget(epsilon=4.0, delta=1e-6))
    cost = randomized_response_rdp(0.05, 22)
    affordable = ledger.rounds_affordable(cost)
    assert affordable >= 1
    for _ in range(affordable):
        ledger.spend(cost)
    assert ledger.epsilon_spent() <= 4.0
    assert not ledger.can_spend(cost)
    before = ledger.spent
    with pytest.raises(BudgetExhausted, match="budget"):
        ledger.spend(cost)
    assert ledger.spent == before
    assert ledger.rounds_spent == affordable


def test_fresh_ledger_has_spent_nothing_and_matches_total_epsilon() -> None:
    budget = PrivacyBudget(epsilon=10.0, delta=1e-6)
    ledger = ParticipantBudget(budget)
    assert ledger.epsilon_spent() == 0.0
    cost = skellam_rdp(2000.0, 44.0, 2 * math.sqrt(22))
    for _ in range(5):
        ledger.spend(cost)
    assert ledger.epsilon_spent() == pytest.approx(total_epsilon(cost, 5, 1e-6), rel=1e-12)


def test_budget_rejects_invalid_configuration() -> None:
    with pytest.raises(ValueError):
        PrivacyBudget(epsilon=0.0, delta=1e-6)
    with pytest.raises(ValueError):
        PrivacyBudget(epsilon=1.0, delta=1.0)


def test_default_orders_are_increasing_and_above_one() -> None:
    assert all(a < b for a, b in itertools.pairwise(DEFAULT_ORDERS))
    assert DEFAULT_ORDERS[0] > 1


def test_tightest_of_two_bounds_is_no_worse_than_either() -> None:
    local = randomized_response_rdp(0.5, 22)
    central = skellam_rdp(1800.0, 44.0, 2 * math.sqrt(22))
    both = local.tightest(central)
    eps_local, eps_central = local.epsilon(1e-6), central.epsilon(1e-6)
    assert both.epsilon(1e-6) <= min(eps_local, eps_central)
    # Skellam is tighter at small orders, the bounded RR curve at large ones.
    assert both.epsilons[0] == central.epsilons[0] < local.epsilons[0]
    assert both.epsilons[-1] == local.epsilons[-1] < central.epsilons[-1]


def test_resumed_ledger_keeps_refusing_what_the_original_refused() -> None:
    budget = PrivacyBudget(epsilon=2.0, delta=1e-6)
    ledger = ParticipantBudget(budget)
    cost = randomized_response_rdp(0.02, 22)
    while ledger.can_spend(cost):
        ledger.spend(cost)
    saved = RdpCurve(ledger.spent.orders, ledger.spent.epsilons)
    resumed = ParticipantBudget.resume(budget, saved, ledger.rounds_spent)
    assert resumed.epsilon_spent() == ledger.epsilon_spent() > 1.5
    with pytest.raises(BudgetExhausted):
        resumed.spend(cost)
    assert ParticipantBudget(budget).can_spend(cost)
