"""Broker users, permissions and definitions (DESIGN.md section 7, "Users").

RabbitMQ permissions are three regexes (configure, write, read) per user per vhost.
Publishing needs *write* on the exchange; consuming needs *read* on the queue; binding a
queue to an exchange needs *write* on the queue and *read* on the exchange; declaring
needs *configure*. So:

- ``aggregator`` declares the three exchanges and its queue, binds its queue to
  ``fedrank.submit``, publishes to ``fedrank.model`` and ``fedrank.direct`` and reads
  ``fedrank.aggregator``. It cannot read any participant's queue.
- each participant is its own user ``participant-<id>``: it may publish (write) only to
  ``fedrank.submit`` and read only ``fedrank.participant.<id>``; it may configure
  nothing, so it can neither declare queues nor bind its queue to another participant's
  routing key (which would need read on ``fedrank.direct``). One shared "participant"
  user could not keep participants out of each other's queues.

Enrolling a participant creates its user, permissions, durable queue and two bindings
in one ``rabbitmqctl import_definitions`` (run where rabbitmqctl reaches the node). The
same generator writes ``deploy/rabbitmq/definitions.json``: ``python -m broker.provision
definitions --participant demo > deploy/rabbitmq/definitions.json``.

Password hashes use RabbitMQ's ``rabbit_password_hashing_sha256``:
``base64(salt || sha256(salt || password))`` with a 4-byte random salt.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from broker.topology import (
    AGGREGATOR_QUEUE,
    DIRECT_EXCHANGE,
    MODEL_EXCHANGE,
    SUBMIT_EXCHANGE,
    Topology,
    check_participant_id,
    core_topology,
    participant_queue,
    participant_topology,
)

VHOST = "fedrank"
AGGREGATOR_USER = "aggregator"
PARTICIPANT_USER_PREFIX = "participant-"
HASHING_ALGORITHM = "rabbit_password_hashing_sha256"
#: Development-only passwords of the shipped definitions; real deployments change them.
DEV_PASSWORDS = {AGGREGATOR_USER: "aggregator-dev-only", "participant-demo": "demo-dev-only"}


@dataclass(frozen=True, slots=True)
class Permissions:
    """RabbitMQ's three permission regexes for one user on one vhost."""

    configure: str
    write: str
    read: str


@dataclass(frozen=True, slots=True)
class BrokerUser:
    name: str
    password: str = field(repr=False)
    permissions: Permissions


def _exact(*names: str) -> str:
    return "^(" + "|".join(re.escape(n) for n in names) + ")$"


def aggregator_permissions() -> Permissions:
    return Permissions(
        configure=_exact(MODEL_EXCHANGE, SUBMIT_EXCHANGE, DIRECT_EXCHANGE, AGGREGATOR_QUEUE),
        write=_exact(MODEL_EXCHANGE, DIRECT_EXCHANGE, AGGREGATOR_QUEUE),
        read=_exact(SUBMIT_EXCHANGE, AGGREGATOR_QUEUE),
    )


def participant_user(participant_id: str) -> str:
    return PARTICIPANT_USER_PREFIX + check_participant_id(participant_id)


def participant_permissions(participant_id: str) -> Permissions:
    return Permissions(
        configure="^$",
        write=_exact(SUBMIT_EXCHANGE),
        read=_exact(participant_queue(participant_id)),
    )


def password_hash(password: str, salt: bytes | None = None) -> str:
    """RabbitMQ's ``rabbit_password_hashing_sha256`` hash of ``password``."""
    salt = os.urandom(4) if salt is None else salt
    digest = hashlib.sha256(salt + password.encode("utf-8")).digest()
    return base64.b64encode(salt + digest).decode("ascii")


def _topology_definitions(topology: Topology, vhost: str) -> dict[str, list[dict[str, Any]]]:
    return {
        "exchanges": [
            {
                "name": e.name,
                "vhost": vhost,
                "type": e.type,
                "durable": e.durable,
                "auto_delete": False,
                "internal": False,
                "arguments": {},
            }
            for e in topology.exchanges
        ],
        "queues": [
            {
                "name": q.name,
                "vhost": vhost,
                "durable": q.durable,
                "auto_delete": False,
                "arguments": q.argument_map(),
            }
            for q in topology.queues
        ],
        "bindings": [
            {
                "source": b.exchange,
                "vhost": vhost,
                "destination": b.queue,
                "destination_type": "queue",
                "routing_key": b.routing_key,
                "arguments": {},
            }
            for b in topology.bindings
        ],
    }


def _user_definitions(users: Sequence[BrokerUser], vhost: str) -> dict[str, list[dict[str, Any]]]:
    return {
        "users": [
            {
                "name": u.name,
                "password_hash": password_hash(u.password),
                "hashing_algorithm": HASHING_ALGORITHM,
                "tags": [],
            }
            for u in users
        ],
        "permissions": [
            {
                "user": u.name,
                "vhost": vhost,
                "configure": u.permissions.configure,
                "write": u.permissions.write,
                "read": u.permissions.read,
            }
            for u in users
        ],
    }


def participant_definitions(
    participant_id: str, password: str, vhost: str = VHOST
) -> dict[str, Any]:
    """A definitions fragment enrolling one participant: user, permissions, queue,
    bindings (the vhost and exchanges must already exist)."""
    user = BrokerUser(
        participant_user(participant_id), password, participant_permissions(participant_id)
    )
    return {
        **_user_definitions([user], vhost),
        **_topology_definitions(participant_topology(participant_id), vhost),
    }


def deployment_definitions(
    aggregator_password: str,
    participants: Mapping[str, str] | None = None,
    vhost: str = VHOST,
) -> dict[str, Any]:
    """Full definitions: vhost, aggregator user, core topology and ``participants``
    (id -> password), as loaded by the broker at boot (``load_definitions``)."""
    participants = participants or {}
    users = [BrokerUser(AGGREGATOR_USER, aggregator_password, aggregator_permissions())]
    topology = core_topology()
    for pid, password in participants.items():
        users.append(BrokerUser(participant_user(pid), password, participant_permissions(pid)))
        extra = participant_topology(pid)
        topology = Topology(
            topology.exchanges,
            topology.queues + extra.queues,
            topology.bindings + extra.bindings,
        )
    return {
        "vhosts": [{"name": vhost}],
        **_user_definitions(users, vhost),
        **_topology_definitions(topology, vhost),
    }


def import_definitions(
    definitions: Mapping[str, Any],
    node: str | None = None,
    rabbitmqctl: Sequence[str] = ("rabbitmqctl",),
    env: Mapping[str, str] | None = None,
) -> None:
    """Apply definitions to a running node with ``rabbitmqctl import_definitions``."""
    command = [
        *rabbitmqctl,
        *(["-n", node] if node else []),
        "import_definitions",
        "--format",
        "json",
    ]
    result = subprocess.run(
        command,
        input=json.dumps(definitions).encode(),
        capture_output=True,
        env=dict(env) if env is not None else None,
        timeout=120,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command)} failed ({result.returncode}): "
            f"{result.stderr.decode(errors='replace').strip()}"
        )


def enroll_participant(
    participant_id: str,
    password: str,
    vhost: str = VHOST,
    node: str | None = None,
    rabbitmqctl: Sequence[str] = ("rabbitmqctl",),
    env: Mapping[str, str] | None = None,
) -> None:
    """Create participant ``participant_id``'s user, permissions, queue and bindings."""
    import_definitions(
        participant_definitions(participant_id, password, vhost), node, rabbitmqctl, env
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m broker.provision", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("definitions", help="print deployment definitions JSON")
    gen.add_argument("--participant", action="append", default=[], metavar="ID")
    gen.add_argument("--vhost", default=VHOST)
    enroll = sub.add_parser("enroll", help="enroll a participant on a running node")
    enroll.add_argument("participant_id")
    enroll.add_argument("--vhost", default=VHOST)
    enroll.add_argument("--node", default=None)
    enroll.add_argument("--password-env", default="FEDRANK_PARTICIPANT_PASSWORD")
    args = parser.parse_args(argv)
    if args.command == "definitions":
        participants = {
            pid: DEV_PASSWORDS.get(participant_user(pid), f"{pid}-dev-only")
            for pid in args.participant
        }
        definitions = deployment_definitions(
            DEV_PASSWORDS[AGGREGATOR_USER], participants, args.vhost
        )
        json.dump(definitions, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
        return 0
    password = os.environ.get(args.password_env)
    if not password:
        parser.error(f"set the participant's password in ${args.password_env}")
    enroll_participant(args.participant_id, password, args.vhost, args.node)
    return 0


if __name__ == "__main__":
    sys.exit(main())
