"""A harness for end-to-end tests of the running stack (the stack issue; DESIGN.md
sections 5 and 7): the real ``fedrank aggregator`` and ``fedrank participant`` programs as
subprocesses on a fresh vhost of a real RabbitMQ, driven and observed from the outside.

- :func:`fresh_vhost`: a vhost of its own on the shared broker (created with
  ``rabbitmqctl``, guest has every right on it, deleted afterwards), so one test's queues,
  leftover messages and aggregator cannot meet another's.
- :class:`Stack`: starts the aggregator (state directory under the test's tmp dir; its
  public key exported first) and participant processes (``--synthetic SEED --count N``),
  each with its stderr in its own log file; waits on *conditions* (round log lines, log
  lines, process exit) with timeouts, never on fixed sleeps; kills with SIGKILL or stops
  with SIGTERM; restarts; and on exit stops everything it started and, when a test
  failed, the tails of the logs are in the assertion messages.

Intercepting the wire (killing a participant exactly when a phase opens for it,
copies of submissions, bindings) is in tests/integration/stack_wire.py.

Waiting polls the condition every ``POLL`` seconds until a deadline: the thing waited
for happens in another process, so there is nothing to block on.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote

from aggregator.roundlog import RoundLog, RoundRecord
from aggregator.state import AggregatorState, StateDirectory

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[2]
AMQP_URL = os.environ.get("FEDRANK_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
POLL = 0.05
#: How long the program may take to start (import numpy, connect) on a loaded 2-core box.
START_TIMEOUT = 30.0


class StackTimeout(AssertionError):
    """A condition did not hold in time; the message names it and shows the logs."""


def run_rabbitmqctl(*args: str) -> str:
    result = subprocess.run(
        ["rabbitmqctl", "-q", *args], capture_output=True, text=True, timeout=60, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"rabbitmqctl {' '.join(args)}: {result.stderr or result.stdout}")
    return result.stdout


@contextlib.contextmanager
def fresh_vhost(prefix: str = "fedrank-stack") -> Iterator[str]:
    """A new vhost on the shared broker with all rights for the URL's user; an AMQP URL
    for it is ``vhost_url(name)``. Deleted at the end."""
    user = AMQP_URL.split("//", 1)[1].split(":", 1)[0]
    vhost = f"{prefix}-{uuid.uuid4().hex[:10]}"
    run_rabbitmqctl("add_vhost", vhost)
    try:
        run_rabbitmqctl("set_permissions", "-p", vhost, user, ".*", ".*", ".*")
        yield vhost
    finally:
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            run_rabbitmqctl("delete_vhost", vhost)


def vhost_url(vhost: str, base: str = AMQP_URL) -> str:
    """``base`` with its vhost replaced by ``vhost``."""
    scheme, rest = base.split("//", 1)
    authority = rest.split("/", 1)[0]
    return f"{scheme}//{authority}/{quote(vhost, safe='')}"


@dataclass
class StackProcess:
    """One program started by the harness, its stderr in ``log_path``."""

    name: str
    argv: list[str]
    log_path: Path
    popen: subprocess.Popen[bytes]
    started_at: float = field(default_factory=time.monotonic)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def running(self) -> bool:
        return self.popen.poll() is None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def tail(self, lines: int = 25) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def kill(self) -> None:
        """SIGKILL, as a crash: no cleanup runs in the process."""
        if self.running():
            self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(timeout=30)

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, then SIGKILL if it does not exit in ``timeout``; the exit status."""
        if self.running():
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=30)
        return int(self.popen.returncode)

    def peak_rss_bytes(self) -> int | None:
        """VmHWM of the (running) process, from /proc."""
        try:
            status = Path(f"/proc/{self.pid}/status").read_text()
        except OSError:
            return None
        found = re.search(r"(?m)^VmHWM:\s+(\d+) kB$", status)
        return int(found.group(1)) * 1024 if found else None


class Stack:
    """The aggregator and participants of one test, on one vhost, under ``workdir``."""

    def __init__(self, workdir: Path, amqp_url: str, env: dict[str, str] | None = None) -> None:
        self.workdir = workdir
        self.amqp_url = amqp_url
        self.state_dir = workdir / "state"
        self.key_file = workdir / "aggregator.pub"
        self.logs = workdir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.env = {
            **os.environ,
            "FEDRANK_AMQP_URL": amqp_url,
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        self.processes: list[StackProcess] = []
        self._counter = 0

    # -- programs --------------------------------------------------------------------

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "fedrank", *args]

    def run(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """Run ``fedrank ARGS`` to completion (e.g. ``rounds``, ``--export-key``)."""
        return subprocess.run(
            self.command(*args),
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
            check=False,
            cwd=self.workdir,
        )

    def spawn(self, name: str, argv: Sequence[str]) -> StackProcess:
        self._counter += 1
        log_path = self.logs / f"{self._counter:02d}-{name}.log"
        with log_path.open("wb") as log:
            popen = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.workdir,
                start_new_session=True,
            )
        process = StackProcess(name, list(argv), log_path, popen)
        self.processes.append(process)
        return process

    def export_key(self) -> Path:
        """``fedrank aggregator --export-key`` into :attr:`key_file` (makes the key)."""
        result = self.run("aggregator", "--state", str(self.state_dir), "--export-key")
        assert result.returncode == 0, f"--export-key failed: {result.stderr}"
        assert result.stdout.strip(), "--export-key printed nothing"
        self.key_file.write_text(result.stdout)
        return self.key_file

    def start_aggregator(self, *flags: str) -> StackProcess:
        return self.spawn(
            "aggregator",
            self.command("aggregator", "--state", str(self.state_dir), *flags),
        )

    def start_participants(
        self, prefix: str, seed: int, count: int = 1, *flags: str
    ) -> StackProcess:
        """One participant process of ``count`` synthetic participants
        ``<prefix>-0 .. <prefix>-<count-1>``."""
        if not self.key_file.exists():
            self.export_key()
        return self.spawn(
            f"participant-{prefix}",
            self.command(
                "participant",
                "--aggregator-key",
                str(self.key_file),
                "--synthetic",
                str(seed),
                "--count",
                str(count),
                "--id",
                prefix,
                *flags,
            ),
        )

    # -- observation -----------------------------------------------------------------

    def records(self) -> list[RoundRecord]:
        return RoundLog(StateDirectory(self.state_dir).round_log_file).read()

    def state(self) -> AggregatorState | None:
        return StateDirectory(self.state_dir).load()

    def logs_text(self, lines: int = 25) -> str:
        return "\n".join(
            f"--- {p.name} (pid {p.pid}, exit {p.popen.poll()}) {p.log_path}\n{p.tail(lines)}"
            for p in self.processes
        )

    def wait_for(
        self,
        what: str,
        condition: Callable[[], T | None],
        timeout: float,
        alive: Sequence[StackProcess] = (),
    ) -> T:
        """Poll ``condition`` until it returns something other than None/False; fail at
        once if a process of ``alive`` exits first (its log tail is in the message)."""
        deadline = time.monotonic() + timeout
        while True:
            exited = [p for p in alive if not p.running()]
            value = condition()
            if value is not None and value is not False:
                return value
            if exited:
                raise StackTimeout(
                    f"{exited[0].name} exited ({exited[0].popen.returncode}) while waiting "
                    f"for {what}\n" + self.logs_text()
                )
            if time.monotonic() > deadline:
                raise StackTimeout(
                    f"timed out after {timeout:.0f} s waiting for {what}\n" + self.logs_text()
                )
            time.sleep(POLL)

    def wait_rounds(
        self,
        count: int,
        timeout: float,
        outcome: str | None = "completed",
    ) -> list[RoundRecord]:
        """All records, once ``count`` of them have ``outcome`` (None = any); fails as soon
        as the running aggregator exits without having logged them."""

        def enough() -> list[RoundRecord] | None:
            records = self.records()
            matching = [r for r in records if outcome is None or r.outcome == outcome]
            return records if len(matching) >= count else None

        aggregators = [p for p in self.processes if p.name == "aggregator" and p.running()]
        return self.wait_for(
            f"{count} {outcome or 'logged'} rounds", enough, timeout, alive=aggregators[-1:]
        )

    def wait_log(
        self, process: StackProcess, pattern: str, timeout: float, count: int = 1
    ) -> list[str]:
        """Lines of ``process``'s log matching the regex ``pattern``, once ``count``."""
        regex = re.compile(pattern)

        def found() -> list[str] | None:
            lines = [line for line in process.log().splitlines() if regex.search(line)]
            return lines if len(lines) >= count else None

        return self.wait_for(f"{pattern!r} in {process.name}'s log", found, timeout)

    def wait_exit(self, process: StackProcess, timeout: float) -> int:
        def exited() -> int | None:
            return process.popen.poll()

        return self.wait_for(f"{process.name} to exit", exited, timeout)

    def stop_all(self) -> None:
        for process in reversed(self.processes):
            if process.running():
                with contextlib.suppress(OSError):
                    process.popen.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(OSError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.popen.wait(timeout=15)


@contextlib.contextmanager
def running_stack(workdir: Path, env: dict[str, str] | None = None) -> Iterator[Stack]:
    """A :class:`Stack` on a fresh vhost; everything it started is stopped at the end."""
    with fresh_vhost() as vhost:
        stack = Stack(workdir, vhost_url(vhost), env)
        try:
            yield stack
        finally:
            stack.stop_all()
