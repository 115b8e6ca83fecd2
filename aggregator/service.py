"""The aggregator process's loop (DESIGN.md section 5 "The round over RabbitMQ", section 7
"State, logs"; the issue's ``fedrank aggregator``).

``AggregatorService`` drives the sans-I/O :class:`aggregator.coordinator.Coordinator`
over any :class:`broker.transport.Transport` (RabbitMQ or the in-memory broker):

- on start: declare the core topology, load (or create) the state and the Ed25519
  signing key, and open the next round. Before every announcement the state is saved
  with the round counter past it, so a restarted aggregator never reuses a round number
  that may have been in flight, and the model version never goes back;
- then: take one submission at a time from ``fedrank.aggregator`` (``receive_one``: size,
  schema and kind checks, ack after handling), feed it to the coordinator with
  ``time.monotonic()``, tick the coordinator on its deadlines, and act on its output:
  persist state, append round records, log rejections, publish messages (an output of
  several messages, a phase's fan-out, as one ``Transport.publish_many`` batch: one
  broker round trip instead of one confirm per member). The unmasking step runs inside
  ``Transport.call_keeping_alive``;
- a fanout that no queue takes (``PublishRejected``: no participant enrolled yet) is
  logged and retried by the coordinator's periodic re-announcement; a lost broker
  (``BrokerUnavailable``) is waited out with backoff, then the topology is declared
  again and the current announcement re-published;
- it stops after ``rounds`` completed rounds (0: never) or when ``stop`` is set
  (SIGTERM/SIGINT): a round in flight is aborted and logged as such, never as completed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from aggregator.config import CoordinatorConfig
from aggregator.coordinator import Coordinator, ModelState
from aggregator.events import (
    MessageRejected,
    Outgoing,
    Output,
    RoundAborted,
    RoundCompleted,
    RoundOpened,
)
from aggregator.optimizer import OptimizerState, initial_state
from aggregator.roundlog import RoundLog, RoundRecord
from aggregator.signing import load_or_create_signing_key
from aggregator.state import AggregatorState, StateDirectory, StateError
from broker.codec import EncodeError, WireMessage
from broker.messages import SUBMISSION_TYPES
from broker.receive import Expectation, Outcome, receive_one
from broker.topology import AGGREGATOR_QUEUE, MODEL_EXCHANGE, declare_core
from broker.transport import BrokerError, BrokerUnavailable, Delivery, PublishRejected, Transport
from crypto.accountant import DEFAULT_ORDERS, RdpCurve
from frecency.registry import get_model
from frecency.spec import ModelSpec

logger = logging.getLogger("fedrank.aggregator")

ANY_SUBMISSION = Expectation(kinds=SUBMISSION_TYPES)


@dataclass(frozen=True, slots=True)
class ServiceOptions:
    """How long the loop runs and how it waits."""

    rounds: int = 0  # completed rounds to run; 0: until stopped
    poll_seconds: float = 0.2  # longest wait for a message between ticks
    max_backoff_seconds: float = 10.0  # longest wait between broker reconnection tries


def load_model(state_dir: StateDirectory, config: CoordinatorConfig, spec: ModelSpec) -> ModelState:
    """The persisted model, or the spec's defaults at version 0 on a first start."""
    saved = state_dir.load()
    if saved is None:
        return ModelState(initial_state(spec, config.optimizer), version=0, next_round=1)
    if saved.model != spec.name:
        raise StateError(f"{state_dir.state_file} holds model {saved.model}, not {spec.name}")
    try:
        optimizer = OptimizerState.from_dict(saved.optimizer)
    except ValueError as error:
        raise StateError(f"{state_dir.state_file}: optimizer state is corrupt: {error}") from error
    if len(optimizer.weights) != spec.dimension:
        raise StateError(f"{state_dir.state_file} does not have {spec.dimension} weights")
    privacy = None
    if saved.privacy_rdp:
        privacy = RdpCurve(tuple(DEFAULT_ORDERS), tuple(saved.privacy_rdp))
    return ModelState(optimizer, saved.version, max(saved.next_round, 1), privacy)


def save_model(
    state_dir: StateDirectory, config: CoordinatorConfig, spec: ModelSpec, model: ModelState
) -> None:
    privacy_spent = 0.0
    if model.privacy is not None:
        privacy_spent = model.privacy.epsilon(config.privacy.delta)
    state_dir.save(
        AggregatorState(
            model=spec.name,
            version=model.version,
            next_round=model.next_round,
            optimizer=model.optimizer.to_dict(),
            privacy_spent=privacy_spent,
            privacy_rdp=list(model.privacy.epsilons) if model.privacy is not None else [],
        )
    )


class AggregatorService:
    """One aggregator over ``transport`` with its state in ``state_dir``."""

    def __init__(
        self,
        transport: Transport,
        state_dir: StateDirectory,
        config: CoordinatorConfig,
        options: ServiceOptions = ServiceOptions(),
        *,
        stop: threading.Event | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.transport = transport
        self.state_dir = state_dir
        self.config = config
        self.options = options
        self.stop = stop or threading.Event()
        self._clock = clock
        self.spec = get_model(config.model).spec
        state_dir.ensure()
        self.signing_key = load_or_create_signing_key(state_dir.signing_key_file)
        model = load_model(state_dir, config, self.spec)
        self.coordinator = Coordinator(
            config, self.spec, self.signing_key, model, wall_offset=time.time() - clock()
        )
        self.round_log = RoundLog(state_dir.round_log_file)
        self.completed = 0
        self.records: list[RoundRecord] = []

    # --- the loop ---------------------------------------------------------------------

    def run(self) -> int:
        """Run until ``rounds`` rounds completed or ``stop`` is set; the number completed."""
        declare_core(self.transport)
        self._act(self.coordinator.open_round(self._clock()))
        backoff = 0.5
        while not self._finished():
            try:
                self._step()
                backoff = 0.5
            except BrokerUnavailable as error:
                logger.warning("broker unavailable (%s); retrying in %.1f s", error, backoff)
                if self.stop.wait(backoff):
                    break
                backoff = min(backoff * 2, self.options.max_backoff_seconds)
                self._recover()
        self._shut_down()
        return self.completed

    def _finished(self) -> bool:
        rounds = self.options.rounds
        return self.stop.is_set() or (rounds > 0 and self.completed >= rounds)

    def _step(self) -> None:
        now = self._clock()
        deadline = self.coordinator.next_deadline()
        wait = self.options.poll_seconds
        if deadline is not None:
            wait = min(wait, max(deadline - now, 0.0))
        outputs: list[tuple[Output, float]] = []

        def handle(message: WireMessage, delivery: Delivery) -> None:
            started = self._clock()
            output = self._expensive(
                self.coordinator.expensive(started, receiving=True),
                lambda: self.coordinator.receive(message, delivery.user_id, started, delivery.body),
            )
            outputs.append((output, started))

        outcome = receive_one(self.transport, AGGREGATOR_QUEUE, handle, ANY_SUBMISSION, wait)
        if outcome is Outcome.REJECTED:
            self.coordinator.note_undecodable("undecodable or unexpected kind")
        started = self._clock()
        expensive = self.coordinator.expensive(started, receiving=False)
        outputs.append(
            (self._expensive(expensive, lambda: self.coordinator.tick(started)), started)
        )
        for output, began in outputs:
            self._act(output, began)

    def _expensive(self, expensive: bool, work: Callable[[], Output]) -> Output:
        return self.transport.call_keeping_alive(work) if expensive else work()

    def _recover(self) -> None:
        """After a broker outage: declare again and re-publish the current announcement."""
        try:
            declare_core(self.transport)
            announcement = self.coordinator.announcement
            if announcement is not None:
                self._publish(MODEL_EXCHANGE, "", announcement)
            logger.info("broker reachable again; round %s goes on", self.coordinator.round_number)
        except BrokerUnavailable as error:
            logger.warning("broker still unavailable: %s", error)

    def _shut_down(self) -> None:
        if self.stop.is_set():
            output = self.coordinator.abort("aggregator stopped", self._clock())
            try:
                self._act(output, publish=False)
            except StateError:
                logger.exception("could not record the aborted round")
        logger.info(
            "aggregator stopping after %d completed round(s); model version %d",
            self.completed,
            self.coordinator.model.version,
        )

    # --- acting on the coordinator's output -------------------------------------------

    def _act(self, output: Output, began: float | None = None, *, publish: bool = True) -> None:
        for event in output.events:
            if isinstance(event, RoundOpened):
                save_model(self.state_dir, self.config, self.spec, event.model)
                logger.info("round %d opened (model version %d)", event.round, event.version)
            elif isinstance(event, RoundCompleted):
                save_model(self.state_dir, self.config, self.spec, event.model)
                self._log_round(event.record, began)
                self.completed += 1
            elif isinstance(event, RoundAborted):
                self._log_round(event.record, began)
            elif isinstance(event, MessageRejected):
                logger.warning(
                    "rejected %s from participant %s (user %s): %s",
                    event.kind,
                    event.participant_id,
                    event.user_id,
                    event.reason,
                )
        if not publish or self._finished():
            return  # stopping: announce nothing that would never complete
        if len(output.messages) > 1:
            self._publish_batch(output.messages)
        else:
            self._publish_each(output.messages)

    def _publish_batch(self, messages: tuple[Outgoing, ...]) -> None:
        """Publish a fan-out in one batch; the members it could not reach are logged. A
        batch refused whole (a message too large) goes out one by one, so only the
        faulty message is lost."""
        try:
            self.transport.publish_many([(o.exchange, o.routing_key, o.message) for o in messages])
        except PublishRejected as error:
            if not error.returned:
                logger.warning("batch of %d refused (%s); one by one", len(messages), error)
                self._publish_each(messages)
                return
            kinds = {(o.exchange, o.routing_key): o.message.kind for o in messages}
            for exchange, routing_key in error.returned:
                kind = kinds.get((exchange, routing_key), "message")
                if exchange == MODEL_EXCHANGE:
                    logger.info("%s not taken yet (no participant queue bound)", kind)
                else:
                    logger.warning("%s to participant %s not delivered", kind, routing_key)
        except EncodeError:
            self._publish_each(messages)  # logs the message too large, sends the others
        except BrokerUnavailable:
            raise
        except BrokerError as error:
            logger.warning("publishing a batch of %d failed: %s", len(messages), error)

    def _publish_each(self, messages: tuple[Outgoing, ...]) -> None:
        for out in messages:
            self._publish(out.exchange, out.routing_key, out.message)

    def _publish(self, exchange: str, routing_key: str, message: WireMessage) -> None:
        try:
            self.transport.publish(exchange, routing_key, message)
        except PublishRejected as error:
            if exchange == MODEL_EXCHANGE:
                logger.info("announcement of round %d not taken yet: %s", message.round, error)
            else:
                logger.warning(
                    "%s to participant %s not delivered: %s", message.kind, routing_key, error
                )
        except EncodeError as error:
            logger.error("%s to %r too large to send: %s", message.kind, routing_key, error)
        except BrokerUnavailable:
            raise
        except BrokerError as error:
            logger.warning("publishing %s to %r failed: %s", message.kind, routing_key, error)

    def _log_round(self, record: RoundRecord, began: float | None) -> None:
        if began is not None and record.outcome == "completed":
            seconds = dict(record.phase_seconds)
            seconds["step"] = round(self._clock() - began, 6)
            record = record.model_copy(update={"phase_seconds": seconds})
        self.round_log.append(record)
        self.records.append(record)
        if record.outcome == "completed":
            logger.info(
                "round %d completed: version %d -> %d, %d/%d/%d in/selected/survived, "
                "%d weights moved",
                record.round,
                record.version_before,
                record.version_after,
                record.checked_in,
                record.selected,
                record.survived,
                sum(
                    1
                    for a, b in zip(record.weights_before, record.weights_after, strict=True)
                    if a != b
                ),
            )
        else:
            logger.warning(
                "round %d aborted in %s: %s", record.round, record.abort_phase, record.abort_reason
            )
