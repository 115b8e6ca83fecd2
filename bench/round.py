"""A secure round over RabbitMQ on loopback (the stack issue, "bench/round.py"; DESIGN.md
section 5, the round; section 6, SecAgg+).

For each cohort size n (10, 50, 100, 200) and each graph (``plus``: SecAgg+ with
2 ceil(log2 n) neighbours; ``plus-default``: SecAgg+ at crypto's default degree;
``full``: every pair masks), it starts a real ``fedrank aggregator`` and n synthetic
participants in a few ``fedrank participant --count`` processes (one participant per
process for n = 10) on a fresh vhost of the local broker, runs ``--rounds`` secure
rounds with cohort = n and quorum t = floor(n/2) + 1, d = 22 (firefox-2018), nobody
dropping, and prints JSON:

- latency by phase (the aggregator's round log ``phase_seconds``), the median over the
  rounds after the first (which also waits for participants to start), and
  ``protocol_seconds``, the sum from the first check-in to the published step (median and
  minimum). Phases end as soon as every member answered, so when nobody drops no deadline
  is waited for (``deadline_hit`` says whether any phase reached its deadline);
- messages and bytes each participant *sent* in the last round (its own log lines
  ``sent KIND of round R (N bytes)``) and *received* (a mirror queue bound to
  ``fedrank.model`` and to ``fedrank.direct`` with every participant's routing key counts
  what the aggregator addressed to each, also split by message kind); mean and max over
  participants;
- CPU seconds per round (user + system, ``/proc/<pid>/stat``) the aggregator and all
  participant processes used over the measured rounds: on a shared machine the
  wall-clock latency depends on the load, the CPU time much less;
- peak resident memory (``VmHWM`` from ``/proc/<pid>/status``) of the aggregator and of
  each participant process (with how many participants it holds); the n = 10 points give
  the one-participant process.

Targets (the issue): a 100-participant secure round in under 2 s of protocol time;
cost per participant growing no faster than n log n with SecAgg+; a participant process
under 100 MB.

Run from the repository root, with a broker on 127.0.0.1:5672 (scripts/_env.sh
``ensure_rabbitmq``) and rabbitmqctl on the PATH::

    .venv/bin/python bench/round.py [--sizes 10,50,100,200] [--graphs plus,full] > round.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from broker.topology import DIRECT_EXCHANGE, MODEL_EXCHANGE, participant_queue  # noqa: E402
from tests.integration.stack import Stack, StackProcess, fresh_vhost, vhost_url  # noqa: E402
from tests.integration.stack_wire import bindings, declare_core_topology  # noqa: E402

SENT = re.compile(r"(\S+): sent (\S+) of round (\d+) \((\d+) bytes\)")
#: The graphs compared: SecAgg+ with 2 ceil(log2 n) neighbours (the O(log n) regime the
#: target is about), SecAgg+ at its default degree (chosen by crypto.secagg.params for
#: dropout tolerance: the complete graph up to n = 100 and nearly so at 200), the full graph.
GRAPHS = ("plus", "plus-default", "full")


def graph_flags(graph: str, n: int) -> tuple[str, ...]:
    if graph == "plus":
        return ("--secagg-plus", "--degree", str(2 * max(1, math.ceil(math.log2(n)))))
    if graph == "plus-default":
        return ("--secagg-plus",)
    return ()


#: Participants per process above n = 10 (a 2-core machine runs ~10 processes well).
PROCESSES = 10


class Mirror:
    """Counts what the aggregator sends to each participant: one queue bound to the model
    fanout and to ``fedrank.direct`` with every participant's routing key."""

    def __init__(self, amqp_url: str, participant_ids: list[str]) -> None:
        import pika

        self.ids = set(participant_ids)
        #: (round, kind, bytes) of every announcement, and of what each participant was sent
        self.fanout: list[tuple[int, str, int]] = []
        self.direct: dict[str, list[tuple[int, str, int]]] = {pid: [] for pid in participant_ids}
        self._connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
        channel = self._connection.channel()
        queue = "bench.mirror"
        channel.queue_declare(queue, durable=False, exclusive=True)
        channel.queue_bind(queue, MODEL_EXCHANGE)
        for pid in participant_ids:
            channel.queue_bind(queue, DIRECT_EXCHANGE, routing_key=pid)
        channel.basic_consume(queue, self._on_message, auto_ack=True)
        self._stop = False
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _on_message(self, _ch: Any, method: Any, _properties: Any, body: bytes) -> None:
        from broker.codec import DecodeError, decode

        try:
            message = decode(body)
            round_number, kind = message.round, message.kind
        except DecodeError:
            round_number, kind = -1, "undecodable"
        if method.exchange == MODEL_EXCHANGE:
            self.fanout.append((round_number, kind, len(body)))
        elif method.routing_key in self.direct:
            self.direct[method.routing_key].append((round_number, kind, len(body)))

    def _loop(self) -> None:
        while not self._stop:
            self._connection.process_data_events(time_limit=0.05)
        self._connection.close()

    def close(self) -> None:
        self._stop = True
        self._thread.join(timeout=10)


def _stats(values: list[int]) -> dict[str, float]:
    if not values:
        return {"mean": 0.0, "max": 0.0}
    return {"mean": sum(values) / len(values), "max": float(max(values))}


def _cpu_seconds(process: StackProcess) -> float:
    """User + system CPU seconds the (running) process has used, from /proc."""
    fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mb(process: StackProcess) -> float | None:
    peak = process.peak_rss_bytes()
    return None if peak is None else round(peak / 2**20, 1)


def run_point(n: int, graph: str, rounds: int, workdir: Path) -> dict[str, Any]:
    """One cohort size and graph: ``rounds`` rounds, the last one measured."""
    processes = n if n <= PROCESSES else PROCESSES
    counts = [n // processes + (1 if i < n % processes else 0) for i in range(processes)]
    quorum = n // 2 + 1
    with fresh_vhost("fedrank-bench") as vhost:
        url = vhost_url(vhost)
        stack = Stack(workdir, url)
        try:
            declare_core_topology(url)
            stack.export_key()
            ids = []
            for i, count in enumerate(counts):
                stack.start_participants(f"b{i}", 1000 + i, count)
                ids += [f"b{i}-{j}" for j in range(count)]
            wanted = {(DIRECT_EXCHANGE, participant_queue(pid), pid) for pid in ids}
            stack.wait_for("participant queues bound", lambda: wanted <= bindings(vhost), 180)
            mirror = Mirror(url, ids)
            started = time.monotonic()
            aggregator = stack.start_aggregator(
                "--cohort",
                str(n),
                "--quorum",
                str(quorum),
                "--check-in-seconds",
                "120",
                "--phase-seconds",
                "120",
                *graph_flags(graph, n),
            )
            stack.wait_rounds(1, timeout=600)
            cpu_before = {p.pid: _cpu_seconds(p) for p in stack.processes}
            records = stack.wait_rounds(rounds, timeout=600)
            cpu = {p.pid: _cpu_seconds(p) - cpu_before[p.pid] for p in stack.processes}
            wall = time.monotonic() - started
            aggregator_rss = _rss_mb(aggregator)
            participant_rss = [_rss_mb(p) for p in stack.processes[:-1]]
            mirror.close()
        finally:
            stack.stop_all()
    completed = [r for r in records if r.outcome == "completed"]
    last = completed[-1]
    sent_messages: dict[str, int] = {pid: 0 for pid in ids}
    sent_bytes: dict[str, int] = {pid: 0 for pid in ids}
    for process in stack.processes[:-1]:
        for pid, _kind, number, size in SENT.findall(process.log()):
            if int(number) == last.round and pid in sent_bytes:
                sent_messages[pid] += 1
                sent_bytes[pid] += int(size)
    received: dict[str, list[tuple[str, int]]] = {
        pid: [(kind, size) for number, kind, size in mirror.fanout if number == last.round]
        + [(kind, size) for number, kind, size in mirror.direct[pid] if number == last.round]
        for pid in ids
    }
    received_messages = [len(received[pid]) for pid in ids]
    received_bytes = [sum(size for _, size in received[pid]) for pid in ids]
    by_kind: dict[str, int] = {}
    for pid in ids:
        for kind, size in received[pid]:
            by_kind[kind] = by_kind.get(kind, 0) + size
    aggregator_pid = stack.processes[-1].pid
    # Rounds after the first (which waits for participants to start): medians per phase.
    measured = completed[1:] or completed
    phases = {
        name: statistics.median(r.phase_seconds.get(name, 0.0) for r in measured)
        for name in last.phase_seconds
    }
    totals = [sum(r.phase_seconds.values()) for r in measured]
    deadline_hit = any(s >= 120 for r in measured for s in r.phase_seconds.values())
    rounds_measured = max(len(completed) - 1, 1)
    return {
        "n": n,
        "graph": graph,
        "aggregator_flags": list(graph_flags(graph, n)),
        "quorum": quorum,
        "d": len(last.weights_before),
        "processes": processes,
        "participants_per_process": max(counts),
        "rounds_logged": len(records),
        "rounds_completed": len(completed),
        "measured_rounds": [r.round for r in measured],
        "bytes_from_round": last.round,
        "survived": last.survived,
        "phase_seconds_median": {k: round(v, 4) for k, v in phases.items()},
        "protocol_seconds_median": round(statistics.median(totals), 4),
        "protocol_seconds_min": round(min(totals), 4),
        "deadline_hit": deadline_hit,
        "per_participant": {
            "sent_messages": _stats(list(sent_messages.values())),
            "sent_bytes": _stats(list(sent_bytes.values())),
            "received_messages": _stats(received_messages),
            "received_bytes": _stats(received_bytes),
            "received_bytes_by_kind": {k: round(v / len(ids)) for k, v in sorted(by_kind.items())},
        },
        "cpu_seconds_per_round": {
            "aggregator": round(cpu[aggregator_pid] / rounds_measured, 3),
            "participants_total": round(
                sum(v for pid, v in cpu.items() if pid != aggregator_pid) / rounds_measured, 3
            ),
            "per_participant": round(
                sum(v for pid, v in cpu.items() if pid != aggregator_pid) / rounds_measured / n,
                4,
            ),
        },
        "peak_rss_mb": {
            "aggregator": aggregator_rss,
            "participant_process_max": max(
                (r for r in participant_rss if r is not None), default=None
            ),
            "participants_per_process": max(counts),
        },
        "bench_wall_seconds": round(wall, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10,50,100,200")
    parser.add_argument("--graphs", default="plus,full", help=f"of {', '.join(GRAPHS)}")
    parser.add_argument(
        "--rounds", type=int, default=4, help="rounds per point (all but the first measured)"
    )
    parser.add_argument("--note", default="", help="recorded in the output (e.g. machine load)")
    args = parser.parse_args(argv)
    # SIGTERM (and SIGINT, even when a shell started us in the background) unwinds through
    # the finally blocks that stop every process this run started and delete its vhost.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _interrupted)
    sizes = [int(s) for s in args.sizes.split(",")]
    graphs = args.graphs.split(",")
    points = []
    with tempfile.TemporaryDirectory(prefix="fedrank-bench-round-") as tmp:
        for n in sizes:
            for graph in graphs:
                workdir = Path(tmp) / f"{graph}-{n}"
                workdir.mkdir()
                print(f"[bench/round] n={n} graph={graph}", file=sys.stderr, flush=True)
                point = run_point(n, graph, args.rounds, workdir)
                print(json.dumps(point), file=sys.stderr, flush=True)
                points.append(point)
    one_participant = [
        point["peak_rss_mb"]["participant_process_max"]
        for point in points
        if point["peak_rss_mb"]["participants_per_process"] == 1
        and point["peak_rss_mb"]["participant_process_max"] is not None
    ]
    summary = {
        "benchmark": "round over RabbitMQ on loopback",
        "machine": {
            "python": platform.python_version(),
            "cpus": _cpus(),
            "load_average_at_end": os.getloadavg(),
        },
        "note": args.note,
        "source": _source(),
        "points": points,
        "one_participant_process_peak_rss_mb": max(one_participant) if one_participant else None,
        "targets": {
            "protocol_seconds_n100_secagg_plus_below": 2.0,
            "participant_process_rss_mb_below": 100,
        },
        "growth": _growth(points),
    }
    print(json.dumps(summary, indent=2))
    return 0


def _source() -> dict[str, Any]:
    """The commit measured, and the files of the programs that differed from it."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, check=False
        ).stdout.strip()

    changed = git(
        "status",
        "--porcelain",
        "--",
        "aggregator",
        "participant",
        "broker",
        "crypto",
        "frecency",
        "fedrank",
    )
    return {"commit": git("rev-parse", "HEAD"), "uncommitted": changed.splitlines()}


def _interrupted(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _cpus() -> int:
    return len(os.sched_getaffinity(0))


def _growth(points: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-participant bytes sent+received divided by log2(n), per graph: flat or falling
    means the cost grows no faster than n log n in total (log n per participant)."""
    out: dict[str, Any] = {}
    for graph in {p["graph"] for p in points}:
        rows = sorted((p for p in points if p["graph"] == graph), key=lambda p: p["n"])
        out[graph] = [
            {
                "n": p["n"],
                "bytes_per_participant": p["per_participant"]["sent_bytes"]["mean"]
                + p["per_participant"]["received_bytes"]["mean"],
                "per_log2_n": round(
                    (
                        p["per_participant"]["sent_bytes"]["mean"]
                        + p["per_participant"]["received_bytes"]["mean"]
                    )
                    / math.log2(p["n"]),
                    1,
                ),
            }
            for p in rows
        ]
    return out


if __name__ == "__main__":
    sys.exit(main())
