"""The participant's differential privacy (DESIGN.md section 6; docs/privacy.md): noise
on its vote before masking, and its own privacy ledger.

The round's DP settings come from the signed announcement
(``broker.messages.PrivacySettings``):

- ``rr``: ternary randomized response on every coordinate with ``rr_epsilon``
  (``crypto.dp.randomized_response``); cost per round: the exact RDP curve of RR over d
  coordinates (``randomized_response_rdp``).
- ``skellam``: Skellam noise of variance ``skellam_variance`` on every coordinate
  (``crypto.dp.skellam_noise``); the sum over at least ``quorum`` honest survivors carries
  Skellam noise of variance ``quorum * skellam_variance``, so the cost charged is
  ``skellam_rdp(quorum * variance, L1, L2)`` with the replace-one sensitivities of a vote
  (``vote_sensitivity(d)``): the quorum is the announced lower bound on survivors.
- ``none``: no noise and no guarantee: a participant with a budget never pays for such
  a round (it does not check in); without a budget it votes as the 2018 study did.

The ledger is ``crypto.accountant.ParticipantBudget``; :func:`ledger_to_json` /
:func:`ledger_from_json` persist it (``participant/state.py`` writes it atomically after
every spend).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from broker.messages import PrivacySettings
from crypto.accountant import (
    Conversion,
    ParticipantBudget,
    PrivacyBudget,
    RdpCurve,
    randomized_response_rdp,
    skellam_rdp,
)
from crypto.dp import (
    SYSTEM_RANDOM,
    RandomSource,
    randomized_response,
    skellam_noise,
    vote_sensitivity,
)

IntArray = NDArray[np.int64]


def round_cost(settings: PrivacySettings, dimension: int, quorum: int) -> RdpCurve | None:
    """The RDP cost of one round's vote under ``settings``; None when it has no DP."""
    if settings.mode == "rr" and settings.rr_epsilon is not None:
        return randomized_response_rdp(settings.rr_epsilon, dimension)
    if settings.mode == "skellam" and settings.skellam_variance is not None:
        sensitivity = vote_sensitivity(dimension)
        return skellam_rdp(
            max(quorum, 1) * settings.skellam_variance, sensitivity.l1, sensitivity.l2
        )
    return None


def privatize(
    vote: IntArray, settings: PrivacySettings, rng: RandomSource = SYSTEM_RANDOM
) -> IntArray:
    """The vote as sent: randomized, noised, or unchanged (int64)."""
    values = np.asarray(vote, dtype=np.int64)
    if settings.mode == "rr" and settings.rr_epsilon is not None:
        return randomized_response(values, settings.rr_epsilon, rng)
    if settings.mode == "skellam" and settings.skellam_variance is not None:
        noise = skellam_noise(values.shape[0], settings.skellam_variance, rng)
        return np.asarray(values + noise, dtype=np.int64)
    return values.copy()


def refusal(
    ledger: ParticipantBudget | None, cost: RdpCurve | None, settings: PrivacySettings
) -> str | None:
    """Why this participant must not vote in a round costing ``cost``, or None."""
    if ledger is None:
        return None
    if cost is None:
        return f"the round has no differential privacy (mode {settings.mode}) and a budget is set"
    if not ledger.can_spend(cost):
        return (
            f"privacy budget spent: epsilon {ledger.epsilon_spent():.4g} of "
            f"{ledger.budget.epsilon:.4g} after {ledger.rounds_spent} rounds; another round "
            f"would reach {ledger.epsilon_after(cost):.4g}"
        )
    return None


def ledger_to_json(ledger: ParticipantBudget) -> dict[str, Any]:
    return {
        "epsilon": ledger.budget.epsilon,
        "delta": ledger.budget.delta,
        "conversion": ledger.budget.conversion.value,
        "orders": list(ledger.spent.orders),
        "spent": list(ledger.spent.epsilons),
        "rounds_spent": ledger.rounds_spent,
    }


def ledger_from_json(data: dict[str, Any]) -> ParticipantBudget:
    """A ledger as saved by :func:`ledger_to_json`; ValueError if malformed."""
    try:
        budget = PrivacyBudget(
            float(data["epsilon"]), float(data["delta"]), Conversion(data["conversion"])
        )
        spent = RdpCurve(
            tuple(float(a) for a in data["orders"]), tuple(float(v) for v in data["spent"])
        )
        return ParticipantBudget.resume(budget, spent, int(data["rounds_spent"]))
    except (KeyError, TypeError) as exc:
        raise ValueError(f"malformed privacy ledger: {exc!r}") from exc
