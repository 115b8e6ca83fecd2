"""The aggregator's round log (DESIGN.md section 7): one JSON line per round, append-only.

Each line is a ``RoundRecord``: what a person watching a study needs to see about one
round — who took part, how each phase went, whether the round completed or why it
aborted, the vote totals and the step the optimizer took, the aggregate metrics and the
privacy spent. ``fedrank rounds`` reads it back.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

PHASES: tuple[str, ...] = (
    "announce",
    "check_in",
    "share_keys",
    "masked_input",
    "consistency_check",
    "unmask",
    "step",
)


class RoundMetrics(BaseModel):
    """Aggregate metrics of the round's survivors, from the secure sum (only totals)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    interactions: int = 0
    mean_loss: float | None = None
    mean_chars_typed: float | None = None
    mean_rank_selected: float | None = None
    mean_suggestions: float | None = None


class RoundRecord(BaseModel):
    """One round, as logged when it ends (completed or aborted)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    round: int
    model: str
    version_before: int
    version_after: int
    started_at: float
    ended_at: float
    phase_seconds: dict[str, float] = Field(default_factory=dict)
    checked_in: int = 0
    selected: int = 0
    survived: int = 0
    dropped: int = 0
    quorum: int = 0
    outcome: Literal["completed", "aborted"]
    abort_reason: str | None = None
    vote_totals: list[int] | None = None
    direction: list[int] | None = None
    steps: list[float] | None = None
    weights_before: list[float]
    weights_after: list[float]
    metrics: RoundMetrics = Field(default_factory=RoundMetrics)
    epsilon_spent: float | None = None
    rejected_messages: int = 0
    # Added with the running aggregator (docs/reading-round-logs.md); all optional so
    # older lines still read.
    survivor_ids: list[str] = Field(default_factory=list)
    dropped_ids: list[str] = Field(default_factory=list)
    abort_phase: str | None = None
    rejected_reasons: dict[str, int] = Field(default_factory=dict)
    cohort_target: int | None = None
    secagg_plus: bool | None = None
    dp_mode: str | None = None
    epsilon_round: float | None = None
    metrics_problem: str | None = None


class RoundLogError(Exception):
    """The round log could not be read: names the file and line."""


class RoundLog:
    """Append-only JSON lines at ``path``. Each append is one ``write`` of one line,
    flushed and fsynced, so a crash leaves at most a torn last line, which readers skip
    with a warning rather than losing the rest."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, record: RoundRecord) -> None:
        line = record.model_dump_json() + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)

    def read(self) -> list[RoundRecord]:
        return list(self.iter_records())

    def iter_records(self, start_line: int = 0) -> Iterator[RoundRecord]:
        """Records from line ``start_line`` (0-based) on; a torn final line is skipped."""
        if not self.path.exists():
            return
        lines = self.path.read_text(encoding="utf-8").splitlines(keepends=True)
        for number, line in enumerate(lines[start_line:], start=start_line + 1):
            if not line.endswith("\n"):
                return  # torn last line of a crash: the next append starts a fresh line
            try:
                yield RoundRecord.model_validate(json.loads(line))
            except (json.JSONDecodeError, ValidationError) as exc:
                raise RoundLogError(f"{self.path}:{number}: not a round record: {exc}") from exc
