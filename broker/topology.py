"""The RabbitMQ topology as data (DESIGN.md section 5, "The round over RabbitMQ").

| name                        | kind                     | from -> to                         |
|-----------------------------|--------------------------|------------------------------------|
| ``fedrank.model``           | fanout exchange          | aggregator -> every participant    |
| ``fedrank.submit``          | direct exchange, durable | participants -> ``fedrank.aggregator`` |
| ``fedrank.direct``          | direct exchange, key=id  | aggregator -> one participant      |

Per-participant queues are **durable** (``fedrank.participant.<id>``, bound to
``fedrank.model`` and to ``fedrank.direct`` with routing key ``<id>``) rather than
exclusive/auto-delete: a participant that disconnects or reconnects keeps what was sent
to it meanwhile, and its credentials never need the right to declare or bind anything
(that would let it bind its queue to another participant's routing key). Queues are
created when a participant is enrolled (``broker/provision.py``, or
:func:`declare_participant` with trusted credentials, as the simulation does). A
length cap with drop-head keeps an abandoned participant's queue from growing without
bound. A participant enrolled after an announcement asks for the current model with a
``ModelRequest`` (the late-joiner fix, ``broker/messages.py``).

The same data drive :func:`declare_core` / :func:`declare_participant` (through any
transport), the generated ``deploy/rabbitmq/definitions.json`` and the permission
regexes of ``broker/provision.py``, so they cannot drift apart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import StringConstraints

if TYPE_CHECKING:
    from broker.transport import Transport

MODEL_EXCHANGE = "fedrank.model"
SUBMIT_EXCHANGE = "fedrank.submit"
DIRECT_EXCHANGE = "fedrank.direct"
AGGREGATOR_QUEUE = "fedrank.aggregator"
#: Routing key participants publish to ``fedrank.submit`` with.
SUBMIT_ROUTING_KEY = "aggregator"
PARTICIPANT_QUEUE_PREFIX = "fedrank.participant."
#: Messages kept in one participant's queue; older ones are dropped first.
PARTICIPANT_QUEUE_MAX_LENGTH = 10_000

#: Participant ids are safe inside queue names, user names and permission regexes.
PARTICIPANT_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
ParticipantId = Annotated[str, StringConstraints(pattern=PARTICIPANT_ID_PATTERN)]
_PARTICIPANT_ID = re.compile(PARTICIPANT_ID_PATTERN)

QueueArgument = str | int


@dataclass(frozen=True, slots=True)
class ExchangeSpec:
    name: str
    type: Literal["fanout", "direct"]
    durable: bool = True


@dataclass(frozen=True, slots=True)
class QueueSpec:
    name: str
    durable: bool = True
    arguments: tuple[tuple[str, QueueArgument], ...] = ()

    def argument_map(self) -> dict[str, QueueArgument]:
        return dict(self.arguments)


@dataclass(frozen=True, slots=True)
class BindingSpec:
    exchange: str
    queue: str
    routing_key: str = ""


@dataclass(frozen=True, slots=True)
class Topology:
    """A set of declarations, applied in order: exchanges, queues, bindings."""

    exchanges: tuple[ExchangeSpec, ...] = ()
    queues: tuple[QueueSpec, ...] = ()
    bindings: tuple[BindingSpec, ...] = field(default=())


def check_participant_id(participant_id: str) -> str:
    """Return the id if it matches :data:`PARTICIPANT_ID_PATTERN`, else raise ValueError."""
    if not _PARTICIPANT_ID.fullmatch(participant_id):
        raise ValueError(f"participant id {participant_id!r} must match {PARTICIPANT_ID_PATTERN}")
    return participant_id


def participant_queue(participant_id: str) -> str:
    """The name of a participant's own durable queue."""
    return PARTICIPANT_QUEUE_PREFIX + check_participant_id(participant_id)


def core_topology() -> Topology:
    """The exchanges and the aggregator's queue: declared by the aggregator."""
    return Topology(
        exchanges=(
            ExchangeSpec(MODEL_EXCHANGE, "fanout"),
            ExchangeSpec(SUBMIT_EXCHANGE, "direct"),
            ExchangeSpec(DIRECT_EXCHANGE, "direct"),
        ),
        queues=(QueueSpec(AGGREGATOR_QUEUE),),
        bindings=(BindingSpec(SUBMIT_EXCHANGE, AGGREGATOR_QUEUE, SUBMIT_ROUTING_KEY),),
    )


def participant_topology(participant_id: str) -> Topology:
    """One participant's queue and its two bindings: declared when it is enrolled."""
    queue = participant_queue(participant_id)
    return Topology(
        queues=(
            QueueSpec(
                queue,
                arguments=(
                    ("x-max-length", PARTICIPANT_QUEUE_MAX_LENGTH),
                    ("x-overflow", "drop-head"),
                ),
            ),
        ),
        bindings=(
            BindingSpec(MODEL_EXCHANGE, queue),
            BindingSpec(DIRECT_EXCHANGE, queue, participant_id),
        ),
    )


def declare(transport: Transport, topology: Topology) -> None:
    """Declare every exchange, queue and binding of ``topology`` through ``transport``.

    Declarations are idempotent; a transport that reconnects declares them again.
    """
    for exchange in topology.exchanges:
        transport.declare_exchange(exchange)
    for queue in topology.queues:
        transport.declare_queue(queue)
    for binding in topology.bindings:
        transport.bind(binding)


def declare_core(transport: Transport) -> None:
    declare(transport, core_topology())


def declare_participant(transport: Transport, participant_id: str) -> None:
    declare(transport, participant_topology(participant_id))
