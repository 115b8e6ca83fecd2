"""Participants over a real RabbitMQ (the stack issue, participant part): N participants
in one process over one connection against a test-side stand-in aggregator built from
crypto.secagg's SecAggServer (tests/unit/test_participant_runner.py); the
``fedrank participant`` program itself; reconnecting after the broker drops every
connection. The end-to-end run with the real aggregator process is
tests/integration/test_stack_*.py."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from broker.payload import decode_total
from broker.rabbitmq import RabbitMQSettings, RabbitMQTransport
from crypto.hazmat import primitives
from crypto.secagg import AggregateSum
from participant.runner import ParticipantRunner, RunnerConfig
from tests.unit.test_participant_runner import (
    MODEL,
    StandInAggregator,
    expected_vote_total,
    make_sessions,
)

D = MODEL.spec.dimension
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def aggregator_key() -> bytes:
    return primitives.generate_signing_key()


@pytest.fixture
def stand_in(
    rabbitmq_settings: RabbitMQSettings, aggregator_key: bytes
) -> Iterator[StandInAggregator]:
    transport = RabbitMQTransport(rabbitmq_settings)
    try:
        yield StandInAggregator(transport, aggregator_key, timeout=40.0)
    finally:
        transport.close()


def start_runner(runner: ParticipantRunner) -> threading.Thread:
    thread = threading.Thread(target=runner.run, name="participants", daemon=True)
    thread.start()
    return thread


def test_many_participants_one_connection_two_rounds(
    rabbitmq_settings: RabbitMQSettings, aggregator_key: bytes, stand_in: StandInAggregator
) -> None:
    ids = [f"rmq-{i}" for i in range(8)]
    runner = ParticipantRunner(
        make_sessions(ids, 31, primitives.public_signing_key(aggregator_key)),
        lambda: RabbitMQTransport(rabbitmq_settings),
        RunnerConfig(rounds=2),
    )
    thread = start_runner(runner)
    stand_in.wait_requests(set(ids))
    for round_number in (1, 2):
        outcome = stand_in.run_round(round_number, MODEL.spec.defaults(), set(ids), threshold=6)
        assert isinstance(outcome, AggregateSum)
        votes, totals = decode_total(outcome.total, D)
        assert np.array_equal(votes, expected_vote_total(31, ids, [round_number]))
        assert totals.interactions == 2 * len(ids)
    thread.join(timeout=20)
    assert not thread.is_alive()
    assert stand_in.rejected == []


def test_participants_reconnect_after_the_broker_drops_connections(
    rabbitmq_settings: RabbitMQSettings,
    aggregator_key: bytes,
    stand_in: StandInAggregator,
    amqp_vhost: str,
    rabbitmqctl: Any,
) -> None:
    ids = [f"rc-{i}" for i in range(3)]
    runner = ParticipantRunner(
        make_sessions(ids, 5, primitives.public_signing_key(aggregator_key)),
        lambda: RabbitMQTransport(rabbitmq_settings),
        RunnerConfig(rounds=1),
    )
    thread = start_runner(runner)
    stand_in.wait_requests(set(ids))
    rabbitmqctl("close_all_connections", "-p", amqp_vhost, "fedrank test: drop everyone")
    # after reconnecting every participant asks for the model again
    stand_in.wait_requests(set(ids))
    assert len(stand_in.requests) == 2 * len(ids)
    outcome = stand_in.run_round(1, MODEL.spec.defaults(), set(ids), threshold=3)
    assert isinstance(outcome, AggregateSum)
    votes, _ = decode_total(outcome.total, D)
    assert np.array_equal(votes, expected_vote_total(5, ids, [1]))
    thread.join(timeout=20)
    assert not thread.is_alive()


def amqp_url(settings: RabbitMQSettings) -> str:
    return (
        f"amqp://{settings.username}:{settings.password}@{settings.host}:{settings.port}/"
        f"{settings.vhost}"
    )


def test_fedrank_participant_process(
    tmp_path: Path,
    rabbitmq_settings: RabbitMQSettings,
    aggregator_key: bytes,
    stand_in: StandInAggregator,
) -> None:
    key_file = tmp_path / "aggregator.pub"
    key_file.write_text(primitives.public_signing_key(aggregator_key).hex() + "\n")
    log_path = tmp_path / "participant.log"
    ids = [f"proc-{i}" for i in range(3)]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                sys.executable, "-m", "fedrank", "participant",
                "--amqp", amqp_url(rabbitmq_settings),
                "--aggregator-key", str(key_file),
                "--synthetic", "9",
                "--interactions-per-round", "2",
                "--count", "3",
                "--id", "proc",
                "--state", str(tmp_path / "state"),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )  # fmt: skip
    try:
        stand_in.wait_requests(set(ids))
        outcome = stand_in.run_round(1, MODEL.spec.defaults(), set(ids), threshold=3)
        assert isinstance(outcome, AggregateSum)
        votes, _ = decode_total(outcome.total, D)
        assert np.array_equal(votes, expected_vote_total(9, ids, [1]))
        # every participant logged its unmask response: kind and size only
        deadline = time.monotonic() + 20
        pattern = re.compile(
            r"fedrank\.participant INFO proc-\d: sent (\S+) of round 1 \((\d+) bytes\)"
        )
        while time.monotonic() < deadline:
            sent = pattern.findall(log_path.read_text())
            if sum(kind == "secagg-unmask-response" for kind, _ in sent) == 3:
                break
            time.sleep(0.05)
        kinds = {kind for kind, _ in sent}
        assert kinds == {
            "check-in",
            "secagg-advertise-keys",
            "secagg-encrypted-shares",
            "secagg-masked-input",
            "secagg-survivor-signature",
            "secagg-unmask-response",
        }
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    for pid in ids:
        assert (tmp_path / "state" / pid / "identity.key").stat().st_size == 32
        assert (
            '"last_contributed_round": 1' in (tmp_path / "state" / pid / "state.json").read_text()
        )
