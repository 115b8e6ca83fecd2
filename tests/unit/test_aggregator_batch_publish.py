"""aggregator/service.py publishes an output of several messages (a phase's fan-out) as
one ``Transport.publish_many`` batch, and still reaches every member it can when one
message is unroutable or too large (over the in-memory broker)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import pytest

from aggregator.config import CoordinatorConfig
from aggregator.events import Outgoing, Output
from aggregator.service import AggregatorService
from aggregator.state import StateDirectory
from broker.codec import WireMessage, decode
from broker.memory import MemoryBroker, MemoryTransport
from broker.messages import ModelRequest
from broker.topology import DIRECT_EXCHANGE, declare_core, declare_participant, participant_queue

CONFIG = CoordinatorConfig(cohort_size=5, quorum=3, check_in_seconds=2.0, phase_seconds=5.0)


class Recording(MemoryTransport):
    """Counts single and batch publishes."""

    def __init__(self, broker: MemoryBroker) -> None:
        super().__init__(broker, "aggregator", prefetch=64)
        self.calls: list[tuple[str, int]] = []

    def publish(self, exchange: str, routing_key: str, message: WireMessage) -> None:
        self.calls.append(("publish", 1))
        super().publish(exchange, routing_key, message)

    def publish_many(self, items: Sequence[tuple[str, str, WireMessage]]) -> None:
        self.calls.append(("publish_many", len(items)))
        super().publish_many(items)


def _service(tmp_path: Path, members: Sequence[str]) -> tuple[AggregatorService, Recording]:
    broker = MemoryBroker()
    transport = Recording(broker)
    declare_core(transport)
    for pid in members:
        declare_participant(transport, pid)
    return AggregatorService(transport, StateDirectory(tmp_path / "state"), CONFIG), transport


def _to(pid: str, message: WireMessage | None = None) -> Outgoing:
    return Outgoing(DIRECT_EXCHANGE, pid, message or ModelRequest(round=3, participant_id=pid))


def _received(transport: Recording, pid: str) -> list[WireMessage]:
    got = []
    while (delivery := transport.get(participant_queue(pid))) is not None:
        got.append(decode(delivery.body))
        transport.ack(delivery)
    return got


def test_a_fan_out_is_one_batch_and_a_single_message_one_publish(tmp_path: Path) -> None:
    members = ["a", "b", "c"]
    service, transport = _service(tmp_path, members)
    service._act(Output(messages=tuple(_to(pid) for pid in members)))
    service._act(Output(messages=(_to("b"),)))
    assert transport.calls == [("publish_many", 3), ("publish", 1)]
    assert [len(_received(transport, pid)) for pid in members] == [1, 2, 1]


def test_an_unroutable_member_is_logged_and_the_others_reached(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    service, transport = _service(tmp_path, ["a", "c"])
    with caplog.at_level(logging.WARNING, logger="fedrank.aggregator"):
        service._act(Output(messages=(_to("a"), _to("gone"), _to("c"))))
    assert [len(_received(transport, pid)) for pid in ("a", "c")] == [1, 1]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["model-request to participant gone not delivered"]


def test_a_message_too_large_is_dropped_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    service, transport = _service(tmp_path, ["a", "b", "c"])
    huge = ModelRequest(round=3, participant_id="b").model_copy(
        update={"participant_id": "b" * 5000}
    )
    with caplog.at_level(logging.ERROR, logger="fedrank.aggregator"):
        service._act(Output(messages=(_to("a"), _to("b", huge), _to("c"))))
    assert [len(_received(transport, pid)) for pid in ("a", "b", "c")] == [1, 0, 1]
    assert any("too large to send" in r.getMessage() for r in caplog.records)
