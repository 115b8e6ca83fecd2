"""The participant runtime (participant/runner.py): N participants in one thread over one
transport, against a test-side stand-in aggregator built from crypto.secagg's
SecAggServer, on the in-memory broker. tests/integration/test_participant_rabbitmq.py
runs the same stand-in over RabbitMQ."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

from broker.codec import DecodeError, WireMessage, decode
from broker.memory import MemoryBroker
from broker.messages import (
    SUBMISSION_TYPES,
    CheckIn,
    CohortInvitation,
    DirectoryEntry,
    ModelAnnouncement,
    ModelRequest,
    PhaseDeadlines,
    PrivacySettings,
    RoundParameters,
    SecAggParameters,
    SecAggSubmission,
    request_from_crypto,
    sign_message,
)
from broker.payload import decode_total, input_length
from broker.topology import (
    AGGREGATOR_QUEUE,
    DIRECT_EXCHANGE,
    MODEL_EXCHANGE,
    declare_core,
)
from broker.transport import Transport
from crypto.hazmat import primitives
from crypto.secagg import (
    AggregateSum,
    RemoteProtocolError,
    RoundAborted,
    SecAggServer,
    ServerStep,
)
from frecency.registry import get_model
from participant.history import (
    PendingInteractions,
    SyntheticHistory,
    SyntheticPerson,
    synthetic_interactions,
)
from participant.runner import ParticipantRunner, RunnerConfig
from participant.session import ParticipantSession, SessionConfig
from participant.signal import compute_contribution
from participant.state import ParticipantRecord

MODEL = get_model("firefox-2018")
D = MODEL.spec.dimension
DEADLINES = PhaseDeadlines(
    check_in=10.0, share_keys=20.0, masked_input=30.0, consistency_check=40.0, unmask=50.0
)


class StandInAggregator:
    """Just enough aggregator for one round at a time: announce, collect check-ins, invite,
    run a SecAggServer over the transport. Signs with its own Ed25519 key."""

    def __init__(
        self, transport: Transport, key: bytes, timeout: float = 30.0, phase_timeout: float = 5.0
    ) -> None:
        self.transport = transport
        self.key = key
        self.timeout = timeout
        self.phase_timeout = phase_timeout
        self.requests: list[ModelRequest] = []
        self.rejected: list[str] = []
        declare_core(transport)

    def _next(self, until: float) -> WireMessage | None:
        delivery = self.transport.get(AGGREGATOR_QUEUE, timeout=max(0.0, until - time.monotonic()))
        if delivery is None:
            return None
        self.transport.ack(delivery)
        try:
            return decode(delivery.body, SUBMISSION_TYPES)
        except DecodeError as error:
            self.rejected.append(error.reason)
            return None

    def wait_requests(self, participants: set[str]) -> None:
        """Every participant asked for the model (so its queue is bound)."""
        until = time.monotonic() + self.timeout
        asked: set[str] = set()
        while not participants <= asked:
            message = self._next(until)
            if message is None and time.monotonic() > until:
                raise AssertionError(f"model requests from {participants - asked} missing")
            if isinstance(message, ModelRequest):
                self.requests.append(message)
                asked.add(message.participant_id)

    def announcement(
        self, round_number: int, weights: np.ndarray, quorum: int, cohort: int
    ) -> ModelAnnouncement:
        return sign_message(
            self.key,
            ModelAnnouncement(
                round=round_number,
                model_version=round_number,
                spec=MODEL.spec.name,
                weights=tuple(float(w) for w in weights),
                params=RoundParameters(
                    cohort_size=cohort,
                    quorum=quorum,
                    deadlines=DEADLINES,
                    privacy=PrivacySettings(),
                ),
            ),
        )

    def run_round(
        self,
        round_number: int,
        weights: np.ndarray,
        participants: set[str],
        threshold: int,
        on_phase: Callable[[str], None] | None = None,
    ) -> AggregateSum | RoundAborted:
        """One whole round with ``participants`` expected to check in."""
        until = time.monotonic() + self.timeout
        message = self.announcement(round_number, weights, threshold, len(participants))
        self.transport.publish(MODEL_EXCHANGE, "", message)
        check_ins: dict[str, CheckIn] = {}
        while set(check_ins) != participants:
            reply = self._next(until)
            if reply is None and time.monotonic() > until:
                raise AssertionError(f"check-ins from {participants - set(check_ins)} missing")
            if isinstance(reply, CheckIn) and reply.round == round_number:
                check_ins[reply.participant_id] = reply
        directory = tuple(
            DirectoryEntry(member=i, participant_id=pid, identity_key=check_ins[pid].identity_key)
            for i, pid in enumerate(sorted(check_ins), 1)
        )
        parameters = SecAggParameters(threshold=threshold, vector_length=input_length(D))
        members = {entry.member: entry.participant_id for entry in directory}
        server: SecAggServer | None = None
        for entry in directory:
            invitation = sign_message(
                self.key,
                CohortInvitation(
                    round=round_number,
                    participant_id=entry.participant_id,
                    member=entry.member,
                    model_version=round_number,
                    parameters=parameters,
                    directory=directory,
                    expires_in=self.timeout,
                ),
            )
            if server is None:
                server = SecAggServer(
                    invitation.crypto_parameters(),
                    invitation.crypto_directory(),
                    now=time.monotonic(),
                    phase_timeout=self.phase_timeout,
                )
            self.transport.publish(DIRECT_EXCHANGE, entry.participant_id, invitation)
        assert server is not None
        outcome: list[AggregateSum | RoundAborted] = []
        phase = server.phase

        def take(step: ServerStep) -> None:
            for request in step.messages:
                wire = request_from_crypto(request, members[request.recipient])
                self.transport.publish(DIRECT_EXCHANGE, wire.participant_id, wire)
            if step.outcome is not None:
                outcome.append(step.outcome)

        while not outcome:
            if time.monotonic() > until:
                raise AssertionError(f"round {round_number} did not finish in {server.phase}")
            reply = self._next(min(until, server.deadline))
            if isinstance(reply, SecAggSubmission) and reply.round == round_number:
                try:
                    take(server.receive(reply.to_crypto(), time.monotonic()))
                except RemoteProtocolError as refused:  # e.g. too late for its phase
                    self.rejected.append(str(refused))
            take(server.tick(time.monotonic()))
            if on_phase is not None and server.phase != phase:
                phase = server.phase
                on_phase(phase.value)
        return outcome[0]


def make_sessions(
    ids: Sequence[str], seed: int, aggregator_public: bytes
) -> list[ParticipantSession]:
    return [
        ParticipantSession(
            SessionConfig(pid, aggregator_public),
            SyntheticHistory(SyntheticPerson(seed, pid, MODEL, per_round=2)),
            ParticipantRecord(primitives.generate_signing_key()),
        )
        for pid in ids
    ]


def expected_vote_total(seed: int, ids: Sequence[str], rounds: Sequence[int]) -> np.ndarray:
    """Recomputed from the seed alone: the sum of the participants' votes."""
    weights = MODEL.spec.defaults()
    total = np.zeros(D, dtype=np.int64)
    for pid in ids:
        pending = synthetic_interactions(seed, pid, MODEL, [(r, weights) for r in rounds], 2)
        total += compute_contribution(MODEL, pending, weights).vote
    return total


def run_in_thread(runner: ParticipantRunner) -> threading.Thread:
    thread = threading.Thread(target=runner.run, name="participants", daemon=True)
    thread.start()
    return thread


def test_participants_in_one_thread_complete_rounds_over_the_memory_broker() -> None:
    broker = MemoryBroker()
    key = primitives.generate_signing_key()
    ids = [f"mem-{i}" for i in range(5)]
    runner = ParticipantRunner(
        make_sessions(ids, 21, primitives.public_signing_key(key)),
        broker.connect,
        RunnerConfig(rounds=2, poll_interval=0.01),
    )
    aggregator = StandInAggregator(broker.connect(), key)
    thread = run_in_thread(runner)
    aggregator.wait_requests(set(ids))
    weights = MODEL.spec.defaults()
    for round_number in (1, 2):
        outcome = aggregator.run_round(round_number, weights, set(ids), threshold=4)
        assert isinstance(outcome, AggregateSum)
        votes, totals = decode_total(outcome.total, D)
        assert np.array_equal(votes, expected_vote_total(21, ids, [round_number]))
        assert totals.interactions == 2 * len(ids)
    thread.join(timeout=10)
    assert not thread.is_alive(), "--rounds 2 should end the runner"
    sent = runner.stats
    assert set(sent.messages) == set(ids)
    # model request, check-in and five secagg messages per round
    assert all(count == 1 + 2 * 6 for count in sent.messages.values())
    assert all(size > 0 for size in sent.bytes.values())
    assert aggregator.rejected == []


def test_stop_ends_the_loop() -> None:
    broker = MemoryBroker()
    key = primitives.generate_signing_key()
    runner = ParticipantRunner(
        make_sessions(["stop-0"], 1, primitives.public_signing_key(key)),
        broker.connect,
        RunnerConfig(poll_interval=0.01),
    )
    aggregator = StandInAggregator(broker.connect(), key)
    thread = run_in_thread(runner)
    aggregator.wait_requests({"stop-0"})
    runner.stop()
    thread.join(timeout=10)
    assert not thread.is_alive()


def test_garbage_in_a_queue_is_rejected_and_the_round_goes_on() -> None:
    broker = MemoryBroker()
    key = primitives.generate_signing_key()
    ids = ["g-0", "g-1"]
    runner = ParticipantRunner(
        make_sessions(ids, 3, primitives.public_signing_key(key)),
        broker.connect,
        RunnerConfig(rounds=1, poll_interval=0.01),
    )
    aggregator = StandInAggregator(broker.connect(), key)
    thread = run_in_thread(runner)
    aggregator.wait_requests(set(ids))
    aggregator.transport.publish_bytes(MODEL_EXCHANGE, "", b"\x93\x01garbage")
    forged = aggregator.announcement(1, MODEL.spec.defaults(), 2, 2)
    forged = forged.model_copy(update={"signature": bytes(64)})
    aggregator.transport.publish(MODEL_EXCHANGE, "", forged)
    outcome = aggregator.run_round(1, MODEL.spec.defaults(), set(ids), threshold=2)
    assert isinstance(outcome, AggregateSum)
    thread.join(timeout=10)
    assert not thread.is_alive()


class BrokenHistory(SyntheticHistory):
    """A history whose computation fails (a bug): only its participant may suffer."""

    def pending(self, weights: np.ndarray) -> PendingInteractions:
        raise RuntimeError("simulated bug in the history source")


def test_one_failing_participant_does_not_stop_the_others() -> None:
    broker = MemoryBroker()
    key = primitives.generate_signing_key()
    ids = [f"f-{i}" for i in range(4)]
    sessions = make_sessions(ids, 8, primitives.public_signing_key(key))
    broken = sessions[0]
    broken.history = BrokenHistory(SyntheticPerson(8, ids[0], MODEL, per_round=2))
    runner = ParticipantRunner(sessions, broker.connect, RunnerConfig(poll_interval=0.01))
    aggregator = StandInAggregator(broker.connect(), key, phase_timeout=1.0)
    thread = run_in_thread(runner)
    try:
        aggregator.wait_requests(set(ids))
        outcome = aggregator.run_round(1, MODEL.spec.defaults(), set(ids), threshold=3)
        assert isinstance(outcome, AggregateSum)
        votes, _ = decode_total(outcome.total, D)
        assert np.array_equal(votes, expected_vote_total(8, ids[1:], [1]))
        assert thread.is_alive()
    finally:
        runner.stop()
        thread.join(timeout=10)
