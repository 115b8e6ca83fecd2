"""``fedrank simulate --transport rabbitmq`` (the stack issue; simulation/broker_round.py):
the paper's simulation with every round aggregated by the real aggregator service and
real participant sessions over a real RabbitMQ, on a vhost of its own. Its weights,
round by round, are those of the in-process secure run with the same seed, and every
round's vote total (from the aggregator's round log) is the sum of the votes the sampled
participants would cast, recomputed here with the simulation's own batched code."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from aggregator.roundlog import RoundRecord
from aggregator.service import AggregatorService
from broker.rabbitmq import RabbitMQSettings, RabbitMQTransport
from fedrank.cli import main
from simulation.broker_round import run_over_broker
from simulation.rounds import SimulationConfig, run_simulation
from simulation.secure import SecureConfig, SecureSum
from simulation.world import World
from tests.integration.stack import fresh_vhost, vhost_url

CONFIG = SimulationConfig(participants=30, per_round=10, rounds=3, held_out_people=20, seed=11)


@pytest.fixture
def own_vhost(rabbitmq_settings: RabbitMQSettings) -> Iterator[RabbitMQSettings]:
    """The session's broker settings on a vhost of this test's own (the simulation's
    queue names are the stack's fixed ones)."""
    with fresh_vhost("fedrank-simulate") as vhost:
        yield dataclasses.replace(rabbitmq_settings, vhost=vhost)


def test_simulation_over_rabbitmq_gives_the_in_process_weights(
    own_vhost: RabbitMQSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    records: list[RoundRecord] = []
    original_run = AggregatorService.run

    def run_and_keep_records(service: AggregatorService) -> int:
        try:
            return original_run(service)
        finally:
            records.extend(service.records)

    monkeypatch.setattr(AggregatorService, "run", run_and_keep_records)
    over_broker = run_over_broker(CONFIG, SecureConfig(), lambda: RabbitMQTransport(own_vhost))
    in_process = run_simulation(CONFIG, SecureSum(SecureConfig()))

    assert len(over_broker.rounds) == CONFIG.rounds
    assert all(r.outcome == "completed" and r.survivors == 10 for r in over_broker.rounds)
    assert [r.weights for r in over_broker.rounds] == [r.weights for r in in_process.rounds]
    assert [r.as_dict() for r in over_broker.rounds] == [r.as_dict() for r in in_process.rounds]

    # Each round's total, as the aggregator unmasked it, is the sum of the sampled
    # participants' votes recomputed independently from the same seed.
    world = World(CONFIG)
    weights = np.asarray(world.initial_state().weights, dtype=np.float64)
    completed = [r for r in records if r.outcome == "completed"][: CONFIG.rounds]
    assert len(completed) == CONFIG.rounds
    for index, record in enumerate(completed):
        assert record.round == index + 1
        assert record.weights_before == weights.tolist()
        sample = world.begin_round(index, weights)
        _, votes = world.votes(sample, weights)
        world.contributed(sample.sampled, index)
        assert record.vote_totals == votes.sum(axis=0).tolist()
        assert len(record.survivor_ids) == sample.sampled.size
        weights = np.asarray(record.weights_after, dtype=np.float64)


def test_simulate_command_over_rabbitmq(
    own_vhost: RabbitMQSettings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "result.json"
    url = vhost_url(own_vhost.vhost)
    code = main(
        [
            "simulate",
            "--participants", "20",
            "--per-round", "6",
            "--rounds", "2",
            "--held-out-people", "20",
            "--transport", "rabbitmq",
            "--amqp", url,
            "--json", str(out),
        ]
    )  # fmt: skip
    assert code == 0
    data = json.loads(out.read_text())
    assert data["aggregation"]["transport"] == "rabbitmq"
    assert [row["outcome"] for row in data["rounds"]] == ["completed", "completed"]
    assert [row["survivors"] for row in data["rounds"]] == [6, 6]
    assert "2/2" in capsys.readouterr().err
