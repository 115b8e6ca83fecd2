"""The secure-aggregation input vector (DESIGN.md section 3 "Metrics reported with the
vote", section 5 phase 4 "MaskedInput"; the lead's protocol decision 4).

A participant's input is one vector in Z_{2^32} of length ``d + 5``:

    [ vote_0 .. vote_{d-1} | interactions | loss_hundredths | chars_typed
      | rank_selected | suggestions_displayed ]

The votes are the d ternary votes (or, with Skellam DP, vote plus integer noise); the
five metric fields are the participant's totals over the interactions it votes on,
fixed-point (the loss in hundredths, rounded) and **clipped** to :class:`MetricClip`
so that one participant cannot dominate the totals or wrap the ring. Every entry is
encoded signed with :func:`crypto.dp.encode_for_ring`, so the unmasked sum, read back
with :func:`crypto.dp.decode_from_ring`, gives the vote total and the metric totals.

The clip (per participant, per round, defaults of :data:`DEFAULT_CLIP`):

- interactions at most 100;
- chars typed at most 64 per (clipped) interaction, rank selected at most 50 per
  interaction, suggestions displayed at most 50 per interaction;
- loss at most 1000 per interaction, i.e. 100 000 hundredths per interaction;
- every field is nonnegative (negative values are clipped to 0).

With these caps a field's total over ``MAX_SUMMED_PARTICIPANTS`` = 200 participants
stays below 2^31 - 1 (at most 10^7 hundredths of loss per participant, x 200 = 2 x 10^9),
so the signed reading of the ring sum never wraps; a larger cohort should lower the
clip (``MetricClip``). The aggregator reports the metric totals as they decode.
Votes must satisfy |v| <= ``MAX_VOTE_MAGNITUDE``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from crypto.dp import decode_from_ring, encode_for_ring

METRIC_FIELDS = (
    "interactions",
    "loss_hundredths",
    "chars_typed",
    "rank_selected",
    "suggestions_displayed",
)
METRIC_COUNT = len(METRIC_FIELDS)
#: Largest vote entry (vote plus DP noise) a participant may encode.
MAX_VOTE_MAGNITUDE = 1 << 20
#: Cohort size below which no clipped metric total can wrap the signed ring.
MAX_SUMMED_PARTICIPANTS = 200


class PayloadError(ValueError):
    """A vote or metric vector does not fit the payload layout."""


@dataclass(frozen=True, slots=True)
class MetricClip:
    """Per-participant caps of the metric fields (see the module docstring)."""

    max_interactions: int = 100
    max_chars_per_interaction: int = 64
    max_rank_per_interaction: int = 50
    max_displayed_per_interaction: int = 50
    max_loss_per_interaction: float = 1000.0

    def __post_init__(self) -> None:
        caps = (
            self.max_interactions,
            self.max_chars_per_interaction,
            self.max_rank_per_interaction,
            self.max_displayed_per_interaction,
        )
        if any(cap < 1 for cap in caps) or not 0 < self.max_loss_per_interaction < 1e6:
            raise ValueError("metric caps must be positive (loss below 1e6 per interaction)")
        if self.max_interactions * self.max_loss_per_interaction * 100 > 2**31 // 200:
            raise ValueError("loss cap too large: totals of 200 participants would wrap")


DEFAULT_CLIP = MetricClip()


@dataclass(frozen=True, slots=True)
class ParticipantMetrics:
    """One participant's totals over the interactions it votes on (before clipping)."""

    interactions: int
    loss: float  # summed SVM loss at the announced weights
    chars_typed: int
    rank_selected: int  # summed 0-based rank of the selected suggestion (0 = top, as in 2018)
    suggestions_displayed: int

    def clipped(self, clip: MetricClip = DEFAULT_CLIP) -> NDArray[np.int64]:
        """The five fixed-point metric fields, clipped, in :data:`METRIC_FIELDS` order."""
        if not np.isfinite(self.loss):
            raise PayloadError("loss must be finite")
        count = min(max(int(self.interactions), 0), clip.max_interactions)
        loss_hundredths = round(
            min(max(float(self.loss), 0.0), count * clip.max_loss_per_interaction) * 100
        )
        return np.array(
            [
                count,
                loss_hundredths,
                min(max(int(self.chars_typed), 0), count * clip.max_chars_per_interaction),
                min(max(int(self.rank_selected), 0), count * clip.max_rank_per_interaction),
                min(
                    max(int(self.suggestions_displayed), 0),
                    count * clip.max_displayed_per_interaction,
                ),
            ],
            dtype=np.int64,
        )


@dataclass(frozen=True, slots=True)
class MetricTotals:
    """The metric fields summed over the survivors of a round (decoded, unclipped)."""

    interactions: int
    loss: float
    chars_typed: int
    rank_selected: int
    suggestions_displayed: int

    def mean_loss(self) -> float | None:
        return self.loss / self.interactions if self.interactions > 0 else None

    def mean_chars_typed(self) -> float | None:
        return self.chars_typed / self.interactions if self.interactions > 0 else None

    def mean_rank_selected(self) -> float | None:
        return self.rank_selected / self.interactions if self.interactions > 0 else None

    def mean_suggestions_displayed(self) -> float | None:
        return self.suggestions_displayed / self.interactions if self.interactions > 0 else None


def input_length(weight_count: int) -> int:
    """Length of the secure-aggregation input for a model of ``weight_count`` weights."""
    if weight_count < 1:
        raise PayloadError("a model has at least one weight")
    return weight_count + METRIC_COUNT


def encode_input(
    vote: NDArray[np.integer] | tuple[int, ...],
    metrics: ParticipantMetrics,
    clip: MetricClip = DEFAULT_CLIP,
) -> NDArray[np.uint32]:
    """The participant's input vector in Z_{2^32}: its vote, then its clipped metrics."""
    votes = np.asarray(vote)
    if votes.ndim != 1 or votes.size < 1 or not np.issubdtype(votes.dtype, np.integer):
        raise PayloadError("vote must be a non-empty one-dimensional integer vector")
    if np.any(np.abs(votes.astype(np.int64)) > MAX_VOTE_MAGNITUDE):
        raise PayloadError(
            f"vote entries must lie in [-{MAX_VOTE_MAGNITUDE}, {MAX_VOTE_MAGNITUDE}]"
        )
    values = np.concatenate([votes.astype(np.int64), metrics.clipped(clip)])
    return encode_for_ring(values)


def decode_total(
    total: NDArray[np.uint32], weight_count: int
) -> tuple[NDArray[np.int64], MetricTotals]:
    """Split an unmasked sum into the vote total (signed, length ``weight_count``) and
    the metric totals."""
    ring = np.asarray(total)
    if ring.shape != (input_length(weight_count),):
        raise PayloadError(f"sum has shape {ring.shape}, expected ({input_length(weight_count)},)")
    signed = decode_from_ring(ring)
    votes = signed[:weight_count].astype(np.int64)
    fields = [int(v) for v in signed[weight_count:]]
    totals = MetricTotals(
        interactions=fields[0],
        loss=fields[1] / 100.0,
        chars_typed=fields[2],
        rank_selected=fields[3],
        suggestions_displayed=fields[4],
    )
    return votes, totals


def metric_totals_problem(
    totals: MetricTotals, participants: int, clip: MetricClip = DEFAULT_CLIP
) -> str | None:
    """Why ``totals`` cannot be the sum of ``participants`` clipped payloads (a participant
    skipped its clip), or None. The aggregator then reports no metrics for the round."""
    count_cap = participants * clip.max_interactions
    if not 0 <= totals.interactions <= count_cap:
        return f"interactions total {totals.interactions} outside [0, {count_cap}]"
    bounds = {
        "loss": (totals.loss, totals.interactions * clip.max_loss_per_interaction),
        "chars_typed": (totals.chars_typed, totals.interactions * clip.max_chars_per_interaction),
        "rank_selected": (
            totals.rank_selected,
            totals.interactions * clip.max_rank_per_interaction,
        ),
        "suggestions_displayed": (
            totals.suggestions_displayed,
            totals.interactions * clip.max_displayed_per_interaction,
        ),
    }
    for name, (value, cap) in bounds.items():
        if not 0 <= value <= cap:
            return f"{name} total {value} outside [0, {cap}] for {totals.interactions} interactions"
    return None
