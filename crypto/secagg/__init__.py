"""Secure aggregation (Bonawitz et al., CCS 2017) with the SecAgg+ neighbour graph (Bell
et al., CCS 2020), sans-I/O: DESIGN.md sections 5 (steps 2-6) and 6.

Public API::

    parameters = RoundParameters(round=r, threshold=t, vector_length=d, secagg_plus=False)

    client = SecAggClient(parameters, member_id, identity_key, directory, input_vector)
    advert = client.advertise(now)                      # -> AdvertiseKeys
    reply = client.receive(server_message, now)         # -> the one message to send back

    server = SecAggServer(parameters, directory, now=now, phase_timeout=seconds)
    step = server.receive(client_message, now)          # -> ServerStep(messages, outcome)
    step = server.tick(now)                             # closes a phase past its deadline
    step.outcome                                        # AggregateSum | RoundAborted | None

    run_in_process(inputs, threshold, dropouts={member: Phase.X}, secagg_plus=True)

    default_degree(n)          # SecAgg+ k surviving 30 % dropouts (complete below n ~ 190)
    degree_for(n, 0.1)         # k for another dropout rate; logarithmic_degree(n) = 2 log2 n

    to_ring(votes) / from_ring(total)                   # signed ints <-> Z_{2^32}

``directory`` maps member ids (ints in [1, 2^31 - 2]) to Ed25519 public identity keys;
inputs and sums are uint32 vectors (Z_{2^32}). Refusals raise ``RemoteProtocolError``
(``.refusal``); misuse raises ``LocalProtocolError``.
"""

from crypto.secagg.client import ClientPhase, PeerStatus, SecAggClient
from crypto.secagg.errors import (
    AbortReason,
    LocalProtocolError,
    Refusal,
    RemoteProtocolError,
    SecAggError,
)
from crypto.secagg.messages import (
    AdvertiseKeys,
    AggregateSum,
    ClientMessage,
    ConsistencyCheckRequest,
    EncryptedShare,
    EncryptedShares,
    MaskedInput,
    MaskedInputRequest,
    MemberSignature,
    Outcome,
    Phase,
    RevealedShare,
    RosterEntry,
    RoundAborted,
    ServerMessage,
    ServerStep,
    ShareKeysRequest,
    ShareKind,
    SurvivorSignature,
    UnmaskRequest,
    UnmaskResponse,
)
from crypto.secagg.params import (
    NeighbourGraph,
    RoundParameters,
    build_graph,
    default_degree,
    degree_for,
    logarithmic_degree,
)
from crypto.secagg.ring import from_fixed_point, from_ring, to_fixed_point, to_ring
from crypto.secagg.server import SecAggServer
from crypto.secagg.simulate import InProcessCohort, build_cohort, drive, run_in_process

__all__ = [
    "AbortReason",
    "AdvertiseKeys",
    "AggregateSum",
    "ClientMessage",
    "ClientPhase",
    "ConsistencyCheckRequest",
    "EncryptedShare",
    "EncryptedShares",
    "InProcessCohort",
    "LocalProtocolError",
    "MaskedInput",
    "MaskedInputRequest",
    "MemberSignature",
    "NeighbourGraph",
    "Outcome",
    "PeerStatus",
    "Phase",
    "Refusal",
    "RemoteProtocolError",
    "RevealedShare",
    "RosterEntry",
    "RoundAborted",
    "RoundParameters",
    "SecAggClient",
    "SecAggError",
    "SecAggServer",
    "ServerMessage",
    "ServerStep",
    "ShareKeysRequest",
    "ShareKind",
    "SurvivorSignature",
    "UnmaskRequest",
    "UnmaskResponse",
    "build_cohort",
    "build_graph",
    "default_degree",
    "degree_for",
    "drive",
    "from_fixed_point",
    "from_ring",
    "logarithmic_degree",
    "run_in_process",
    "to_fixed_point",
    "to_ring",
]
