"""The aggregator's round configuration (DESIGN.md section 5: cohort size, quorum t, phase
deadlines; section 6: SecAgg+ and DP settings), as one frozen dataclass that
``fedrank aggregator`` builds from its flags and environment variables.

Timing: the check-in window lasts ``check_in_seconds``, counted from the first check-in
of the round (a round announced while nobody listens waits, re-announcing every
``reannounce_seconds``), and closes early once ``cohort_size`` participants have
checked in. Each secure-aggregation phase (AdvertiseKeys, ShareKeys, MaskedInput,
ConsistencyCheck, Unmask) then lasts at most ``phase_seconds`` and ends as soon as
every member it waits for has answered.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from aggregator.optimizer import RpropConfig
from broker.messages import (
    LearningObjective,
    PhaseDeadlines,
    PrivacySettings,
    RoundParameters,
    SecureAggregationSettings,
)

#: SecAgg phases after check-in: AdvertiseKeys, ShareKeys, MaskedInput,
#: ConsistencyCheck, Unmask.
SECAGG_PHASES = 5
#: The poisoning bound's slack under Skellam noise, in standard deviations of the summed
#: noise (crypto.dp.skellam_tail_bound: below 1e-6 per coordinate for a total variance
#: of 1, below 1e-12 from a total variance of about 100).
NOISE_SLACK_SIGMAS = 8.0


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    """Everything that shapes a round; see the module docstring for the timing."""

    model: str = "firefox-2018"
    cohort_size: int = 10
    quorum: int = 6
    min_checkins: int | None = None  # None: the quorum
    check_in_seconds: float = 5.0
    phase_seconds: float = 10.0
    reannounce_seconds: float = 2.0
    secagg_plus: bool = False
    degree: int | None = None
    privacy: PrivacySettings = field(default_factory=PrivacySettings)
    objective: LearningObjective = field(default_factory=LearningObjective)
    optimizer: RpropConfig = field(default_factory=RpropConfig.default)
    #: check ``Delivery.user_id == "participant-<id>"`` (per-participant broker users)
    check_user_ids: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.quorum <= self.cohort_size:
            raise ValueError(f"need 1 <= quorum ({self.quorum}) <= cohort ({self.cohort_size})")
        if self.min_checkins is not None and not (
            self.quorum <= self.min_checkins <= self.cohort_size
        ):
            raise ValueError("need quorum <= min check-ins <= cohort size")
        for name in ("check_in_seconds", "phase_seconds", "reannounce_seconds"):
            value = getattr(self, name)
            if not 0 < value < math.inf:
                raise ValueError(f"{name} must be positive and finite, got {value}")
        if self.degree is not None and self.degree < 2:
            raise ValueError("SecAgg+ degree must be at least 2")

    @property
    def least_checkins(self) -> int:
        return self.min_checkins if self.min_checkins is not None else self.quorum

    def deadlines(self) -> PhaseDeadlines:
        """What the announcement tells participants: seconds after check-in opens by which
        each phase ends at the latest (AdvertiseKeys counts with ShareKeys)."""
        start = self.check_in_seconds
        step = self.phase_seconds
        return PhaseDeadlines(
            check_in=start,
            share_keys=start + 2 * step,
            masked_input=start + 3 * step,
            consistency_check=start + 4 * step,
            unmask=start + 5 * step,
        )

    def round_parameters(self) -> RoundParameters:
        return RoundParameters(
            cohort_size=self.cohort_size,
            quorum=self.quorum,
            deadlines=self.deadlines(),
            secure_aggregation=SecureAggregationSettings(
                secagg_plus=self.secagg_plus, degree=self.degree
            ),
            privacy=self.privacy,
            objective=self.objective,
        )

    def invitation_lifetime(self) -> float:
        """Seconds a member may wait for the rest of its round after its invitation."""
        return SECAGG_PHASES * self.phase_seconds + self.check_in_seconds

    def noise_slack(self, survivors: int) -> int:
        """Poisoning-bound slack for a sum carrying the survivors' Skellam noise."""
        variance = self.privacy.skellam_variance
        if self.privacy.mode != "skellam" or variance is None:
            return 0
        return math.ceil(NOISE_SLACK_SIGMAS * math.sqrt(survivors * variance))
