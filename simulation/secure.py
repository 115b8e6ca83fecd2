"""Secure aggregation of the simulation's votes (DESIGN.md sections 5 steps 2-6 and 6;
the secure-aggregation issue: ``fedrank simulate --secure``, ``--dropout P``).

Each round, the sampled voters become one crypto.secagg cohort (member ids 1..n in vote
order) run in this process with no transport (``crypto.secagg.run_in_process``):

* votes in {-1, 0, +1}^d are encoded into Z_{2^32} as signed integers (``to_ring``) and
  the total read back as signed int64 (``from_ring``), exact while n < 2^31;
* threshold t = ceil(``threshold_fraction`` * n), at least 1 (default 2/3: Bonawitz et
  al. analyse t > 2n/3 against a malicious server; docs/secure-aggregation.md);
* SecAgg+ (Bell et al. 2020: each member masks with ~2 log2 n neighbours) by default,
  or the complete graph (``secagg="full"``); on small cohorts both are the complete graph;
* ``dropout`` P: each member independently vanishes with probability P at a phase drawn
  uniformly from the five (AdvertiseKeys .. Unmasking) and sends nothing from then on.
  Who drops and when comes from a numpy generator seeded by the simulation (simulation
  randomness); keys, masks and shares stay OS-random inside crypto.secagg.

The total covers exactly the members whose masked input arrived (``AggregateSum``'s
survivors: those dropping at ConsistencyCheck or Unmasking are in it). Below t at any
phase the round aborts (:class:`AggregationAborted`) and the simulation keeps its model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from crypto.secagg import (
    AggregateSum,
    Phase,
    degree_for,
    from_ring,
    run_in_process,
    to_ring,
)
from simulation.aggregation import AggregationAborted, AggregationOutcome, VotesSummed

IntArray = NDArray[np.int64]
SecAggGraph = Literal["plus", "full"]
#: The phases a member can vanish at, in protocol order.
DROPOUT_PHASES: tuple[Phase, ...] = (
    Phase.ADVERTISE_KEYS,
    Phase.SHARE_KEYS,
    Phase.MASKED_INPUT_COLLECTION,
    Phase.CONSISTENCY_CHECK,
    Phase.UNMASKING,
)
DEFAULT_THRESHOLD_FRACTION = 2 / 3
#: Stream of the seed's generator that draws dropouts (the population uses the seed alone).
DROPOUT_STREAM = 1


@dataclass(frozen=True, slots=True)
class SecureConfig:
    """How the simulation's rounds are securely aggregated."""

    threshold_fraction: float = DEFAULT_THRESHOLD_FRACTION
    secagg: SecAggGraph = "plus"
    #: SecAgg+ neighbours per member; None: crypto.secagg's default (~2 log2 n).
    degree: int | None = None
    dropout: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold_fraction <= 1.0:
            raise ValueError("threshold fraction must lie in (0, 1]")
        if self.secagg not in ("plus", "full"):
            raise ValueError(f"unknown secure aggregation graph {self.secagg!r}")
        if not 0.0 <= self.dropout <= 1.0:
            raise ValueError("dropout probability must lie in [0, 1]")
        if self.degree is not None and self.degree < 2:
            raise ValueError("SecAgg+ degree must be at least 2")

    def threshold(self, members: int) -> int:
        """t for a cohort of ``members``: ceil(fraction * n), at least 1."""
        # The small tolerance keeps 2/3 * 30 = 20 at 20, not 21 (float rounding).
        return max(1, math.ceil(self.threshold_fraction * members - 1e-9))

    def as_dict(self) -> dict[str, object]:
        return {
            "threshold_fraction": self.threshold_fraction,
            "secagg": self.secagg,
            "degree": self.degree,
            "dropout": self.dropout,
        }


def draw_dropouts(rng: np.random.Generator, members: int, probability: float) -> dict[int, Phase]:
    """Member ids (1..members) that vanish, and from which phase."""
    if probability <= 0.0:
        return {}
    vanish = rng.random(members) < probability
    phases = rng.integers(0, len(DROPOUT_PHASES), members)
    return {int(m) + 1: DROPOUT_PHASES[int(phases[m])] for m in np.flatnonzero(vanish)}


class SecureSum:
    """:class:`simulation.aggregation.VoteAggregation` by crypto.secagg, in process."""

    def __init__(self, config: SecureConfig, rng: np.random.Generator | None = None) -> None:
        if config.dropout > 0.0 and rng is None:
            raise ValueError("dropouts need a seeded generator")
        self.config = config
        self._rng = rng
        #: The dropouts of the last round (member id -> phase), for reporting and tests.
        self.last_dropouts: dict[int, Phase] = {}

    @classmethod
    def seeded(cls, config: SecureConfig, seed: int) -> SecureSum:
        """Dropouts drawn from the simulation's seed (its own stream, so the population
        and the samples are those of a plain run with the same seed)."""
        return cls(config, np.random.default_rng([seed, DROPOUT_STREAM]))

    def degree(self, members: int) -> int | None:
        """The SecAgg+ degree: as configured, else the smallest ring whose neighbourhoods
        survive the *simulated* dropout rate (``crypto.secagg.degree_for``): a log-sized
        ring when nobody drops, rather than the library default sized for 30 % dropouts."""
        if self.config.secagg != "plus" or self.config.degree is not None:
            return self.config.degree
        return degree_for(members, self.config.dropout)

    def run_round(self, votes: Sequence[IntArray], round_number: int) -> AggregationOutcome:
        if not votes:
            raise ValueError("no votes to aggregate")
        members = len(votes)
        dropouts = (
            draw_dropouts(self._rng, members, self.config.dropout) if self._rng is not None else {}
        )
        self.last_dropouts = dropouts
        outcome = run_in_process(
            [to_ring(v) for v in votes],
            self.config.threshold(members),
            dropouts=dropouts,
            secagg_plus=self.config.secagg == "plus",
            degree=self.degree(members),
            round_number=round_number,
        )
        if isinstance(outcome, AggregateSum):
            return VotesSummed(
                total=from_ring(outcome.total),
                included=tuple(member - 1 for member in outcome.survivors),
            )
        reason = outcome.reason.value
        detail = outcome.detail
        if not detail.startswith(reason):
            detail = f"{reason} at {outcome.phase.value}: {detail}"
        return AggregationAborted(reason=detail)
