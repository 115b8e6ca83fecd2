"""Messages and outcomes of one secure-aggregation round (DESIGN.md section 5, steps 2-6;
Bonawitz et al. 2017, figure 4 rounds 0-4).

Plain frozen data with no behaviour: ints, bytes, tuples and uint32 arrays, so that the
broker layer can wrap each in a strict wire model. Every message carries the round, and
from ShareKeys on the session id, plus its sender or recipient member id.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from crypto.secagg.errors import AbortReason


class Phase(enum.Enum):
    """The phases of a round, in order."""

    ADVERTISE_KEYS = "AdvertiseKeys"
    SHARE_KEYS = "ShareKeys"
    MASKED_INPUT_COLLECTION = "MaskedInputCollection"
    CONSISTENCY_CHECK = "ConsistencyCheck"
    UNMASKING = "Unmasking"
    FINISHED = "Finished"


class ShareKind(enum.Enum):
    """Which of an owner's two secrets a revealed share belongs to."""

    SELF_MASK_SEED = "self-mask-seed"  # b_u: revealed for members that survived
    MASK_KEY = "mask-key"  # s_u^SK: revealed for members that dropped after sharing


# --- client -> server -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AdvertiseKeys:
    """Round 0: a member's two X25519 public keys, signed by its Ed25519 identity."""

    round: int
    sender: int
    cipher_public_key: bytes  # c_u^PK: encrypts shares
    mask_public_key: bytes  # s_u^PK: agrees pairwise masks
    signature: bytes


@dataclass(frozen=True, slots=True)
class EncryptedShare:
    """Shares of ``sender``'s mask key and self-mask seed, encrypted to ``recipient``."""

    sender: int
    recipient: int
    ciphertext: bytes


@dataclass(frozen=True, slots=True)
class EncryptedShares:
    """Round 1: one encrypted share per neighbour of the sender."""

    round: int
    session_id: bytes
    sender: int
    shares: tuple[EncryptedShare, ...]


@dataclass(frozen=True, slots=True, eq=False)
class MaskedInput:
    """Round 2: the sender's input plus its masks, in Z_{2^32}."""

    round: int
    session_id: bytes
    sender: int
    masked: NDArray[np.uint32]


@dataclass(frozen=True, slots=True)
class SurvivorSignature:
    """Round 3: the sender's Ed25519 signature over the survivor list."""

    round: int
    session_id: bytes
    sender: int
    signature: bytes


@dataclass(frozen=True, slots=True)
class RevealedShare:
    """One share a member reveals: of ``owner``'s secret of kind ``kind``."""

    owner: int
    kind: ShareKind
    share: bytes


@dataclass(frozen=True, slots=True)
class UnmaskResponse:
    """Round 4: at most one revealed share per owner."""

    round: int
    session_id: bytes
    sender: int
    shares: tuple[RevealedShare, ...]


# --- server -> client -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RosterEntry:
    """A member's advertised keys and signature, as relayed to everyone."""

    member: int
    cipher_public_key: bytes
    mask_public_key: bytes
    signature: bytes


@dataclass(frozen=True, slots=True)
class ShareKeysRequest:
    """The signed key roster of the cohort; asks the recipient to share its secrets."""

    round: int
    session_id: bytes
    recipient: int
    roster: tuple[RosterEntry, ...]


@dataclass(frozen=True, slots=True)
class MaskedInputRequest:
    """The shares addressed to the recipient; their senders are who it masks with."""

    round: int
    session_id: bytes
    recipient: int
    shares: tuple[EncryptedShare, ...]


@dataclass(frozen=True, slots=True)
class ConsistencyCheckRequest:
    """The members whose masked input arrived, to be signed."""

    round: int
    session_id: bytes
    recipient: int
    survivors: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class MemberSignature:
    """A member's signature over the survivor list, as relayed by the server."""

    member: int
    signature: bytes


@dataclass(frozen=True, slots=True)
class UnmaskRequest:
    """Who survived, who dropped after sharing, and the survivors' signatures."""

    round: int
    session_id: bytes
    recipient: int
    survivors: tuple[int, ...]
    dropped: tuple[int, ...]
    signatures: tuple[MemberSignature, ...]


ClientMessage = AdvertiseKeys | EncryptedShares | MaskedInput | SurvivorSignature | UnmaskResponse
ServerMessage = ShareKeysRequest | MaskedInputRequest | ConsistencyCheckRequest | UnmaskRequest


# --- outcomes ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class AggregateSum:
    """The round's result: the sum over ``survivors`` of their inputs, mod 2^32."""

    round: int
    session_id: bytes
    survivors: tuple[int, ...]
    total: NDArray[np.uint32]


@dataclass(frozen=True, slots=True)
class RoundAborted:
    """The round gave up in ``phase``; ``detail`` says exactly why."""

    round: int
    phase: Phase
    reason: AbortReason
    detail: str


Outcome = AggregateSum | RoundAborted


@dataclass(frozen=True, slots=True)
class ServerStep:
    """What the server wants sent, and the outcome once the round is over."""

    messages: tuple[ServerMessage, ...] = ()
    outcome: Outcome | None = None
