"""``fedrank participant`` refuses to start with a one-line reason (the stack issue's
interface): key missing or unreadable, places file not a history, broker unreachable,
bad flags."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from crypto.hazmat import primitives
from fedrank.cli import main


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "aggregator.pub"
    path.write_text(primitives.public_signing_key(primitives.generate_signing_key()).hex())
    return path


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"amqp://guest:guest@127.0.0.1:{port}/"


def fails(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["participant", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err, "no reason printed"
    last = err[-1]
    assert last.startswith("fedrank participant: ")
    assert "Traceback" not in "\n".join(err)
    return last


def test_missing_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reason = fails(["--aggregator-key", str(tmp_path / "nope.pub"), "--synthetic", "1"], capsys)
    assert "cannot read the aggregator key" in reason


def test_not_a_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.pub"
    path.write_text("hello")
    assert "not an Ed25519 public key" in fails(
        ["--aggregator-key", str(path), "--synthetic", "1"], capsys
    )


def test_places_not_a_history(
    tmp_path: Path, key_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bogus = tmp_path / "places.sqlite"
    bogus.write_text("not sqlite")
    reason = fails(["--aggregator-key", str(key_file), "--places", str(bogus)], capsys)
    assert "--places" in reason and "places.sqlite" in reason


def test_broker_unreachable(key_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reason = fails(
        [
            "--amqp",
            closed_port_url(),
            "--connect-attempts",
            "1",
            "--aggregator-key",
            str(key_file),
            "--synthetic",
            "1",
        ],
        capsys,
    )
    assert "cannot start" in reason and "no broker" in reason


@pytest.mark.parametrize(
    ("flags", "reason"),
    [
        (["--dp-budget", "1"], "EPSILON,DELTA"),
        (["--dp-budget", "1,2"], "0 < delta < 1"),
        (["--count", "0"], "--count"),
        (["--id", "bad id!"], "must match"),
        (["--amqp", "http://x/"], "amqp://"),
        (["--model", "nope"], "unknown model"),
        (["--amqp", "amqp://participant-demo:pw@127.0.0.1/", "--count", "2"], "one participant"),
    ],
)
def test_bad_flags(
    key_file: Path, flags: list[str], reason: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert reason in fails(["--aggregator-key", str(key_file), "--synthetic", "1", *flags], capsys)
