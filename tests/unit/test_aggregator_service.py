"""The aggregator's loop (aggregator/service.py) over the in-memory broker: rounds run end
to end with crypto clients answering from their queues, state and round log are written,
a restart resumes, garbage is counted, a stop aborts the round in flight, and the
signing key is kept private."""

from __future__ import annotations

import json
import stat
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from aggregator.config import CoordinatorConfig
from aggregator.roundlog import RoundLog
from aggregator.service import AggregatorService, ServiceOptions
from aggregator.signing import load_or_create_signing_key, public_key_pem
from aggregator.state import StateDirectory, StateError
from broker.memory import MemoryBroker
from broker.messages import PrivacySettings, load_aggregator_public_key
from broker.topology import (
    SUBMIT_EXCHANGE,
    SUBMIT_ROUTING_KEY,
    declare_core,
    declare_participant,
)
from crypto.accountant import skellam_rdp
from crypto.dp import vote_sensitivity
from tests.unit.test_aggregator_support import Member, serve

D = 22
CONFIG = CoordinatorConfig(cohort_size=5, quorum=3, check_in_seconds=2.0, phase_seconds=5.0)


@dataclass
class Run:
    broker: MemoryBroker
    state: StateDirectory
    members: dict[str, Member]


def pinned_key(state: StateDirectory) -> bytes:
    state.ensure()
    private = load_or_create_signing_key(state.signing_key_file)
    return load_aggregator_public_key(public_key_pem(private).encode())


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Run]:
    broker = MemoryBroker()
    setup = broker.connect()
    declare_core(setup)
    state = StateDirectory(tmp_path / "state")
    key = pinned_key(state)
    rng = np.random.default_rng(5)  # votes are test data, not keys
    members = {
        f"m{i}": Member(f"m{i}", rng.integers(-1, 2, D), key, auto_check_in=True) for i in range(5)
    }
    for pid in members:
        declare_participant(setup, pid)
    yield Run(broker, state, members)
    setup.close()


def run_service(
    run: Run,
    rounds: int,
    config: CoordinatorConfig = CONFIG,
    stop_when: object = None,
) -> AggregatorService:
    """Run the service in a thread while the members answer in this one."""
    stop = threading.Event()
    transport = run.broker.connect()
    service = AggregatorService(
        transport, run.state, config, ServiceOptions(rounds=rounds, poll_seconds=0.05), stop=stop
    )
    thread = threading.Thread(target=service.run, daemon=True)
    thread.start()
    members_transport = run.broker.connect()

    def done() -> bool:
        if callable(stop_when) and stop_when(service):
            stop.set()
        return not thread.is_alive()

    serve(members_transport, run.members, done)
    thread.join(timeout=30)
    assert not thread.is_alive()
    members_transport.close()
    transport.close()
    return service


def test_rounds_complete_end_to_end_and_state_and_log_are_written(run: Run) -> None:
    service = run_service(run, rounds=2)
    records = RoundLog(run.state.round_log_file).read()
    assert [r.outcome for r in records] == ["completed", "completed"]
    assert [(r.version_before, r.version_after) for r in records] == [(0, 1), (1, 2)]
    for record in records:
        expected = np.sum([run.members[p].vote for p in record.survivor_ids], axis=0)
        assert record.vote_totals == expected.tolist()
        assert record.survived == 5 and record.phase_seconds["step"] >= 0
    saved = json.loads(run.state.state_file.read_text())
    assert saved["version"] == 2 and saved["next_round"] > records[-1].round
    assert saved["optimizer"]["weights"] == records[-1].weights_after
    assert service.coordinator.model.version == 2


def test_a_restarted_aggregator_resumes_without_reusing_a_round_number(run: Run) -> None:
    run_service(run, rounds=1)
    first = RoundLog(run.state.round_log_file).read()
    run_service(run, rounds=1)
    records = RoundLog(run.state.round_log_file).read()
    assert len(records) == 2
    assert records[1].round > first[0].round + 1  # the round open at the stop is skipped
    assert (records[1].version_before, records[1].version_after) == (1, 2)
    assert records[1].weights_before == first[0].weights_after


def test_garbage_wrong_schema_and_oversized_submissions_are_counted_and_the_round_goes_on(
    run: Run,
) -> None:
    intruder = run.broker.connect(user="participant-m0")
    intruder.publish_bytes(SUBMIT_EXCHANGE, SUBMIT_ROUTING_KEY, b"\x00garbage")
    intruder.publish_bytes(SUBMIT_EXCHANGE, SUBMIT_ROUTING_KEY, b"\x93\x01\xa8check-in\x80")
    intruder.publish_bytes(
        SUBMIT_EXCHANGE, SUBMIT_ROUTING_KEY, b"\x93\x01\xa8check-in" + b"\0" * 5000
    )
    run_service(run, rounds=1)
    (record,) = RoundLog(run.state.round_log_file).read()
    assert record.outcome == "completed"
    assert record.rejected_reasons == {"undecodable or unexpected kind": 3}


def test_stopping_mid_round_logs_it_aborted_and_keeps_the_model(run: Run) -> None:
    for member in run.members.values():
        member.stop_at = "secagg-masked-input-request"
    slow = CoordinatorConfig(cohort_size=5, quorum=3, check_in_seconds=2.0, phase_seconds=30.0)
    run_service(
        run,
        rounds=0,
        config=slow,
        stop_when=lambda s: s.coordinator.phase == "MaskedInputCollection",
    )
    (record,) = RoundLog(run.state.round_log_file).read()
    assert record.outcome == "aborted" and record.abort_reason == "aggregator stopped"
    assert record.abort_phase == "masked_input"
    saved = json.loads(run.state.state_file.read_text())
    assert saved["version"] == 0 and saved["next_round"] == record.round + 1


def test_the_signing_key_is_private_and_stable(tmp_path: Path) -> None:
    state = StateDirectory(tmp_path / "s")
    first = pinned_key(state)
    assert stat.S_IMODE(state.signing_key_file.stat().st_mode) == 0o600
    assert pinned_key(state) == first
    state.signing_key_file.chmod(0o644)
    with pytest.raises(StateError, match="readable by others"):
        load_or_create_signing_key(state.signing_key_file)
    state.signing_key_file.chmod(0o600)
    state.signing_key_file.write_text("not a key")
    with pytest.raises(StateError, match="not a PEM private key"):
        load_or_create_signing_key(state.signing_key_file)


def test_state_of_another_model_is_refused(run: Run) -> None:
    run_service(run, rounds=1)
    other = CoordinatorConfig(model="firefox-current", cohort_size=5, quorum=3)
    with pytest.raises(StateError, match="holds model firefox-2018"):
        AggregatorService(run.broker.connect(), run.state, other)


def test_privacy_spent_is_composed_across_a_restart(run: Run) -> None:
    skellam = CoordinatorConfig(
        cohort_size=5,
        quorum=3,
        check_in_seconds=2.0,
        phase_seconds=5.0,
        privacy=PrivacySettings(mode="skellam", skellam_variance=8.0, delta=1e-6),
    )
    run_service(run, rounds=1, config=skellam)
    run_service(run, rounds=1, config=skellam)
    first, second = RoundLog(run.state.round_log_file).read()
    sensitivity = vote_sensitivity(D)
    one_round = skellam_rdp(5 * 8.0, sensitivity.l1, sensitivity.l2)
    assert first.epsilon_round == pytest.approx(one_round.epsilon(1e-6))
    assert first.epsilon_spent == pytest.approx(one_round.epsilon(1e-6))
    assert second.epsilon_spent == pytest.approx(one_round.times(2).epsilon(1e-6))
    saved = json.loads(run.state.state_file.read_text())
    assert saved["privacy_spent"] == pytest.approx(second.epsilon_spent)


def test_an_announcement_nobody_could_take_is_repeated_until_participants_are_enrolled(
    tmp_path: Path,
) -> None:
    broker = MemoryBroker()
    state = StateDirectory(tmp_path / "state")
    key = pinned_key(state)
    rng = np.random.default_rng(9)  # votes are test data, not keys
    members = {f"late{i}": Member(f"late{i}", rng.integers(-1, 2, D), key, auto_check_in=True)
               for i in range(4)}  # fmt: skip
    config = CoordinatorConfig(
        cohort_size=4, quorum=3, check_in_seconds=2.0, phase_seconds=5.0, reannounce_seconds=0.1
    )
    service = AggregatorService(
        broker.connect(), state, config, ServiceOptions(rounds=1, poll_seconds=0.02)
    )
    thread = threading.Thread(target=service.run, daemon=True)
    thread.start()
    setup = broker.connect()
    while service.coordinator.round_number is None:  # wait for round 1 to be announced
        setup.keep_alive(0.01)
    for pid in members:
        declare_participant(setup, pid)  # enrolled only after the first announcement
    deadline = time.monotonic() + 20
    serve(broker.connect(), members, lambda: not thread.is_alive() or time.monotonic() > deadline)
    assert not thread.is_alive(), "the round never completed"
    (record,) = RoundLog(state.round_log_file).read()
    assert record.outcome == "completed" and record.round == 1 and record.survived == 4
