"""The broker restarts under the running stack (the stack issue, "What must hold": "The
broker restarted: both sides reconnect and carry on"; DESIGN.md section 7).

This runs on the tests' private RabbitMQ node (``private_rabbitmq``: deploy/ definitions,
so the deployed security model: the aggregator is broker user ``aggregator``, each
participant its own enrolled user ``participant-<id>`` and checks the user ids), so
restarting it disturbs no other test's broker. After a completed round the node's
RabbitMQ application is stopped and started again (``rabbitmqctl stop_app`` /
``start_app``: every connection is dropped, durable queues and persistent messages stay);
the aggregator and the participants reconnect by themselves and more rounds complete, with
the model version going on from where it was.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import pytest

from aggregator.roundlog import RoundRecord
from broker.provision import DEV_PASSWORDS
from tests.integration.conftest import PrivateNode
from tests.integration.stack import Stack
from tests.integration.test_stack_run import FAST

pytestmark = [pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(240)]

PARTICIPANTS = 6


def _url(node: PrivateNode, user: str, password: str) -> str:
    return f"amqp://{quote(user)}:{quote(password)}@127.0.0.1:{node.port}/{node.vhost}"


def test_broker_restart_both_sides_reconnect_and_rounds_go_on(
    tmp_path: Path, private_rabbitmq: PrivateNode
) -> None:
    node = private_rabbitmq
    aggregator_url = _url(node, "aggregator", DEV_PASSWORDS["aggregator"])
    stack = Stack(tmp_path, aggregator_url)
    try:
        ids = [f"restart{i}" for i in range(PARTICIPANTS)]
        passwords = {pid: f"{pid}-pw" for pid in ids}
        for pid in ids:
            node.enroll(pid, passwords[pid])
        stack.export_key()
        aggregator = stack.start_aggregator(
            "--amqp",
            aggregator_url,
            "--cohort",
            str(PARTICIPANTS),
            "--quorum",
            "4",
            *FAST,
        )
        for i, pid in enumerate(ids):
            stack.start_participants(
                pid, 70 + i, 1, "--amqp", _url(node, f"participant-{pid}", passwords[pid])
            )
        before = stack.wait_rounds(1, timeout=90)
        completed_before = [r for r in before if r.outcome == "completed"]

        node.ctl("stop_app")
        node.ctl("start_app")
        restarted_after_round = max(r.round for r in stack.records())

        def two_more() -> list[RoundRecord] | None:
            records = stack.records()
            later = [
                r for r in records if r.outcome == "completed" and r.round > restarted_after_round
            ]
            return records if len(later) >= 2 else None

        after = stack.wait_for("two completed rounds after the broker restart", two_more, 150)
        assert aggregator.running(), stack.logs_text()
        assert all(p.running() for p in stack.processes), stack.logs_text()
        logs = stack.logs_text(lines=200)
    finally:
        stack.stop_all()

    assert after[: len(before)] == before
    completed = [r for r in after if r.outcome == "completed"]
    versions = [r.version_after for r in completed]
    assert versions == list(range(1, len(completed) + 1)), "the model version went back"
    assert completed[: len(completed_before)] == completed_before
    # Deployed mode: survivors are the enrolled participants, authenticated by user id.
    assert all(set(r.survivor_ids) <= set(ids) for r in completed)
    assert "reconnect" in logs.lower()
