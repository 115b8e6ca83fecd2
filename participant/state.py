"""What a participant keeps between runs (DESIGN.md sections 6 and 7), and the pinned
aggregator key.

With ``--state DIR`` each participant ``<id>`` has ``DIR/<id>/``:

- ``identity.key``: its Ed25519 identity (32-byte seed, mode 0600), made on first start;
- ``state.json``: its privacy ledger (``participant.privacy``), the last round it
  contributed to, and for ``--places`` the input-history use counts already contributed.
  Written atomically (temporary file, fsync, rename, fsync of the directory) after every
  contribution, so a crash never leaves half a ledger and a restart never spends the
  budget again.

Without ``--state`` all of this lives in memory only (identity fresh per run).

The aggregator's public key (``--aggregator-key FILE``) is read as ``fedrank aggregator
--export-key`` may print it: a PEM ``PUBLIC KEY`` (SubjectPublicKeyInfo, Ed25519), 64 hex
characters, base64 of the 32 raw bytes, or the 32 raw bytes themselves.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from crypto.accountant import ParticipantBudget, PrivacyBudget
from crypto.hazmat import primitives
from participant.privacy import ledger_from_json, ledger_to_json

STATE_FILE = "state.json"
IDENTITY_FILE = "identity.key"
STATE_FORMAT = 1


class StateError(Exception):
    """The state directory or a key file is unusable; the message says why."""


def load_aggregator_key(path: str | os.PathLike[str]) -> bytes:
    """The aggregator's raw 32-byte Ed25519 public key from ``path`` (formats above)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise StateError(f"cannot read the aggregator key {path}: {exc.strerror or exc}") from exc
    text = data.strip()
    if text.startswith(b"-----BEGIN"):
        try:
            key = load_pem_public_key(text)
        except ValueError as exc:
            raise StateError(f"{path} is not a PEM public key: {exc}") from exc
        if not isinstance(key, Ed25519PublicKey):
            raise StateError(f"{path} holds a {type(key).__name__}, not an Ed25519 key")
        return key.public_bytes_raw()
    if len(data) == primitives.KEY_SIZE:
        return data
    for decode in (bytes.fromhex, base64.b64decode):
        try:
            raw = decode(text.decode("ascii"))
        except (ValueError, binascii.Error, UnicodeDecodeError):
            continue
        if len(raw) == primitives.KEY_SIZE:
            return bytes(raw)
    raise StateError(
        f"{path} is not an Ed25519 public key (PEM, 64 hex characters, base64 or 32 bytes)"
    )


def _write_atomically(path: Path, data: bytes, mode: int = 0o600) -> None:
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


@dataclass(slots=True)
class ParticipantRecord:
    """The persisted part of one participant."""

    identity_key: bytes
    ledger: ParticipantBudget | None = None
    last_contributed_round: int = -1
    places_contributed: dict[tuple[str, str], float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": STATE_FORMAT,
            "ledger": None if self.ledger is None else ledger_to_json(self.ledger),
            "last_contributed_round": self.last_contributed_round,
            "places_contributed": [[i, u, c] for (i, u), c in self.places_contributed.items()],
        }


class ParticipantStore:
    """Loads and saves one participant's record; ``directory`` None keeps it in memory."""

    def __init__(self, directory: Path | None, participant_id: str) -> None:
        self.directory = None if directory is None else directory / participant_id

    def load(self, budget: PrivacyBudget | None) -> ParticipantRecord:
        """The saved record (a fresh one on first start). A saved ledger is kept even if
        ``budget`` differs: spend already made is never forgotten (the new budget's
        limits apply to it)."""
        if self.directory is None:
            key = primitives.generate_signing_key()
            return ParticipantRecord(key, None if budget is None else ParticipantBudget(budget))
        try:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            key = self._identity()
            state_path = self.directory / STATE_FILE
            saved = json.loads(state_path.read_text()) if state_path.exists() else None
        except OSError as exc:
            raise StateError(f"state directory {self.directory} unusable: {exc}") from exc
        except json.JSONDecodeError as exc:
            raise StateError(f"{self.directory / STATE_FILE} is not JSON: {exc}") from exc
        record = ParticipantRecord(key)
        if saved is not None:
            record = self._parse(key, saved)
        if budget is not None:
            if record.ledger is None:
                record.ledger = ParticipantBudget(budget)
            elif record.ledger.budget != budget:
                record.ledger = ParticipantBudget.resume(
                    budget, record.ledger.spent, record.ledger.rounds_spent
                )
        return record

    def _identity(self) -> bytes:
        assert self.directory is not None
        path = self.directory / IDENTITY_FILE
        if path.exists():
            key = path.read_bytes()
            if len(key) != primitives.KEY_SIZE:
                raise StateError(f"{path} is not a 32-byte Ed25519 key")
            return key
        key = primitives.generate_signing_key()
        _write_atomically(path, key)
        return key

    def _parse(self, key: bytes, saved: Any) -> ParticipantRecord:
        try:
            if saved.get("format") != STATE_FORMAT:
                raise ValueError(f"unknown state format {saved.get('format')!r}")
            ledger = None if saved["ledger"] is None else ledger_from_json(saved["ledger"])
            places = {(str(i), str(u)): float(c) for i, u, c in saved["places_contributed"]}
            return ParticipantRecord(key, ledger, int(saved["last_contributed_round"]), places)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise StateError(f"{self.directory}/{STATE_FILE} is malformed: {exc}") from exc

    def save(self, record: ParticipantRecord) -> None:
        if self.directory is None:
            return
        data = json.dumps(record.to_json(), indent=1).encode()
        try:
            _write_atomically(self.directory / STATE_FILE, data)
        except OSError as exc:
            raise StateError(f"cannot write {self.directory / STATE_FILE}: {exc}") from exc
