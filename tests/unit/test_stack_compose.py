"""compose.yaml and deploy/ (docs/operating.md, "The stack with compose").

No Docker engine (and no PyYAML) is available where the tests run, so
``docker compose config`` cannot validate the file. This test reads the subset of YAML
compose.yaml uses (block mappings, block lists, folded scalars, one merge key) with a small
reader below and checks what compose would rely on: a pinned RabbitMQ 4.x image with the
management UI and a real health check, the mounted config files exist, services start in
order, participants come as replicas, the broker URLs name users that exist in the
definitions with the passwords the URLs carry, and the shared development participant user
cannot publish models or write to another participant's routing key.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from broker.provision import DEV_PASSWORDS
from broker.topology import DIRECT_EXCHANGE, MODEL_EXCHANGE, SUBMIT_EXCHANGE

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "compose.yaml"


def _strip_comment(line: str) -> str:
    in_quote = ""
    for index, char in enumerate(line):
        if char in "\"'" and not in_quote:
            in_quote = char
        elif char == in_quote:
            in_quote = ""
        elif char == "#" and not in_quote and (index == 0 or line[index - 1] in " \t"):
            return line[:index].rstrip()
    return line.rstrip()


def _scalar(text: str) -> object:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    return text


def read_compose_yaml(text: str) -> dict[str, object]:
    """Parse block-style YAML (mappings, ``- item`` lists, ``>-`` folded scalars, flow lists
    of scalars) into dicts, lists and scalars. Anchors are kept as the literal text."""
    lines = [
        (len(raw) - len(raw.lstrip(" ")), _strip_comment(raw).strip()) for raw in text.splitlines()
    ]
    lines = [(indent, body) for indent, body in lines if body]
    position = 0

    def block(indent: int) -> object:
        nonlocal position
        if lines[position][1].startswith("- "):
            items: list[object] = []
            while position < len(lines) and lines[position][0] == indent:
                body = lines[position][1]
                if not body.startswith("- "):
                    break
                position += 1
                items.append(value(body[2:], indent))
            return items
        mapping: dict[str, object] = {}
        while position < len(lines) and lines[position][0] == indent:
            body = lines[position][1]
            key, sep, rest = body.partition(":")
            assert sep, f"not a mapping line: {body!r}"
            position += 1
            mapping[key.strip().strip("\"'")] = value(rest, indent)
        return mapping

    def value(rest: str, indent: int) -> object:
        nonlocal position
        rest = rest.strip()
        if rest in (">-", ">", "|", "|-"):
            parts = []
            while position < len(lines) and lines[position][0] > indent:
                parts.append(lines[position][1])
                position += 1
            return " ".join(parts)
        if rest.startswith("[") and rest.endswith("]"):
            return [_scalar(item) for item in rest[1:-1].split(",") if item.strip()]
        if rest and not rest.startswith("&"):
            return _scalar(rest)
        if position < len(lines) and lines[position][0] > indent:
            return block(lines[position][0])
        return rest or None

    parsed = block(0)
    assert position == len(lines), f"unparsed from line {lines[position]}"
    assert isinstance(parsed, dict)
    return parsed


@pytest.fixture(scope="module")
def compose() -> dict[str, object]:
    return read_compose_yaml(COMPOSE.read_text())


def _service(compose: dict[str, object], name: str) -> dict[str, object]:
    services = compose["services"]
    assert isinstance(services, dict)
    service = services[name]
    assert isinstance(service, dict)
    return service


def _password_matches(stored_hash: str, password: str) -> bool:
    raw = base64.b64decode(stored_hash)
    salt, digest = raw[:4], raw[4:]
    return hashlib.sha256(salt + password.encode()).digest() == digest


def _definitions() -> list[dict[str, object]]:
    return [
        json.loads((REPO / "deploy/rabbitmq/definitions.json").read_text()),
        json.loads((REPO / "deploy/compose/dev-participants.json").read_text()),
    ]


def test_the_reader_parses_what_compose_uses() -> None:
    parsed = read_compose_yaml(
        "a:\n  b: 1 # note\n  c:\n    - x\n    - 'y # not a comment'\n"
        '  d: >-\n    one\n    two\n  e: [CMD, "t s"]\n'
    )
    assert parsed == {
        "a": {"b": 1, "c": ["x", "y # not a comment"], "d": "one two", "e": ["CMD", "t s"]}
    }


def test_broker_is_a_pinned_rabbitmq_4_with_management_and_a_health_check(
    compose: dict[str, object],
) -> None:
    rabbitmq = _service(compose, "rabbitmq")
    assert re.fullmatch(r"rabbitmq:4\.\d+\.\d+-management", str(rabbitmq["image"]))
    health = rabbitmq["healthcheck"]
    assert isinstance(health, dict)
    test = health["test"]
    assert isinstance(test, list) and test[0] == "CMD-SHELL"
    assert "rabbitmq-diagnostics" in str(test[1]) and "check_port_connectivity" in str(test[1])


def test_every_mounted_file_exists(compose: dict[str, object]) -> None:
    mounts = []
    for name in ("rabbitmq", "aggregator", "participant"):
        volumes = _service(compose, name).get("volumes", [])
        assert isinstance(volumes, list)
        mounts += [str(v) for v in volumes]
    host_paths = [m.split(":")[0] for m in mounts if m.startswith("./")]
    assert "./deploy/rabbitmq/rabbitmq.conf" in host_paths
    assert "./deploy/rabbitmq/definitions.json" in host_paths
    for path in host_paths:
        assert (REPO / path).is_file(), path
    declared = compose["volumes"]
    assert isinstance(declared, dict)
    named = {m.split(":")[0] for m in mounts if not m.startswith(("./", "/"))}
    assert named <= set(declared)


def test_the_compose_conf_loads_every_definitions_file(compose: dict[str, object]) -> None:
    volumes = _service(compose, "rabbitmq")["volumes"]
    assert isinstance(volumes, list)
    targets = {str(v).split(":")[1] for v in volumes}
    conf = (REPO / "deploy/compose/rabbitmq-compose.conf").read_text()
    directory = re.search(r"(?m)^load_definitions\s*=\s*(\S+)$", conf)
    assert directory is not None
    loaded = {t for t in targets if t.startswith(directory.group(1) + "/")}
    assert {t.rsplit("/", 1)[1] for t in loaded} == {"10-fedrank.json", "20-dev-participants.json"}
    assert any(t.startswith("/etc/rabbitmq/conf.d/") for t in targets)


def test_services_start_in_order_and_participants_are_replicas(
    compose: dict[str, object],
) -> None:
    aggregator = _service(compose, "aggregator")
    participant = _service(compose, "participant")
    assert aggregator["depends_on"] == {"rabbitmq": {"condition": "service_healthy"}}
    assert participant["depends_on"] == {
        "rabbitmq": {"condition": "service_healthy"},
        "aggregator": {"condition": "service_healthy"},
    }
    deploy = participant["deploy"]
    assert isinstance(deploy, dict) and isinstance(deploy["replicas"], int)
    assert deploy["replicas"] >= 1
    assert any(str(v) == "aggregator-state:/state" for v in aggregator["volumes"])  # type: ignore[attr-defined]


def test_the_image_is_built_from_python_311(compose: dict[str, object]) -> None:
    build = compose["x-fedrank-image"]
    assert isinstance(build, dict)
    dockerfile = REPO / str(build["build"]["dockerfile"])
    text = dockerfile.read_text()
    assert re.search(r"(?m)^FROM python:3\.11-slim$", text)
    for package in ("fedrank", "frecency", "crypto", "broker", "aggregator", "participant"):
        assert re.search(rf"(?m)^COPY {package} \./{package}$", text), package
    assert re.search(r"(?m)^USER fedrank$", text)


@pytest.mark.parametrize("service", ["aggregator", "participant"])
def test_broker_urls_name_users_of_the_definitions_with_their_passwords(
    compose: dict[str, object], service: str
) -> None:
    environment = _service(compose, service)["environment"]
    assert isinstance(environment, dict)
    url = urlsplit(str(environment["FEDRANK_AMQP_URL"]))
    assert url.hostname == "rabbitmq" and url.path == "/fedrank"
    users = {u["name"]: u for d in _definitions() for u in d["users"]}  # type: ignore[attr-defined]
    assert url.username in users
    assert _password_matches(str(users[url.username]["password_hash"]), str(url.password))
    if url.username == "aggregator":
        assert url.password == DEV_PASSWORDS["aggregator"]


def test_the_shared_participant_user_can_only_submit_and_use_participant_queues() -> None:
    permissions = _definitions()[1]["permissions"]
    assert isinstance(permissions, list) and len(permissions) == 1
    rule: dict[str, str] = permissions[0]
    write, read, configure = (re.compile(rule[k]) for k in ("write", "read", "configure"))
    assert write.fullmatch(SUBMIT_EXCHANGE)
    assert read.fullmatch("fedrank.participant.p1-0") and write.fullmatch("fedrank.participant.a")
    for forbidden in (MODEL_EXCHANGE, DIRECT_EXCHANGE, "fedrank.aggregator"):
        assert not write.fullmatch(forbidden), forbidden
        assert not configure.fullmatch(forbidden), forbidden
    assert not read.fullmatch("fedrank.aggregator")
    assert not configure.fullmatch("fedrank.participant.a.b")
