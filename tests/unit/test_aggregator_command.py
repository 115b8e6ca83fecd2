"""``fedrank aggregator`` as a program: the exported key, and one-line errors with a
non-zero exit (never a traceback) when it cannot start."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from broker.messages import load_aggregator_public_key


def fedrank(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fedrank", "aggregator", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port  # nothing listens on it once the socket is closed


def assert_one_line_error(result: subprocess.CompletedProcess[str], code: int, text: str) -> None:
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("fedrank aggregator: ") and text in last, result.stderr


def test_export_key_prints_the_same_pinnable_key_every_time(tmp_path: Path) -> None:
    first = fedrank("--state", str(tmp_path / "s"), "--export-key")
    second = fedrank("--state", str(tmp_path / "s"), "--export-key")
    assert first.returncode == 0 and first.stdout == second.stdout
    assert len(load_aggregator_public_key(first.stdout.encode())) == 32


def test_an_unusable_state_directory_is_a_one_line_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = fedrank("--state", str(blocker / "state"), "--connect-attempts", "1")
    assert_one_line_error(result, 2, "unusable")


def test_an_unreachable_broker_is_a_one_line_error_after_the_retries(tmp_path: Path) -> None:
    url = f"amqp://guest:guest@127.0.0.1:{closed_port()}/%2F"
    result = fedrank("--state", str(tmp_path), "--amqp", url, "--connect-attempts", "2")
    assert_one_line_error(result, 3, "cannot reach the broker")
    assert result.stderr.count("connection attempt") == 2


def test_inconsistent_settings_are_a_one_line_error(tmp_path: Path) -> None:
    result = fedrank("--state", str(tmp_path), "--cohort", "3", "--quorum", "5")
    assert_one_line_error(result, 2, "quorum (5)")
    result = fedrank("--state", str(tmp_path), "--amqp", "http://example.org/")
    assert_one_line_error(result, 2, "amqp")
