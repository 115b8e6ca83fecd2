"""Fixtures for tests against real RabbitMQ brokers.

Two brokers:

- the shared broker at ``FEDRANK_AMQP_URL`` (default ``amqp://guest:guest@127.0.0.1:5672/``,
  started by scripts/test.sh): each test session gets a fresh vhost, created with
  ``rabbitmqctl add_vhost`` and deleted at the end, so parallel sessions don't collide.
  Fixtures: ``amqp_vhost`` (its name), ``rabbitmq_settings`` (guest on that vhost),
  ``rabbitmqctl`` (a function running rabbitmqctl against the shared node).
- a private node started from a clean state with deploy/rabbitmq/rabbitmq.conf and
  definitions.json (vhost ``fedrank``, user ``aggregator``, participant ``demo``), for
  permission tests. Fixture: ``private_rabbitmq`` (a :class:`PrivateNode`, session scope).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from broker.provision import DEV_PASSWORDS, enroll_participant
from broker.rabbitmq import RabbitMQSettings

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy" / "rabbitmq"
AMQP_URL = os.environ.get("FEDRANK_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
#: Seconds the private node may take to boot from a clean state.
PRIVATE_NODE_BOOT_TIMEOUT = 120


def _rabbit_bin(name: str) -> str:
    """The RabbitMQ script itself (not Debian's su-to-rabbitmq wrapper) if installed."""
    direct = Path("/usr/lib/rabbitmq/bin") / name
    if direct.exists():
        return str(direct)
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} not found: install rabbitmq-server")
    return found


def _run(command: Sequence[str], env: dict[str, str] | None = None, timeout: float = 120) -> str:
    result = subprocess.run(
        list(command), capture_output=True, text=True, env=env, timeout=timeout, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command)} failed ({result.returncode}): {result.stderr or result.stdout}"
        )
    return result.stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def rabbitmqctl() -> object:
    """``rabbitmqctl(*args) -> stdout`` against the shared node."""

    def run(*args: str) -> str:
        return _run(["rabbitmqctl", "-q", *args])

    return run


@pytest.fixture(scope="session")
def amqp_vhost() -> Iterator[str]:
    """A fresh vhost on the shared broker, guest has all rights on it; deleted after."""
    base = RabbitMQSettings.from_url(AMQP_URL)
    vhost = f"fedrank-test-{uuid.uuid4().hex[:12]}"
    _run(["rabbitmqctl", "-q", "add_vhost", vhost])
    try:
        _run(["rabbitmqctl", "-q", "set_permissions", "-p", vhost, base.username, ".*", ".*", ".*"])
        yield vhost
    finally:
        _run(["rabbitmqctl", "-q", "delete_vhost", vhost])


@pytest.fixture(scope="session")
def rabbitmq_settings(amqp_vhost: str) -> RabbitMQSettings:
    """Guest on the session's vhost, with quick reconnects."""
    return RabbitMQSettings.from_url(
        AMQP_URL,
        vhost=amqp_vhost,
        reconnect_attempts=10,
        reconnect_initial_delay=0.1,
        reconnect_max_delay=1.0,
        prefetch=16,
    )


@dataclass
class PrivateNode:
    """A private RabbitMQ node loaded with deploy/ definitions."""

    nodename: str
    port: int
    base: Path
    env: dict[str, str] = field(repr=False)
    vhost: str = "fedrank"

    def ctl(self, *args: str) -> str:
        return _run([_rabbit_bin("rabbitmqctl"), "-n", self.nodename, "-q", *args], env=self.env)

    def settings(self, username: str, password: str) -> RabbitMQSettings:
        return RabbitMQSettings(
            port=self.port,
            vhost=self.vhost,
            username=username,
            password=password,
            reconnect_attempts=2,
            reconnect_initial_delay=0.1,
        )

    def aggregator_settings(self) -> RabbitMQSettings:
        return self.settings("aggregator", DEV_PASSWORDS["aggregator"])

    def enroll(self, participant_id: str, password: str) -> RabbitMQSettings:
        """Enroll a participant (broker.provision) and return its settings."""
        enroll_participant(
            participant_id,
            password,
            self.vhost,
            node=self.nodename,
            rabbitmqctl=[_rabbit_bin("rabbitmqctl")],
            env=self.env,
        )
        return self.settings(f"participant-{participant_id}", password)


def _private_config(port: int, definitions: Path) -> str:
    shipped = (DEPLOY / "rabbitmq.conf").read_text()
    shipped = re.sub(r"(?m)^(load_definitions|listeners\.tcp\.default)\s*=.*$", "", shipped)
    shipped = re.sub(r"(?m)^disk_free_limit\.absolute\s*=.*$", "", shipped)
    return (
        shipped
        + f"\nload_definitions = {definitions}\nlisteners.tcp.1 = 127.0.0.1:{port}\n"
        + "disk_free_limit.absolute = 50MB\n"
    )


@pytest.fixture(scope="session")
def private_rabbitmq() -> Iterator[PrivateNode]:
    """Start a private node from a clean state (own mnesia, logs, cookie, ports) that
    loads deploy/rabbitmq/definitions.json; stop it and remove its files at the end."""
    base = Path(tempfile.mkdtemp(prefix="fedrank-rabbit-"))
    port, dist_port = _free_port(), _free_port()
    nodename = f"fedrank-test-{os.getpid()}@localhost"
    (base / "rabbitmq.conf").write_text(_private_config(port, DEPLOY / "definitions.json"))
    (base / "enabled_plugins").write_text("[].\n")
    (base / "rabbitmq-env.conf").write_text("")
    env = {
        **os.environ,
        "HOME": str(base),  # the node's and rabbitmqctl's .erlang.cookie live here
        "RABBITMQ_NODENAME": nodename,
        "RABBITMQ_NODE_PORT": str(port),
        "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
        "RABBITMQ_DIST_PORT": str(dist_port),
        "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
        "RABBITMQ_LOG_BASE": str(base / "log"),
        "RABBITMQ_PID_FILE": str(base / "rabbit.pid"),
        "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq.conf"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "enabled_plugins"),
        "RABBITMQ_CONF_ENV_FILE": str(base / "rabbitmq-env.conf"),
        "RABBITMQ_ALLOW_INPUT": "",
    }
    log = (base / "server.out").open("wb")
    server = subprocess.Popen(
        [_rabbit_bin("rabbitmq-server")], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    node = PrivateNode(nodename, port, base, env)
    try:
        _run(
            [
                _rabbit_bin("rabbitmqctl"),
                "-n",
                nodename,
                "-q",
                "wait",
                str(base / "rabbit.pid"),
                "--timeout",
                str(PRIVATE_NODE_BOOT_TIMEOUT),
            ],
            env=env,
            timeout=PRIVATE_NODE_BOOT_TIMEOUT + 10,
        )
        yield node
    except RuntimeError as exc:
        output = (base / "server.out").read_text(errors="replace")[-3000:]
        raise RuntimeError(f"private RabbitMQ node did not start: {exc}\n{output}") from exc
    finally:
        try:
            _run([_rabbit_bin("rabbitmqctl"), "-n", nodename, "-q", "stop"], env=env, timeout=60)
            server.wait(timeout=60)
        except (RuntimeError, subprocess.TimeoutExpired):
            server.kill()
            server.wait(timeout=30)
        finally:
            log.close()
            shutil.rmtree(base, ignore_errors=True)
