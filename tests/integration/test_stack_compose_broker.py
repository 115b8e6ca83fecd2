"""The compose broker's configuration, booted for real without Docker (compose.yaml;
docs/operating.md, "The stack with compose").

compose.yaml mounts deploy/rabbitmq/rabbitmq.conf as the node's main config and
deploy/compose/rabbitmq-compose.conf into ``conf.d/``, which points ``load_definitions``
at a directory holding the generated definitions.json and
deploy/compose/dev-participants.json. This starts a private node laid out the same way
(the container paths rewritten to a temporary directory, as the tests' private node does)
and checks that the conf.d file wins, both definition files are loaded, and the shared
development participant user logs in with the password compose gives it and may do
exactly what a participant needs: declare and bind its own queue, read it, publish to
``fedrank.submit``, and not publish a model nor read the aggregator's queue.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from broker.messages import ModelRequest
from broker.provision import DEV_PASSWORDS
from broker.rabbitmq import RabbitMQSettings, RabbitMQTransport
from broker.topology import (
    AGGREGATOR_QUEUE,
    MODEL_EXCHANGE,
    SUBMIT_EXCHANGE,
    SUBMIT_ROUTING_KEY,
    declare_core,
    declare_participant,
    participant_queue,
)
from broker.transport import AccessRefused, Transport
from tests.integration.conftest import _free_port, _private_config, _rabbit_bin, _run

pytestmark = [pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(180)]

REPO = Path(__file__).resolve().parents[2]
COMPOSE_CONF = REPO / "deploy" / "compose" / "rabbitmq-compose.conf"
DEFINITIONS = REPO / "deploy" / "rabbitmq" / "definitions.json"
DEV_PARTICIPANTS = REPO / "deploy" / "compose" / "dev-participants.json"


def _compose_url(service: str) -> str:
    """The FEDRANK_AMQP_URL compose.yaml gives ``service``."""
    text = (REPO / "compose.yaml").read_text()
    section = text.split(f"\n  {service}:\n", 1)[1]
    line = next(x for x in section.splitlines() if "FEDRANK_AMQP_URL:" in x)
    return line.split("FEDRANK_AMQP_URL:", 1)[1].strip()


@pytest.fixture(scope="module")
def compose_node() -> Iterator[tuple[int, str]]:
    """A node with compose's config layout; yields (port, nodename)."""
    base = Path(tempfile.mkdtemp(prefix="fedrank-compose-rabbit-"))
    port, dist_port = _free_port(), _free_port()
    nodename = f"fedrank-compose-{os.getpid()}@localhost"
    definitions_dir = base / "definitions.d"
    definitions_dir.mkdir()
    shutil.copy(DEFINITIONS, definitions_dir / "10-fedrank.json")
    shutil.copy(DEV_PARTICIPANTS, definitions_dir / "20-dev-participants.json")
    # The main config: the shipped file, listener and (now irrelevant) path rewritten.
    (base / "rabbitmq.conf").write_text(_private_config(port, base / "no-such-file.json"))
    conf_d = base / "conf.d"
    conf_d.mkdir()
    compose_conf = COMPOSE_CONF.read_text()
    assert "/etc/rabbitmq/definitions.d" in compose_conf
    (conf_d / "90-fedrank-compose.conf").write_text(
        compose_conf.replace("/etc/rabbitmq/definitions.d", str(definitions_dir))
    )
    (base / "enabled_plugins").write_text("[].\n")
    (base / "rabbitmq-env.conf").write_text("")
    env = {
        **os.environ,
        "HOME": str(base),
        "RABBITMQ_NODENAME": nodename,
        "RABBITMQ_NODE_PORT": str(port),
        "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
        "RABBITMQ_DIST_PORT": str(dist_port),
        "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
        "RABBITMQ_LOG_BASE": str(base / "log"),
        "RABBITMQ_PID_FILE": str(base / "rabbit.pid"),
        "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq.conf"),
        "RABBITMQ_CONFIG_FILES": str(conf_d),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "enabled_plugins"),
        "RABBITMQ_CONF_ENV_FILE": str(base / "rabbitmq-env.conf"),
        "RABBITMQ_ALLOW_INPUT": "",
    }
    ctl = [_rabbit_bin("rabbitmqctl"), "-n", nodename, "-q"]
    with (base / "server.out").open("wb") as log:
        server = subprocess.Popen(
            [_rabbit_bin("rabbitmq-server")], env=env, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        try:
            _run([*ctl, "wait", str(base / "rabbit.pid"), "--timeout", "120"], env, 130)
        except RuntimeError as exc:
            output = (base / "server.out").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"compose-layout node did not start: {exc}\n{output}") from exc
        yield port, nodename
    finally:
        try:
            _run([*ctl, "stop"], env, 60)
            server.wait(timeout=60)
        except (RuntimeError, subprocess.TimeoutExpired):
            server.kill()
            server.wait(timeout=30)
        shutil.rmtree(base, ignore_errors=True)


def _settings(port: int, url: str) -> RabbitMQSettings:
    parts = urlsplit(url)
    assert parts.username and parts.password
    return RabbitMQSettings(
        port=port,
        vhost=parts.path.lstrip("/"),
        username=parts.username,
        password=parts.password,
        reconnect_attempts=1,
        reconnect_initial_delay=0.1,
    )


def test_compose_users_log_in_with_their_compose_urls_and_the_participant_user_is_confined(
    compose_node: tuple[int, str],
) -> None:
    port, _ = compose_node
    aggregator_url = _compose_url("aggregator")
    participant_url = _compose_url("participant")
    assert urlsplit(aggregator_url).password == DEV_PASSWORDS["aggregator"]
    with RabbitMQTransport(_settings(port, aggregator_url)) as aggregator:
        declare_core(aggregator)
    with RabbitMQTransport(_settings(port, participant_url)) as participant:
        declare_participant(participant, "replica-0")
        participant.publish(
            SUBMIT_EXCHANGE, SUBMIT_ROUTING_KEY, ModelRequest(round=0, participant_id="replica-0")
        )
        assert participant.get(participant_queue("replica-0"), timeout=0.5) is None
    with RabbitMQTransport(_settings(port, aggregator_url)) as aggregator:
        delivery = aggregator.get(AGGREGATOR_QUEUE, timeout=5.0)
        assert delivery is not None and delivery.user_id == "participants-dev"
        aggregator.ack(delivery)

    def publish_a_model(transport: Transport) -> None:
        transport.publish(MODEL_EXCHANGE, "", ModelRequest(round=0, participant_id="x"))

    def read_the_aggregators_queue(transport: Transport) -> None:
        transport.get(AGGREGATOR_QUEUE, timeout=0.5)

    for forbidden in (publish_a_model, read_the_aggregators_queue):
        with (
            RabbitMQTransport(_settings(port, participant_url)) as participant,
            pytest.raises(AccessRefused),
        ):
            forbidden(participant)
