"""What a participant keeps (participant/state.py), its pinned aggregator key, and its
privacy (participant/privacy.py)."""

from __future__ import annotations

import base64
import json
import stat
from pathlib import Path

import numpy as np
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from broker.messages import PrivacySettings
from crypto.accountant import ParticipantBudget, PrivacyBudget, randomized_response_rdp
from crypto.dp import SeededRandomSource
from participant.privacy import (
    ledger_from_json,
    ledger_to_json,
    privatize,
    refusal,
    round_cost,
)
from participant.state import (
    IDENTITY_FILE,
    STATE_FILE,
    ParticipantStore,
    StateError,
    load_aggregator_key,
)

PRIVATE = ed25519.Ed25519PrivateKey.generate()
RAW = PRIVATE.public_key().public_bytes_raw()


@pytest.mark.parametrize(
    "content",
    [
        PRIVATE.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
        RAW.hex().encode() + b"\n",
        base64.b64encode(RAW) + b"\n",
        RAW,
    ],
    ids=["pem", "hex", "base64", "raw"],
)
def test_aggregator_key_formats(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "aggregator.pub"
    path.write_bytes(content)
    assert load_aggregator_key(path) == RAW


def test_aggregator_key_errors(tmp_path: Path) -> None:
    with pytest.raises(StateError, match="cannot read"):
        load_aggregator_key(tmp_path / "missing.pub")
    garbage = tmp_path / "garbage.pub"
    garbage.write_text("not a key at all")
    with pytest.raises(StateError, match="not an Ed25519 public key"):
        load_aggregator_key(garbage)
    other = tmp_path / "ec.pub"
    other.write_bytes(
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    with pytest.raises(StateError, match="not an Ed25519 key"):
        load_aggregator_key(other)


def test_store_keeps_identity_and_ledger(tmp_path: Path) -> None:
    budget = PrivacyBudget(epsilon=5.0, delta=1e-6)
    store = ParticipantStore(tmp_path, "p-0")
    record = store.load(budget)
    key_path = tmp_path / "p-0" / IDENTITY_FILE
    assert key_path.read_bytes() == record.identity_key
    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600
    assert record.ledger is not None
    record.ledger.spend(randomized_response_rdp(0.1, 22))
    record.last_contributed_round = 7
    record.places_contributed = {("dash", "http://x/"): 1.9}
    store.save(record)
    again = ParticipantStore(tmp_path, "p-0").load(budget)
    assert again.identity_key == record.identity_key
    assert again.last_contributed_round == 7
    assert again.places_contributed == {("dash", "http://x/"): 1.9}
    assert again.ledger is not None and again.ledger.rounds_spent == 1
    assert again.ledger.epsilon_spent() == pytest.approx(record.ledger.epsilon_spent())
    # a different budget later keeps what was spent
    smaller = ParticipantStore(tmp_path, "p-0").load(PrivacyBudget(epsilon=1.0, delta=1e-6))
    assert smaller.ledger is not None and smaller.ledger.rounds_spent == 1
    assert smaller.ledger.budget.epsilon == 1.0
    # no temporary files are left behind
    assert sorted(p.name for p in (tmp_path / "p-0").iterdir()) == [IDENTITY_FILE, STATE_FILE]


def test_store_refuses_malformed_state(tmp_path: Path) -> None:
    ParticipantStore(tmp_path, "p-0").load(None)
    (tmp_path / "p-0" / STATE_FILE).write_text(json.dumps({"format": 99}))
    with pytest.raises(StateError, match="malformed"):
        ParticipantStore(tmp_path, "p-0").load(None)
    (tmp_path / "p-0" / STATE_FILE).write_text("{")
    with pytest.raises(StateError, match="not JSON"):
        ParticipantStore(tmp_path, "p-0").load(None)


def test_store_in_memory_makes_fresh_identities() -> None:
    first = ParticipantStore(None, "m-0").load(None)
    second = ParticipantStore(None, "m-0").load(None)
    assert first.identity_key != second.identity_key
    ParticipantStore(None, "m-0").save(first)  # a no-op, no error


def test_ledger_json_round_trip() -> None:
    ledger = ParticipantBudget(PrivacyBudget(epsilon=3.0, delta=1e-5))
    ledger.spend(randomized_response_rdp(0.05, 22))
    ledger.spend(randomized_response_rdp(0.05, 22))
    restored = ledger_from_json(json.loads(json.dumps(ledger_to_json(ledger))))
    assert restored.rounds_spent == 2
    assert restored.spent == ledger.spent
    with pytest.raises(ValueError, match="malformed"):
        ledger_from_json({"epsilon": 1.0})


# --- privacy ----------------------------------------------------------------------------


VOTE = np.array([1, -1, 0, 1, 0, -1] * 4, dtype=np.int64)


def test_no_dp_leaves_the_vote() -> None:
    settings = PrivacySettings()
    assert np.array_equal(privatize(VOTE, settings), VOTE)
    assert round_cost(settings, VOTE.size, 5) is None
    assert refusal(None, None, settings) is None
    ledger = ParticipantBudget(PrivacyBudget(epsilon=1.0, delta=1e-6))
    reason = refusal(ledger, None, settings)
    assert reason is not None and "no differential privacy" in reason


def test_randomized_response_changes_some_coordinates() -> None:
    settings = PrivacySettings(mode="rr", rr_epsilon=0.1)
    noisy = privatize(VOTE, settings, SeededRandomSource(1))
    assert set(noisy.tolist()) <= {-1, 0, 1}
    assert not np.array_equal(noisy, VOTE)
    strong = privatize(VOTE, PrivacySettings(mode="rr", rr_epsilon=40.0), SeededRandomSource(1))
    assert np.array_equal(strong, VOTE)
    assert round_cost(settings, VOTE.size, 5) == randomized_response_rdp(0.1, VOTE.size)


def test_skellam_noise_is_added_and_charged_for_the_quorum() -> None:
    settings = PrivacySettings(mode="skellam", skellam_variance=4.0)
    noisy = privatize(VOTE, settings, SeededRandomSource(2))
    assert noisy.dtype == np.int64 and not np.array_equal(noisy, VOTE)
    few = round_cost(settings, VOTE.size, quorum=2)
    many = round_cost(settings, VOTE.size, quorum=50)
    assert few is not None and many is not None
    # more honest survivors carry more noise: a round costs less
    delta = 1e-6
    assert many.epsilon(delta) < few.epsilon(delta)


def test_refusal_once_the_budget_cannot_pay() -> None:
    cost = randomized_response_rdp(0.5, 22)
    ledger = ParticipantBudget(PrivacyBudget(epsilon=16.0, delta=1e-6))
    settings = PrivacySettings(mode="rr", rr_epsilon=0.5)
    assert refusal(ledger, cost, settings) is None
    ledger.spend(cost)
    reason = refusal(ledger, cost, settings)
    assert reason is not None and "privacy budget spent" in reason
