"""The paper's simulation over the real protocol stack (the stack issue: ``fedrank simulate
--transport rabbitmq``; DESIGN.md sections 1 and 5, phases 1-7).

Design (the brief's second option, which reuses the stack's code rather than duplicating
it): the simulation's participants *are* real participant sessions and the aggregator
is the real aggregator; the simulation only supplies the world and evaluates.

* the aggregator: ``aggregator.service.AggregatorService`` (its ``Coordinator``: check-in,
  cohort, crypto.secagg server, poisoning bound, bounded Rprop with the simulation's
  ``RpropConfig``, the simulation's loss and margin announced as the round's learning
  objective, round log) in one thread, on its own transport, with its state in a
  temporary directory (built in that thread: a RabbitMQ transport belongs to the thread
  that opened it);
* the participants: one ``participant.session.ParticipantSession`` per simulated person
  (its own Ed25519 identity, pinned to the aggregator's key), all driven by one
  ``participant.runner.ParticipantRunner`` in another thread on its own transport. Each
  computes its vote with ``participant.signal`` from a :class:`WorldHistory`;
* :class:`WorldHistory` is the session's ``HistorySource`` view of the simulation's
  :class:`simulation.world.World`: the first session to see round r's announcement makes
  everyone search under the announced weights and draws the round's sample (in the seed's
  order, as the in-process loop does); a person has something new, so checks in, only if
  sampled. The cohort size is ``per_round``, so the check-in closes with exactly the
  sample, and every check-in is chosen;
* this thread waits for each round's record (``AggregatorService.records``), evaluates
  the aggregator's new weights on the held-out set and reports a
  :class:`simulation.rounds.RoundResult`, as the in-process loop does.

So round by round the sample, the votes (``participant.signal`` and the simulation's
batched ``frecency.learning.grouped_gradients`` compute the same signs) and the step
(``apply_votes``) are those of the in-process secure run with the same seed, and so are
the weights. The broker is whatever ``connect`` opens: RabbitMQ (use a vhost of its own:
stale submissions in ``fedrank.aggregator`` are discarded at the start) or the in-memory
broker. Dropouts (``--dropout``) are in-process only.
"""

from __future__ import annotations

import secrets
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from aggregator.config import SECAGG_PHASES, CoordinatorConfig
from aggregator.roundlog import RoundRecord
from aggregator.service import AggregatorService, ServiceOptions
from aggregator.signing import load_or_create_signing_key
from aggregator.state import StateDirectory
from broker.messages import LearningObjective
from broker.topology import AGGREGATOR_QUEUE, declare_core, declare_participant
from broker.transport import Transport
from crypto.hazmat import primitives
from crypto.secagg import degree_for
from frecency.history import Interaction
from frecency.learning import DEFAULT_EPSILON
from frecency.model import FrecencyModel
from participant.history import PendingInteractions
from participant.runner import ParticipantRunner, RunnerConfig
from participant.session import ParticipantSession, SessionConfig
from participant.state import ParticipantRecord
from simulation.evaluation import Metrics
from simulation.rounds import RoundResult, SimulationConfig, SimulationResult
from simulation.secure import SecureConfig
from simulation.world import RoundSample, World

FloatArray = NDArray[np.float64]
_STEP_REJECTED = "step rejected: "


@dataclass(frozen=True, slots=True)
class BrokerOptions:
    """Timing of the rounds over the broker: phases end as soon as everyone expected has
    answered, so these are only upper bounds (for a member that never answers)."""

    check_in_seconds: float = 60.0
    phase_seconds: float = 60.0
    reannounce_seconds: float = 1.0
    poll_seconds: float = 0.05

    def round_timeout(self) -> float:
        """Longest wait for one round's record before giving the run up."""
        return 2 * (self.check_in_seconds + SECAGG_PHASES * self.phase_seconds) + 60.0


class SharedRounds:
    """The world's rounds as the participant sessions see them (thread-safe)."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.samples: dict[int, RoundSample] = {}
        self._lock = threading.Lock()
        self._current = 0
        self._pending: dict[int, tuple[Interaction, ...]] = {}

    def observe(self, round_number: int, weights: FloatArray) -> None:
        """Round ``round_number`` (1-based) was announced with ``weights``: the first
        call makes everyone search and draws the sample."""
        with self._lock:
            if round_number <= self._current:
                return
            weights = np.asarray(weights, dtype=np.float64)
            sample = self.world.begin_round(round_number - 1, weights)
            self.samples[round_number] = sample
            self._pending = self.world.person_interactions(sample)
            self._current = round_number

    def has_new(self, person: int) -> bool:
        with self._lock:
            return person in self._pending

    def pending(self, person: int) -> PendingInteractions:
        with self._lock:
            interactions = self._pending.get(person, ())
        population = self.world.population
        batch = population.batch.take(self.world.person_pages(person))
        return PendingInteractions(batch, interactions)

    def contributed(self, person: int) -> None:
        with self._lock:
            if self._pending.pop(person, None) is not None:
                self.world.contributed(person, self._current - 1)


class WorldHistory:
    """Person ``person`` of the simulated world as a ``participant.history.HistorySource``."""

    def __init__(self, rounds: SharedRounds, person: int) -> None:
        self._rounds = rounds
        self.person = person

    @property
    def model(self) -> FrecencyModel:
        return self._rounds.world.model

    def observe(self, round_number: int, weights: FloatArray) -> None:
        self._rounds.observe(round_number, weights)

    def has_new(self) -> bool:
        return self._rounds.has_new(self.person)

    def pending(self, weights: FloatArray) -> PendingInteractions:
        return self._rounds.pending(self.person)

    def mark_contributed(self) -> None:
        self._rounds.contributed(self.person)


def coordinator_config(
    config: SimulationConfig, secure: SecureConfig, options: BrokerOptions, rprop_world: World
) -> CoordinatorConfig:
    """The aggregator's configuration for the simulation's rounds."""
    return CoordinatorConfig(
        model=config.model,
        cohort_size=config.per_round,
        quorum=secure.threshold(config.per_round),
        check_in_seconds=options.check_in_seconds,
        phase_seconds=options.phase_seconds,
        reannounce_seconds=options.reannounce_seconds,
        secagg_plus=secure.secagg == "plus",
        degree=secure.degree
        if secure.degree is not None or secure.secagg != "plus"
        else degree_for(config.per_round, secure.dropout),
        objective=LearningObjective(loss=config.loss, margin=config.margin),
        optimizer=rprop_world.rprop,
    )


def discard_stale_submissions(transport: Transport) -> int:
    """Ack away whatever an earlier run left in ``fedrank.aggregator``; the count."""
    discarded = 0
    while (delivery := transport.get(AGGREGATOR_QUEUE, 0.2)) is not None:
        transport.ack(delivery)
        discarded += 1
    return discarded


class _Worker(threading.Thread):
    """A daemon thread that keeps the exception its target raised."""

    def __init__(self, name: str, target: Callable[[], object]) -> None:
        super().__init__(name=name, daemon=True)
        self._work = target
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._work()
        except BaseException as error:  # reported by the simulation's thread
            self.error = error


class _AggregatorThread(_Worker):
    """The aggregator service, built in its thread (a RabbitMQ transport belongs to the
    thread that opened it); ``records`` are its round records so far."""

    def __init__(
        self,
        connect: Callable[[], Transport],
        state_dir: StateDirectory,
        config: CoordinatorConfig,
        options: ServiceOptions,
    ) -> None:
        super().__init__("aggregator", self._serve)
        self.halt = threading.Event()
        self.service: AggregatorService | None = None
        self._connect = connect
        self._state_dir = state_dir
        self._config = config
        self._options = options

    @property
    def records(self) -> list[RoundRecord]:
        return [] if self.service is None else self.service.records

    def _serve(self) -> None:
        transport = self._connect()
        try:
            self.service = AggregatorService(
                transport, self._state_dir, self._config, self._options, stop=self.halt
            )
            self.service.run()
        finally:
            transport.close()


def round_result(world: World, rounds: SharedRounds, record: RoundRecord) -> RoundResult:
    """The simulation's row for one round the aggregator recorded."""
    sample = rounds.samples.get(record.round)
    completed = record.outcome == "completed"
    reason = record.abort_reason
    rejected = (
        reason[len(_STEP_REJECTED) :] if reason and reason.startswith(_STEP_REJECTED) else None
    )
    dimension = world.spec.dimension
    return RoundResult(
        round=record.round,
        metrics=world.evaluate(tuple(record.weights_after)),
        weights=tuple(float(w) for w in record.weights_after),
        voters=0 if sample is None else int(sample.sampled.size),
        interactions=0 if sample is None else int(sample.interactions.owner.size),
        direction=tuple(record.direction) if completed and record.direction else (0,) * dimension,
        rejected=rejected,
        outcome="completed" if completed else "aborted",
        survivors=record.survived if completed else 0,
        abort_reason=None if completed else reason,
    )


def run_over_broker(
    config: SimulationConfig,
    secure: SecureConfig,
    connect: Callable[[], Transport],
    options: BrokerOptions | None = None,
    progress: Callable[[RoundResult], None] | None = None,
    on_setup: Callable[[Metrics, Metrics], None] | None = None,
) -> SimulationResult:
    """Run the simulation with every round aggregated by the real stack over transports
    from ``connect`` (one per thread); see the module docstring."""
    if secure.dropout > 0.0:
        raise ValueError("dropouts are simulated in process only (--transport memory)")
    if config.epsilon != DEFAULT_EPSILON:
        raise ValueError("participant sessions use the default finite-difference step")
    options = options or BrokerOptions()
    world = World(config)
    baseline = world.evaluate(world.initial_state().weights)
    oracle = world.oracle()
    if on_setup is not None:
        on_setup(baseline, oracle)
    if config.rounds == 0:
        return SimulationResult(config, world.spec.names, baseline, oracle, ())
    rounds = SharedRounds(world)
    tag = secrets.token_hex(4)
    participant_ids = [f"sim-{tag}-{person}" for person in range(config.participants)]
    with tempfile.TemporaryDirectory(prefix="fedrank-simulate-") as scratch:
        setup = connect()
        try:  # queues bound before the first announcement; nothing stale left
            declare_core(setup)
            for participant_id in participant_ids:
                declare_participant(setup, participant_id)
            discard_stale_submissions(setup)
        finally:
            setup.close()
        state_dir = StateDirectory(Path(scratch) / "aggregator")
        state_dir.ensure()
        signing_key = load_or_create_signing_key(state_dir.signing_key_file)
        aggregator_key = primitives.public_signing_key(signing_key)
        sessions = [
            ParticipantSession(
                SessionConfig(participant_id=participant_id, aggregator_key=aggregator_key),
                WorldHistory(rounds, person),
                ParticipantRecord(primitives.generate_signing_key()),
            )
            for person, participant_id in enumerate(participant_ids)
        ]
        runner = ParticipantRunner(
            sessions, connect, RunnerConfig(poll_interval=options.poll_seconds)
        )
        aggregator = _AggregatorThread(
            connect,
            state_dir,
            coordinator_config(config, secure, options, world),
            ServiceOptions(rounds=0, poll_seconds=options.poll_seconds),
        )
        workers = [_Worker("participants", runner.run), aggregator]
        for worker in workers:
            worker.start()
        try:
            results = _collect(world, rounds, aggregator, workers, config.rounds, options, progress)
        finally:
            aggregator.halt.set()
            runner.stop()
            for worker in workers:
                worker.join(timeout=60)
    return SimulationResult(config, world.spec.names, baseline, oracle, tuple(results))


def _collect(
    world: World,
    rounds: SharedRounds,
    aggregator: _AggregatorThread,
    workers: list[_Worker],
    wanted: int,
    options: BrokerOptions,
    progress: Callable[[RoundResult], None] | None,
) -> list[RoundResult]:
    """Turn the aggregator's records into results as they appear, until ``wanted``."""
    results: list[RoundResult] = []
    waiting = threading.Event()
    give_up = time.monotonic() + options.round_timeout()
    while len(results) < wanted:
        records = aggregator.records
        if len(records) > len(results):
            result = round_result(world, rounds, records[len(results)])
            results.append(result)
            if progress is not None:
                progress(result)
            give_up = time.monotonic() + options.round_timeout()
            continue
        for worker in workers:
            if not worker.is_alive():
                raise RuntimeError(f"the {worker.name} thread stopped: {worker.error!r}")
        if time.monotonic() > give_up:
            raise TimeoutError(f"round {len(results) + 1} did not end in time")
        waiting.wait(options.poll_seconds)
    return results
