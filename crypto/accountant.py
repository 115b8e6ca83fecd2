"""Rényi-DP accountant for the vote privacy mechanisms (DESIGN.md section 6, "DP, optional").

Method: Rényi differential privacy (Mironov 2017, "Rényi Differential Privacy", CSF) over a
fixed grid of orders alpha. Each mechanism contributes an ``RdpCurve`` (alpha -> epsilon(alpha));
adaptive composition over rounds adds the curves order by order (Mironov Prop. 1); the total is
converted to (epsilon, delta)-DP by either

- ``Conversion.MIRONOV_2017``: eps = rdp(alpha) + log(1/delta) / (alpha - 1)  (Mironov Prop. 3), or
- ``Conversion.BALLE_2020`` (default, tighter): eps = rdp(alpha) + log((alpha - 1) / alpha)
  - (log delta + log alpha) / (alpha - 1)  (Balle, Barthe, Gaboardi, Hsu, Sato 2020,
  "Hypothesis Testing Interpretations and Rényi Differential Privacy", Theorem 21;
  also Canonne, Kamath, Steinke 2020, Prop. 12),

minimised over the grid. Mechanism curves:

- ternary randomized response, exactly: the Rényi divergence between two rows of the 3x3
  RR matrix (keep p = e^eps / (e^eps + 2), each other value q = 1 / (e^eps + 2)), times the
  number of coordinates that may differ (divergence of product distributions adds up);
- the Gaussian mechanism: alpha * Delta2^2 / (2 sigma^2) (Mironov 2017, Prop. 7);
- the Skellam mechanism with total variance mu (sum of Poisson(mu/2) - Poisson(mu/2) noise):
  alpha Delta2^2 / (2 mu) + min(((2 alpha - 1) Delta2^2 + 6 Delta1) / (4 mu^2), 3 Delta1 / (2 mu))
  for integer alpha > 1 (Agarwal, Kairouz, Liu, NeurIPS 2021, "The Skellam Mechanism for
  Differentially Private Federated Learning", Theorem 3.5 / Corollary 3.6, scale 1); a
  fractional order uses the bound at ceil(alpha), valid since RDP is non-decreasing in alpha;
- any pure eps-DP mechanism: min(eps, alpha eps^2 / 2) (Bun & Steinke 2016, Prop. 3.3).

``ParticipantBudget`` is one participant's own ledger: it refuses (``BudgetExhausted``) a round
whose cost would push its composed spend past its (epsilon, delta) budget, so the participant
runtime stops voting once its budget is spent. Pure computation, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

#: Orders alpha > 1: fine steps near 1 (where RDP of weak noise is tight), integers to 64,
#: then coarser up to 1024 (where strong privacy / small delta is optimised).
DEFAULT_ORDERS: tuple[float, ...] = (
    1.125, 1.25, 1.375, 1.5, 1.625, 1.75, 1.875,
    *(float(a) for a in range(2, 65)),
    80.0, 96.0, 112.0, 128.0, 160.0, 192.0, 256.0, 384.0, 512.0, 768.0, 1024.0,
)  # fmt: skip


class Conversion(Enum):
    """How an RDP curve becomes an (epsilon, delta) guarantee."""

    MIRONOV_2017 = "mironov-2017"
    BALLE_2020 = "balle-2020"


class BudgetExhausted(Exception):
    """A participant's privacy budget cannot pay for another round: it must not vote."""


@dataclass(frozen=True, slots=True)
class RdpCurve:
    """epsilon(alpha) of a mechanism (or of a composition) on a grid of orders."""

    orders: tuple[float, ...]
    epsilons: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.orders) != len(self.epsilons) or not self.orders:
            raise ValueError("orders and epsilons must be non-empty and of equal length")
        if any(a <= 1.0 for a in self.orders):
            raise ValueError("RDP orders must be > 1")
        if any(not e >= 0.0 for e in self.epsilons):
            raise ValueError("RDP epsilons must be >= 0 (and not NaN)")

    @classmethod
    def zero(cls, orders: Sequence[float] = DEFAULT_ORDERS) -> RdpCurve:
        """The curve of a mechanism that releases nothing (identity of composition)."""
        return cls(tuple(orders), tuple(0.0 for _ in orders))

    def compose(self, other: RdpCurve) -> RdpCurve:
        """Adaptive sequential composition: RDP adds order by order (Mironov 2017, Prop. 1)."""
        if self.orders != other.orders:
            raise ValueError("cannot compose RDP curves over different orders")
        summed = (a + b for a, b in zip(self.epsilons, other.epsilons, strict=True))
        return RdpCurve(self.orders, tuple(summed))

    def __add__(self, other: RdpCurve) -> RdpCurve:
        return self.compose(other)

    def tightest(self, other: RdpCurve) -> RdpCurve:
        """Order-wise minimum of two valid curves *of the same mechanism*.

        E.g. randomized response followed by Skellam noise in the secure sum: the release is
        both a post-processing of the RR vote and a Skellam mechanism, so either bound holds.
        """
        if self.orders != other.orders:
            raise ValueError("cannot combine RDP curves over different orders")
        lowest = (min(a, b) for a, b in zip(self.epsilons, other.epsilons, strict=True))
        return RdpCurve(self.orders, tuple(lowest))

    def times(self, rounds: int) -> RdpCurve:
        """``rounds``-fold composition of this mechanism with itself."""
        if rounds < 0:
            raise ValueError("rounds must be >= 0")
        return RdpCurve(self.orders, tuple(rounds * e for e in self.epsilons))

    def epsilon(self, delta: float, conversion: Conversion = Conversion.BALLE_2020) -> float:
        """The smallest epsilon over the grid such that the mechanism is (epsilon, delta)-DP."""
        return self.epsilon_and_order(delta, conversion)[0]

    def epsilon_and_order(
        self, delta: float, conversion: Conversion = Conversion.BALLE_2020
    ) -> tuple[float, float]:
        """(epsilon, the order alpha that achieved it)."""
        if not 0.0 < delta < 1.0:
            raise ValueError("delta must be in (0, 1)")
        best = (math.inf, self.orders[0])
        for alpha, rdp in zip(self.orders, self.epsilons, strict=True):
            eps = _rdp_to_dp(rdp, alpha, delta, conversion)
            if eps < best[0]:
                best = (eps, alpha)
        return (max(best[0], 0.0), best[1])


def _rdp_to_dp(rdp: float, alpha: float, delta: float, conversion: Conversion) -> float:
    if conversion is Conversion.MIRONOV_2017:
        return rdp + math.log(1.0 / delta) / (alpha - 1.0)
    return rdp + math.log1p(-1.0 / alpha) - (math.log(delta) + math.log(alpha)) / (alpha - 1.0)


def _curve(orders: Sequence[float], values: Sequence[float]) -> RdpCurve:
    return RdpCurve(tuple(float(a) for a in orders), tuple(float(v) for v in values))


def _log_sum_exp(terms: Sequence[float]) -> float:
    top = max(terms)
    return top + math.log(sum(math.exp(t - top) for t in terms))


def randomized_response_rdp(
    epsilon_per_coordinate: float, coordinates: int, orders: Sequence[float] = DEFAULT_ORDERS
) -> RdpCurve:
    """Exact RDP of ternary randomized response applied to ``coordinates`` coordinates.

    Per coordinate, the two rows P = (p, q, q) and Q = (q, p, q) of the RR matrix give
    D_alpha(P || Q) = log(p^alpha q^(1-alpha) + q^alpha p^(1-alpha) + q) / (alpha - 1); every
    pair of distinct inputs gives the same value by symmetry. Coordinates are randomized
    independently, so the divergences of the vector add: worst case is all of them differing.
    """
    if epsilon_per_coordinate < 0 or coordinates < 0:
        raise ValueError("epsilon and coordinates must be >= 0")
    eps = epsilon_per_coordinate
    log_norm = math.log(math.exp(eps) + 2.0)
    values = []
    for alpha in orders:
        if alpha * eps <= 1.0:
            # The mass is 1 + (expm1(a eps) + expm1((1-a) eps) - expm1(eps)) / (e^eps + 2):
            # this form keeps its relative accuracy as eps -> 0.
            excess = math.expm1(alpha * eps) + math.expm1((1.0 - alpha) * eps) - math.expm1(eps)
            log_mass = math.log1p(excess / (math.exp(eps) + 2.0))
        else:  # p^a q^(1-a) = q e^(a eps), q^a p^(1-a) = q e^((1-a) eps), q = e^-log_norm
            log_mass = _log_sum_exp([alpha * eps, (1.0 - alpha) * eps, 0.0]) - log_norm
        values.append(coordinates * max(log_mass, 0.0) / (alpha - 1.0))
    return _curve(orders, values)


def gaussian_rdp(
    sigma: float, sensitivity_l2: float = 1.0, orders: Sequence[float] = DEFAULT_ORDERS
) -> RdpCurve:
    """RDP of the Gaussian mechanism N(0, sigma^2): alpha Delta2^2 / (2 sigma^2)."""
    if sigma <= 0:
        raise ValueError("sigma must be > 0")
    return _curve(orders, [a * sensitivity_l2**2 / (2.0 * sigma**2) for a in orders])


def skellam_rdp(
    total_variance: float,
    sensitivity_l1: float,
    sensitivity_l2: float,
    orders: Sequence[float] = DEFAULT_ORDERS,
) -> RdpCurve:
    """RDP of releasing an integer vector plus symmetric Skellam noise of variance ``mu``.

    Agarwal, Kairouz, Liu 2021, Theorem 3.5 (integer alpha): see the module docstring.
    ``total_variance`` is the per-coordinate variance of the *sum* of all members' noise.
    """
    if total_variance <= 0:
        raise ValueError("total_variance must be > 0")
    mu, l1, l2sq = total_variance, sensitivity_l1, sensitivity_l2**2
    values = []
    for order in orders:
        alpha = math.ceil(order)
        values.append(
            alpha * l2sq / (2.0 * mu)
            + min(((2 * alpha - 1) * l2sq + 6.0 * l1) / (4.0 * mu**2), 3.0 * l1 / (2.0 * mu))
        )
    return _curve(orders, values)


def pure_dp_rdp(epsilon: float, orders: Sequence[float] = DEFAULT_ORDERS) -> RdpCurve:
    """An RDP curve valid for any epsilon-DP mechanism: min(epsilon, alpha epsilon^2 / 2)."""
    if epsilon < 0:
        raise ValueError("epsilon must be >= 0")
    return _curve(orders, [min(epsilon, a * epsilon**2 / 2.0) for a in orders])


@dataclass(frozen=True, slots=True)
class PrivacyBudget:
    """A participant's total privacy budget over its lifetime: (epsilon, delta)-DP."""

    epsilon: float
    delta: float
    conversion: Conversion = Conversion.BALLE_2020

    def __post_init__(self) -> None:
        if not self.epsilon > 0:
            raise ValueError("budget epsilon must be > 0")
        if not 0.0 < self.delta < 1.0:
            raise ValueError("budget delta must be in (0, 1)")


@dataclass(slots=True)
class ParticipantBudget:
    """One participant's ledger: what it has spent, and whether it may vote again.

    The participant runtime calls ``spend(cost)`` before sending a (noised) vote; if that
    raises ``BudgetExhausted`` it does not vote in that round, nor in any later round with a
    cost at least as large.
    """

    budget: PrivacyBudget
    orders: tuple[float, ...] = DEFAULT_ORDERS
    spent: RdpCurve = field(init=False)
    rounds_spent: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.spent = RdpCurve.zero(self.orders)

    @classmethod
    def resume(cls, budget: PrivacyBudget, spent: RdpCurve, rounds_spent: int) -> ParticipantBudget:
        """A ledger restored from storage (``spent`` and ``rounds_spent`` as saved).

        The participant must persist its ledger after every ``spend``: a ledger that starts
        from zero on every restart would let the budget be spent again.
        """
        if rounds_spent < 0:
            raise ValueError("rounds_spent must be >= 0")
        ledger = cls(budget, spent.orders)
        ledger.spent = spent
        ledger.rounds_spent = rounds_spent
        return ledger

    def epsilon_spent(self) -> float:
        """The epsilon (at the budget's delta) of everything spent so far."""
        if self.rounds_spent == 0:
            return 0.0
        return self.spent.epsilon(self.budget.delta, self.budget.conversion)

    def epsilon_after(self, cost: RdpCurve) -> float:
        """The epsilon the ledger would show after also spending ``cost``."""
        return (self.spent + cost).epsilon(self.budget.delta, self.budget.conversion)

    def can_spend(self, cost: RdpCurve) -> bool:
        return self.epsilon_after(cost) <= self.budget.epsilon

    def spend(self, cost: RdpCurve) -> None:
        """Record one round's cost, or raise ``BudgetExhausted`` and record nothing."""
        after = self.epsilon_after(cost)
        if after > self.budget.epsilon:
            raise BudgetExhausted(
                f"spending this round would reach epsilon {after:.4g} > budget "
                f"{self.budget.epsilon:.4g} at delta {self.budget.delta:.3g} "
                f"after {self.rounds_spent} rounds"
            )
        self.spent = self.spent + cost
        self.rounds_spent += 1

    def rounds_affordable(self, cost: RdpCurve, limit: int = 1_000_000) -> int:
        """How many more rounds of ``cost`` fit in the remaining budget (capped at ``limit``)."""

        def fits(rounds: int) -> bool:
            total = self.spent + cost.times(rounds)
            return total.epsilon(self.budget.delta, self.budget.conversion) <= self.budget.epsilon

        low, high = 0, 1
        while high <= limit and fits(high):
            low, high = high, 2 * high
        high = min(high, limit + 1)
        while high - low > 1:  # fits(low) holds, fits(high) fails or exceeds the limit
            middle = (low + high) // 2
            if fits(middle):
                low = middle
            else:
                high = middle
        return low


def total_epsilon(
    round_cost: RdpCurve,
    rounds: int,
    delta: float,
    conversion: Conversion = Conversion.BALLE_2020,
) -> float:
    """(epsilon at ``delta``) of ``rounds`` rounds of the same mechanism."""
    return round_cost.times(rounds).epsilon(delta, conversion)
