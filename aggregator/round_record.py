"""What one round saw, gathered while it runs and written as its round-log line when it
ends (DESIGN.md section 7; every field is described in docs/reading-round-logs.md).

Also the aggregator's privacy ledger (DESIGN.md section 6): the RDP curve of each
released sum is composed onto the curve of the rounds before. With Skellam noise the
sum of ``survivors`` members' noise of variance v is Skellam(survivors * v), a central
guarantee for every participant (assuming the survivors added their noise honestly);
with randomized response the figure is the local guarantee of a participant that took
part in every round so far (each participant's own accountant keeps its exact spend).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aggregator.config import CoordinatorConfig
from aggregator.optimizer import StepApplied
from aggregator.roundlog import RoundMetrics, RoundRecord
from broker.payload import MetricTotals
from crypto.accountant import RdpCurve, randomized_response_rdp, skellam_rdp
from crypto.dp import vote_sensitivity

if TYPE_CHECKING:
    from aggregator.coordinator import ModelState


def round_cost(config: CoordinatorConfig, survivors: int, dimension: int) -> RdpCurve | None:
    """The RDP curve of releasing one round's sum (None without DP)."""
    privacy = config.privacy
    if privacy.mode == "skellam" and privacy.skellam_variance is not None:
        sensitivity = vote_sensitivity(dimension)
        return skellam_rdp(survivors * privacy.skellam_variance, sensitivity.l1, sensitivity.l2)
    if privacy.mode == "rr" and privacy.rr_epsilon is not None:
        return randomized_response_rdp(privacy.rr_epsilon, dimension)
    return None


@dataclass
class RoundTracker:
    """The facts of one round so far; turns into a :class:`RoundRecord` at its end."""

    number: int
    config: CoordinatorConfig
    spec_name: str
    version: int
    weights: tuple[float, ...]
    opened_at: float
    wall_offset: float = 0.0
    checked_in: int = 0
    selected_ids: list[str] = field(default_factory=list)
    survivor_ids: list[str] = field(default_factory=list)
    vote_totals: list[int] | None = None
    metrics: MetricTotals | None = None
    metrics_problem: str | None = None
    rejections: Counter[str] = field(default_factory=Counter)
    phase_ends: dict[str, float] = field(default_factory=dict)

    def rejected(self, category: str) -> None:
        self.rejections[category] += 1

    def phase_ended(self, phase: str, now: float) -> None:
        self.phase_ends.setdefault(phase, now)

    def privacy_after(
        self, previous: RdpCurve | None, survivors: int, dimension: int
    ) -> tuple[RdpCurve | None, float | None]:
        """The composed curve after this round's release, and this round's epsilon."""
        cost = round_cost(self.config, survivors, dimension)
        if cost is None:
            return previous, None
        composed = cost if previous is None else previous + cost
        return composed, cost.epsilon(self.config.privacy.delta)

    def _phase_seconds(self) -> dict[str, float]:
        seconds: dict[str, float] = {}
        start = self.opened_at
        for phase, end in sorted(self.phase_ends.items(), key=lambda item: item[1]):
            seconds[phase] = round(max(end - start, 0.0), 6)
            start = end
        return seconds

    def _base(self, now: float) -> dict[str, object]:
        selected = len(self.selected_ids)
        survivors = set(self.survivor_ids)
        return {
            "round": self.number,
            "model": self.spec_name,
            "version_before": self.version,
            "started_at": self.opened_at + self.wall_offset,
            "ended_at": now + self.wall_offset,
            "phase_seconds": self._phase_seconds(),
            "checked_in": self.checked_in,
            "selected": selected,
            "survived": len(self.survivor_ids),
            "dropped": selected - len(self.survivor_ids) if self.survivor_ids else 0,
            "quorum": self.config.quorum,
            "weights_before": list(self.weights),
            "rejected_messages": sum(self.rejections.values()),
            "rejected_reasons": dict(sorted(self.rejections.items())),
            "survivor_ids": list(self.survivor_ids),
            "dropped_ids": [p for p in self.selected_ids if survivors and p not in survivors],
            "cohort_target": self.config.cohort_size,
            "secagg_plus": self.config.secagg_plus,
            "dp_mode": self.config.privacy.mode,
            "vote_totals": self.vote_totals,
            "metrics": _metrics(self.metrics),
            "metrics_problem": self.metrics_problem,
        }

    def completed(
        self, step: StepApplied, model: ModelState, epsilon_round: float | None, now: float
    ) -> RoundRecord:
        epsilon = None
        if model.privacy is not None:
            epsilon = model.privacy.epsilon(self.config.privacy.delta)
        return RoundRecord.model_validate(
            {
                **self._base(now),
                "version_after": model.version,
                "outcome": "completed",
                "direction": list(step.direction),
                "steps": list(step.state.steps),
                "weights_after": list(step.state.weights),
                "epsilon_spent": epsilon,
                "epsilon_round": epsilon_round,
            }
        )

    def aborted(self, reason: str, phase: str, now: float) -> RoundRecord:
        return RoundRecord.model_validate(
            {
                **self._base(now),
                "version_after": self.version,
                "outcome": "aborted",
                "abort_reason": reason,
                "abort_phase": phase,
                "weights_after": list(self.weights),
            }
        )


def _metrics(totals: MetricTotals | None) -> RoundMetrics:
    if totals is None:
        return RoundMetrics()
    return RoundMetrics(
        interactions=totals.interactions,
        mean_loss=totals.mean_loss(),
        mean_chars_typed=totals.mean_chars_typed(),
        mean_rank_selected=totals.mean_rank_selected(),
        mean_suggestions=totals.mean_suggestions_displayed(),
    )
