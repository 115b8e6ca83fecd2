"""broker/provision.py and deploy/rabbitmq: definitions generated from the topology data,
permission regexes, broker configuration consistent with the codec. (That RabbitMQ
enforces them is tests/integration/test_broker_permissions.py.)"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from broker.codec import GLOBAL_MAX_BYTES
from broker.provision import (
    DEV_PASSWORDS,
    aggregator_permissions,
    deployment_definitions,
    main,
    participant_definitions,
    participant_permissions,
    password_hash,
)
from broker.rabbitmq import RabbitMQSettings

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "rabbitmq"


def allowed(regex: str, name: str) -> bool:
    """RabbitMQ's check: the regex matches (re:run, i.e. searches) the resource name."""
    return re.search(regex, name) is not None


def verifies(stored_hash: str, password: str) -> bool:
    raw = base64.b64decode(stored_hash)
    salt, digest = raw[:4], raw[4:]
    return hashlib.sha256(salt + password.encode()).digest() == digest


def without_hashes(definitions: dict[str, Any]) -> dict[str, Any]:
    users = [{k: v for k, v in u.items() if k != "password_hash"} for u in definitions["users"]]
    return {**definitions, "users": users}


def test_shipped_definitions_are_the_generated_ones() -> None:
    shipped = json.loads((DEPLOY / "definitions.json").read_text())
    generated = deployment_definitions(
        DEV_PASSWORDS["aggregator"], {"demo": DEV_PASSWORDS["participant-demo"]}
    )
    assert without_hashes(shipped) == without_hashes(generated)
    for user in shipped["users"]:
        assert verifies(user["password_hash"], DEV_PASSWORDS[user["name"]])


def test_password_hash_is_salted_sha256() -> None:
    first, second = password_hash("secret"), password_hash("secret")
    assert first != second  # random salts
    assert verifies(first, "secret") and verifies(second, "secret")
    assert not verifies(first, "Secret")
    assert password_hash("x", salt=b"\x00\x01\x02\x03").startswith(
        base64.b64encode(b"\x00\x01\x02").decode()
    )


def test_participant_may_write_only_submit_and_read_only_its_queue() -> None:
    alice = participant_permissions("alice")
    assert allowed(alice.write, "fedrank.submit")
    for name in ("fedrank.model", "fedrank.direct", "fedrank.participant.alice", "amq.default"):
        assert not allowed(alice.write, name)
    assert allowed(alice.read, "fedrank.participant.alice")
    for name in (
        "fedrank.participant.bob",
        "fedrank.participant.alice2",
        "fedrank.participant.alicX",
        "fedrank.aggregator",
        "fedrank.direct",
        "fedrank.model",
    ):
        assert not allowed(alice.read, name), name
    for name in ("fedrank.participant.alice", "fedrank.submit", "fedrank.direct"):
        assert not allowed(alice.configure, name)


def test_aggregator_cannot_touch_participant_queues() -> None:
    aggregator = aggregator_permissions()
    assert allowed(aggregator.write, "fedrank.model")
    assert allowed(aggregator.write, "fedrank.direct")
    assert not allowed(aggregator.write, "fedrank.submit")
    assert allowed(aggregator.read, "fedrank.aggregator")
    for regex in (aggregator.configure, aggregator.write, aggregator.read):
        assert not allowed(regex, "fedrank.participant.alice")


def test_enrollment_fragment_declares_queue_bindings_and_user() -> None:
    fragment = participant_definitions("carol", "pw")
    assert [u["name"] for u in fragment["users"]] == ["participant-carol"]
    assert [q["name"] for q in fragment["queues"]] == ["fedrank.participant.carol"]
    assert {(b["source"], b["routing_key"]) for b in fragment["bindings"]} == {
        ("fedrank.model", ""),
        ("fedrank.direct", "carol"),
    }
    assert "vhosts" not in fragment and "exchanges" in fragment


def test_rabbitmq_conf_matches_codec_and_loads_definitions() -> None:
    conf = (DEPLOY / "rabbitmq.conf").read_text()
    settings = dict(
        line.split("=", 1) for line in conf.splitlines() if line.strip() and line[0] != "#"
    )
    settings = {k.strip(): v.strip() for k, v in settings.items()}
    assert int(settings["max_message_size"]) == GLOBAL_MAX_BYTES
    assert settings["load_definitions"].endswith("definitions.json")
    assert int(settings["heartbeat"]) >= RabbitMQSettings().heartbeat


def test_cli_prints_definitions_and_requires_a_password_to_enroll(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["definitions", "--participant", "dave"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert "participant-dave" in {u["name"] for u in printed["users"]}
    monkeypatch.delenv("FEDRANK_PARTICIPANT_PASSWORD", raising=False)
    with pytest.raises(SystemExit):
        main(["enroll", "dave"])
    assert "FEDRANK_PARTICIPANT_PASSWORD" in capsys.readouterr().err


def test_settings_from_url() -> None:
    settings = RabbitMQSettings.from_url("amqp://agg:p%40ss@broker:5673/fedrank")
    assert (settings.host, settings.port, settings.vhost) == ("broker", 5673, "fedrank")
    assert (settings.username, settings.password) == ("agg", "p@ss")
    assert RabbitMQSettings.from_url("amqp://h/").vhost == "/"
    assert RabbitMQSettings.from_url("amqp://h/%2F").vhost == "/"
    assert "p@ss" not in repr(settings)
    with pytest.raises(ValueError):
        RabbitMQSettings.from_url("amqps://h/")
