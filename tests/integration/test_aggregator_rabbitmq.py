"""The aggregator service against a real RabbitMQ broker (DESIGN.md section 5): rounds
complete over the wire with crypto clients answering from their durable queues, the
vote totals are the sums of the votes, and a restarted aggregator carries on."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from aggregator.config import CoordinatorConfig
from aggregator.roundlog import RoundLog, RoundRecord
from aggregator.service import AggregatorService, ServiceOptions
from aggregator.signing import load_or_create_signing_key, public_key_pem
from aggregator.state import StateDirectory
from broker.messages import CheckIn, load_aggregator_public_key
from broker.rabbitmq import RabbitMQSettings, RabbitMQTransport
from broker.topology import (
    AGGREGATOR_QUEUE,
    SUBMIT_EXCHANGE,
    SUBMIT_ROUTING_KEY,
    declare_core,
    declare_participant,
)
from tests.integration.conftest import PrivateNode
from tests.unit.test_aggregator_support import Member, serve

pytestmark = pytest.mark.timeout(120)

D = 22
CONFIG = CoordinatorConfig(cohort_size=6, quorum=4, check_in_seconds=3.0, phase_seconds=8.0)


@pytest.fixture(scope="module")
def settings(
    rabbitmqctl: Callable[..., str], rabbitmq_settings: RabbitMQSettings
) -> Iterator[RabbitMQSettings]:
    """A vhost of this module's own, so no other test's leftovers reach its aggregator
    (the round-running test comes first; the SIGTERM test needs no clean queue)."""
    vhost = f"fedrank-aggregator-{uuid.uuid4().hex[:10]}"
    rabbitmqctl("add_vhost", vhost)
    try:
        rabbitmqctl("set_permissions", "-p", vhost, rabbitmq_settings.username, ".*", ".*", ".*")
        yield RabbitMQSettings(
            host=rabbitmq_settings.host,
            port=rabbitmq_settings.port,
            vhost=vhost,
            username=rabbitmq_settings.username,
            password=rabbitmq_settings.password,
            reconnect_attempts=5,
            reconnect_initial_delay=0.1,
            reconnect_max_delay=1.0,
        )
    finally:
        rabbitmqctl("delete_vhost", vhost)


def members_for(state: StateDirectory, count: int) -> dict[str, Member]:
    state.ensure()
    private = load_or_create_signing_key(state.signing_key_file)
    pinned = load_aggregator_public_key(public_key_pem(private).encode())
    rng = np.random.default_rng(23)  # votes are test data, not keys
    return {
        f"agg-it-{i}": Member(f"agg-it-{i}", rng.integers(-1, 2, D), pinned, auto_check_in=True)
        for i in range(count)
    }


def run_aggregator(
    settings: RabbitMQSettings, state: StateDirectory, members: dict[str, Member], rounds: int
) -> list[BaseException]:
    """The service in its own thread (its transport made there), members served here."""
    errors: list[BaseException] = []

    def aggregate() -> None:
        try:
            with RabbitMQTransport(settings) as transport:
                AggregatorService(
                    transport, state, CONFIG, ServiceOptions(rounds=rounds, poll_seconds=0.05)
                ).run()
        except BaseException as error:  # reported to the test below
            errors.append(error)

    thread = threading.Thread(target=aggregate, daemon=True)
    thread.start()
    with RabbitMQTransport(settings) as transport:
        serve(transport, members, lambda: not thread.is_alive())
    thread.join(timeout=10)
    return errors


def test_rounds_complete_over_rabbitmq_and_sum_the_votes(
    settings: RabbitMQSettings, tmp_path: Path
) -> None:
    state = StateDirectory(tmp_path / "state")
    members = members_for(state, 7)
    with RabbitMQTransport(settings) as setup:
        declare_core(setup)
        for pid in members:
            declare_participant(setup, pid)
        setup.publish_bytes(SUBMIT_EXCHANGE, SUBMIT_ROUTING_KEY, b"not a message")
    assert run_aggregator(settings, state, members, rounds=2) == []
    records = RoundLog(state.round_log_file).read()
    assert [r.outcome for r in records] == ["completed", "completed"]
    assert [(r.version_before, r.version_after) for r in records] == [(0, 1), (1, 2)]
    for record in records:
        assert record.selected == 6 and record.survived == 6 and record.checked_in == 6
        expected = np.sum([members[p].vote for p in record.survivor_ids], axis=0)
        assert record.vote_totals == expected.tolist()
    assert records[0].rejected_reasons["undecodable or unexpected kind"] == 1
    # the seventh check-in comes after the cohort target closed check-in
    assert records[0].rejected_reasons["wrong phase"] == 1

    # restarted: resumes after the last completed round, the version keeps rising
    assert run_aggregator(settings, state, members, rounds=1) == []
    records = RoundLog(state.round_log_file).read()
    assert len(records) == 3 and records[2].outcome == "completed"
    assert records[2].round > records[1].round + 1
    assert (records[2].version_before, records[2].version_after) == (2, 3)


def test_with_broker_users_a_participant_cannot_speak_for_another(
    private_rabbitmq: PrivateNode, tmp_path: Path
) -> None:
    """Deployed security model: per-participant users; the aggregator checks that the
    broker-validated user id of every message is ``participant-<its participant id>``."""
    node = private_rabbitmq
    state = StateDirectory(tmp_path / "state")
    members = members_for(state, 4)
    member_settings = {pid: node.enroll(pid, f"{pid}-pw") for pid in members}
    impostor, victim = "agg-it-0", "agg-it-1"
    config = CoordinatorConfig(
        cohort_size=4, quorum=3, check_in_seconds=3.0, phase_seconds=8.0, check_user_ids=True
    )
    stop = threading.Event()
    records: list[RoundRecord] = []
    # the node's vhost is shared with other tests: start from an empty submission queue
    node.ctl("purge_queue", "-p", node.vhost, AGGREGATOR_QUEUE)

    def aggregate() -> None:
        with RabbitMQTransport(node.aggregator_settings()) as transport:
            service = AggregatorService(
                transport, state, config, ServiceOptions(rounds=1, poll_seconds=0.05), stop=stop
            )
            service.run()
            records.extend(service.records)

    def participate(pid: str) -> None:
        with RabbitMQTransport(member_settings[pid]) as transport:
            if pid == impostor:
                transport.publish(
                    SUBMIT_EXCHANGE,
                    SUBMIT_ROUTING_KEY,
                    CheckIn(
                        round=1, participant_id=victim, identity_key=b"\1" * 32, model_version=0
                    ),
                )
            serve(transport, {pid: members[pid]}, lambda: not aggregator.is_alive())

    aggregator = threading.Thread(target=aggregate, daemon=True)
    threads = [threading.Thread(target=participate, args=(pid,), daemon=True) for pid in members]
    for thread in threads:
        thread.start()
    aggregator.start()
    aggregator.join(timeout=90)
    stop.set()
    for thread in threads:
        thread.join(timeout=10)
    (record,) = RoundLog(state.round_log_file).read()
    assert record.outcome == "completed" and sorted(record.survivor_ids) == sorted(members)
    assert record.rejected_reasons.get("user id mismatch") == 1


def test_fedrank_aggregator_stops_cleanly_on_sigterm(
    settings: RabbitMQSettings, tmp_path: Path
) -> None:
    vhost = urllib.parse.quote(settings.vhost, safe="")
    url = f"amqp://{settings.username}:{settings.password}@{settings.host}:{settings.port}/{vhost}"
    state = tmp_path / "state"
    process = subprocess.Popen(
        [sys.executable, "-m", "fedrank", "aggregator", "--amqp", url, "--state", str(state)],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    try:
        for line in process.stderr:
            if "round 1 opened" in line:
                break
        process.send_signal(signal.SIGTERM)
        rest = process.stderr.read()
        assert process.wait(timeout=30) == 0, rest
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert "Traceback" not in rest and "stopping after 0 completed round(s)" in rest
    saved = StateDirectory(state).load()
    assert saved is not None and saved.version == 0 and saved.next_round == 2
