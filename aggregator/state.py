"""The aggregator's durable state (DESIGN.md section 7).

After every round the aggregator writes its state atomically: the model (spec name,
weights, version), the optimizer's Rprop state and the round counter. A restarted
aggregator resumes after the last finished round; a round that was in flight when it
stopped was never written, so it is simply gone (aborted) and the version never goes back.

The write is the classic durable replace: write a temporary file in the same directory,
fsync it, ``os.replace`` it over the old one, fsync the directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

STATE_FILE = "state.json"
ROUND_LOG_FILE = "rounds.jsonl"
SIGNING_KEY_FILE = "model-signing-key.pem"


class StateError(Exception):
    """The state directory is unusable; the message says why in one line."""


class AggregatorState(BaseModel):
    """What survives a restart."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    version: int
    next_round: int
    optimizer: dict[str, Any]
    privacy_spent: float = 0.0
    #: the composed RDP curve of the rounds released so far, at crypto.accountant's
    #: DEFAULT_ORDERS (empty before any round with DP); privacy_spent is its epsilon
    privacy_rdp: list[float] = []


class StateDirectory:
    """The aggregator's ``--state DIR``: state file, round log, signing key."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def state_file(self) -> Path:
        return self.path / STATE_FILE

    @property
    def round_log_file(self) -> Path:
        return self.path / ROUND_LOG_FILE

    @property
    def signing_key_file(self) -> Path:
        return self.path / SIGNING_KEY_FILE

    def ensure(self) -> None:
        """Create the directory if needed and check it is writable."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            probe = self.path / ".write-probe"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise StateError(f"state directory {self.path} is unusable: {exc.strerror}") from exc

    def load(self) -> AggregatorState | None:
        """The last written state, or None on a first start."""
        try:
            raw = self.state_file.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StateError(f"cannot read {self.state_file}: {exc.strerror}") from exc
        try:
            return AggregatorState.model_validate(json.loads(raw))
        except (json.JSONDecodeError, ValidationError) as exc:
            raise StateError(f"{self.state_file} is corrupt: {exc}") from exc

    def save(self, state: AggregatorState) -> None:
        """Atomically replace the state file."""
        data = state.model_dump_json(indent=1).encode("utf-8")
        fd, tmp = tempfile.mkstemp(prefix=".state-", dir=self.path)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.state_file)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        dir_fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
