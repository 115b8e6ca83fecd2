"""Drive one whole secure-aggregation round in one process, with no transport
(DESIGN.md section 5, steps 2-6): clients and server exchange messages directly, chosen
members drop out at chosen phases, and deadlines pass on a logical clock.

Used by ``fedrank simulate --secure``, by the benchmark and by the tests.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from crypto.hazmat import primitives
from crypto.secagg.client import SecAggClient
from crypto.secagg.errors import RemoteProtocolError
from crypto.secagg.messages import (
    ConsistencyCheckRequest,
    MaskedInputRequest,
    Outcome,
    Phase,
    ServerMessage,
    ServerStep,
    ShareKeysRequest,
    UnmaskRequest,
)
from crypto.secagg.params import RoundParameters
from crypto.secagg.server import SecAggServer

_PHASE_ORDER = list(Phase)
PHASE_TIMEOUT = 60.0


def _phase_of(message: ServerMessage) -> Phase:
    if isinstance(message, ShareKeysRequest):
        return Phase.SHARE_KEYS
    if isinstance(message, MaskedInputRequest):
        return Phase.MASKED_INPUT_COLLECTION
    if isinstance(message, ConsistencyCheckRequest):
        return Phase.CONSISTENCY_CHECK
    if isinstance(message, UnmaskRequest):
        return Phase.UNMASKING
    raise TypeError(type(message).__name__)


@dataclass
class InProcessCohort:
    """A server and its clients, built for one round."""

    parameters: RoundParameters
    server: SecAggServer
    clients: dict[int, SecAggClient]
    refusals: dict[int, RemoteProtocolError] = field(default_factory=dict)


def build_cohort(
    inputs: Mapping[int, NDArray[np.uint32]],
    parameters: RoundParameters,
    *,
    random: primitives.RandomSource = os.urandom,
    server_type: type[SecAggServer] = SecAggServer,
) -> InProcessCohort:
    """Fresh identities for members ``inputs.keys()`` and a client per member."""
    identities = {m: primitives.generate_signing_key(random) for m in inputs}
    directory = {m: primitives.public_signing_key(key) for m, key in identities.items()}
    clients = {
        m: SecAggClient(parameters, m, identities[m], directory, vector, random=random)
        for m, vector in inputs.items()
    }
    server = server_type(parameters, directory, now=0.0, phase_timeout=PHASE_TIMEOUT, random=random)
    return InProcessCohort(parameters, server, clients)


def drive(
    cohort: InProcessCohort,
    dropouts: Mapping[int, Phase] | None = None,
    *,
    intercept: Callable[[ServerMessage], ServerMessage] | None = None,
) -> Outcome:
    """Run the round; member m sends nothing from phase ``dropouts[m]`` on. A client that
    refuses a message stops, like a dropout, and its error lands in ``cohort.refusals``.
    ``intercept`` may replace any server message on its way (to test a lying server)."""
    stops = dict(dropouts or {})
    server = cohort.server
    now = 0.0
    pending: list[ServerMessage] = []
    outcome: list[Outcome] = []

    def take(step: ServerStep) -> None:
        pending.extend(step.messages)
        if step.outcome is not None:
            outcome.append(step.outcome)

    def active(member: int, phase: Phase) -> bool:
        stop = stops.get(member)
        return stop is None or _PHASE_ORDER.index(phase) < _PHASE_ORDER.index(stop)

    for member, client in cohort.clients.items():
        if active(member, Phase.ADVERTISE_KEYS):
            take(server.receive(client.advertise(now), now))
    while not outcome:
        if not pending:
            now = server.deadline
            take(server.tick(now))
            continue
        batch = pending[:]
        pending.clear()
        for message in batch:
            member = message.recipient
            if not active(member, _phase_of(message)):
                continue
            if intercept is not None:
                message = intercept(message)
            try:
                reply = cohort.clients[member].receive(message, now)
            except RemoteProtocolError as refused:
                cohort.refusals[member] = refused
                stops[member] = _phase_of(message)
                continue
            take(server.receive(reply, now))
    return outcome[0]


def run_in_process(
    inputs: Sequence[NDArray[np.uint32]] | Mapping[int, NDArray[np.uint32]],
    threshold: int,
    *,
    dropouts: Mapping[int, Phase] | None = None,
    secagg_plus: bool = False,
    degree: int | None = None,
    neighbourhood_threshold: int | None = None,
    round_number: int = 0,
    random: primitives.RandomSource = os.urandom,
) -> Outcome:
    """Securely sum ``inputs`` (uint32 vectors of one length; a sequence gets member ids
    1..n) with threshold t, members dropping as ``dropouts`` says. Returns the
    ``AggregateSum`` over the survivors or the ``RoundAborted``."""
    by_member = dict(inputs) if isinstance(inputs, Mapping) else dict(enumerate(inputs, 1))
    if not by_member:
        raise ValueError("no inputs")
    length = len(next(iter(by_member.values())))
    parameters = RoundParameters(
        round=round_number,
        threshold=threshold,
        vector_length=length,
        secagg_plus=secagg_plus,
        degree=degree,
        neighbourhood_threshold=neighbourhood_threshold,
    )
    cohort = build_cohort(by_member, parameters, random=random)
    return drive(cohort, dropouts)
