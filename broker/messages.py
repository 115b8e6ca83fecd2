"""Protocol messages (DESIGN.md section 5, phases 1 and 7; the late-joiner fix).

Every message is a strict, frozen :class:`broker.codec.WireMessage` registered by its
``kind``. This module holds the messages that do not depend on secure aggregation:

- :class:`ModelAnnouncement` (phase 1 "Announce" and phase 7 "publish"): the signed
  model, version, round and round parameters, on ``fedrank.model`` (fanout), or on
  ``fedrank.direct`` as the answer to a request.
- :class:`ModelRequest`: a participant that joined (or reconnected) after the fanout asks
  the aggregator, on ``fedrank.submit``, to send it the current announcement.

Secure-aggregation messages (AdvertiseKeys, ShareKeys, MaskedInput, ConsistencyCheck,
Unmask, and the aggregator's roster / forwarded shares / unmask request) are added
below the marked section, one class each, built on the same base and the helpers
here (``ParticipantId``, ``Vector``); with them ``CheckIn`` and ``CohortInvitation``
(phases 2-3), the announced SecAgg+ / DP settings, and the aggregator's Ed25519
signatures over announcements and invitations (``sign_message`` / ``verify_message``).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, ClassVar, Literal, TypeVar

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import BaseModel, ConfigDict, Field, model_validator

import crypto.secagg as secagg
from broker.codec import Vector, WireMessage, encode
from broker.topology import ParticipantId
from crypto.hazmat import primitives

MAX_WEIGHTS = 1024
MAX_SIGNATURE_BYTES = 128


class PhaseDeadlines(BaseModel):
    """Seconds, counted from when the announcement is received, by which each phase ends."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid", allow_inf_nan=False)

    check_in: float = Field(gt=0)
    share_keys: float = Field(gt=0)
    masked_input: float = Field(gt=0)
    consistency_check: float = Field(gt=0)
    unmask: float = Field(gt=0)

    @model_validator(mode="after")
    def _phases_in_order(self) -> PhaseDeadlines:
        order = (
            self.check_in,
            self.share_keys,
            self.masked_input,
            self.consistency_check,
            self.unmask,
        )
        if any(later <= earlier for earlier, later in itertools.pairwise(order)):
            raise ValueError("phase deadlines must strictly increase in protocol order")
        return self


class RoundParameters(BaseModel):
    """Cohort size n, quorum t (t of n secret sharing) and the phase deadlines, plus the
    secure-aggregation options (SecAgg+ and degree) and the round's differential privacy
    (both defined below, with the secure-aggregation messages)."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid", allow_inf_nan=False)

    cohort_size: int = Field(ge=1, le=100_000)
    quorum: int = Field(ge=1)
    deadlines: PhaseDeadlines
    secure_aggregation: SecureAggregationSettings = Field(
        default_factory=lambda: SecureAggregationSettings()
    )
    privacy: PrivacySettings = Field(default_factory=lambda: PrivacySettings())

    @model_validator(mode="after")
    def _quorum_fits(self) -> RoundParameters:
        if self.quorum > self.cohort_size:
            raise ValueError(f"quorum {self.quorum} exceeds cohort size {self.cohort_size}")
        return self


class ModelAnnouncement(WireMessage):
    """The current model and the round it opens, signed by the aggregator (Ed25519).

    ``signature`` covers :meth:`signing_payload`: the encoding of this message with an
    empty signature. Signing and verifying are crypto/'s business.
    """

    kind: Literal["model-announcement"] = "model-announcement"
    max_bytes: ClassVar[int] = 64 * 1024

    model_version: int = Field(ge=0)
    spec: str = Field(min_length=1, max_length=64)
    weights: tuple[float, ...] = Field(min_length=1, max_length=MAX_WEIGHTS)
    params: RoundParameters
    signature: bytes = Field(default=b"", max_length=MAX_SIGNATURE_BYTES)

    def signing_payload(self) -> bytes:
        """The bytes the aggregator signs: this announcement encoded without signature."""
        return encode(self.model_copy(update={"signature": b""}))


class ModelRequest(WireMessage):
    """A participant asks for the current model (it connected after the last fanout).

    ``round`` is the last round it knows (0 if none), ``have_version`` the model version
    it holds (-1 if none). The aggregator answers with the current
    :class:`ModelAnnouncement` on ``fedrank.direct``, routing key ``participant_id``, and
    should check the id against the authenticated user (``Delivery.user_id``).
    """

    kind: Literal["model-request"] = "model-request"
    max_bytes: ClassVar[int] = 1024

    participant_id: ParticipantId
    have_version: int = Field(default=-1, ge=-1)


# --- Secure-aggregation messages (DESIGN.md section 5, phases 2-6) go below. ---------------
#
# Round flow (the lead's protocol decisions; DESIGN.md section 5):
#   ModelAnnouncement (fanout) -> CheckIn -> CohortInvitation (direct) -> AdvertiseKeys
#   -> ShareKeysRequest -> EncryptedShares -> MaskedInputRequest -> MaskedInput
#   -> ConsistencyCheckRequest -> SurvivorSignature -> UnmaskRequest -> UnmaskResponse.
# Participants publish to ``fedrank.submit``; the aggregator answers one participant on
# ``fedrank.direct`` (routing key = participant id). Every secagg wire model wraps the
# crypto.secagg dataclass of the same name 1:1 (``to_crypto`` / ``from_crypto``), adds
# the participant id, and carries the round and session in the envelope.

#: Largest cohort a single secure-aggregation instance may have on the wire.
MAX_MEMBERS = 5000
#: Member ids are Shamir evaluation points (crypto.secagg.params.check_member_id).
MAX_MEMBER_ID = (1 << 31) - 2
MAX_CIPHERTEXT_BYTES = 1024
MAX_SHARE_BYTES = 64
MAX_VECTOR_LENGTH = 4096
KEY_BYTES = 32
ED25519_SIGNATURE_BYTES = 64

MemberId = Annotated[int, Field(ge=1, le=MAX_MEMBER_ID)]
PublicKey = Annotated[bytes, Field(min_length=KEY_BYTES, max_length=KEY_BYTES)]
Signature = Annotated[bytes, Field(min_length=1, max_length=MAX_SIGNATURE_BYTES)]
Ciphertext = Annotated[bytes, Field(min_length=1, max_length=MAX_CIPHERTEXT_BYTES)]


def _member_list(members: tuple[int, ...], what: str) -> tuple[int, ...]:
    if len(set(members)) != len(members):
        raise ValueError(f"{what} lists a member twice")
    return members


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, frozen=True, extra="forbid", allow_inf_nan=False)


class PrivacySettings(_Strict):
    """The round's differential privacy (DESIGN.md section 6, docs/privacy.md).

    ``none``; ``rr``: each participant applies randomized response to every vote
    coordinate with ``rr_epsilon`` (crypto.dp.randomized_response); ``skellam``: each
    member adds Skellam noise of variance ``skellam_variance`` to every vote coordinate
    before masking (crypto.dp.skellam_noise), so the sum carries central DP.
    ``delta`` is the accountant's delta.
    """

    mode: Literal["none", "rr", "skellam"] = "none"
    rr_epsilon: float | None = Field(default=None, gt=0, le=50)
    skellam_variance: float | None = Field(default=None, gt=0, le=1e9)
    delta: float = Field(default=1e-6, gt=0, lt=1)

    @model_validator(mode="after")
    def _parameters_of_mode(self) -> PrivacySettings:
        if (self.mode == "rr") != (self.rr_epsilon is not None):
            raise ValueError("rr_epsilon is given exactly when mode is 'rr'")
        if (self.mode == "skellam") != (self.skellam_variance is not None):
            raise ValueError("skellam_variance is given exactly when mode is 'skellam'")
        return self


class SecureAggregationSettings(_Strict):
    """Announced SecAgg options: SecAgg+ (Bell et al. 2020) and its neighbour degree
    (None: about 2 log2 n, crypto.secagg.default_degree)."""

    secagg_plus: bool = False
    degree: int | None = Field(default=None, ge=2, le=MAX_MEMBERS)


class SecAggParameters(_Strict):
    """crypto.secagg.RoundParameters on the wire (the round is the envelope's)."""

    threshold: int = Field(ge=1, le=MAX_MEMBERS)
    vector_length: int = Field(ge=1, le=MAX_VECTOR_LENGTH)
    secagg_plus: bool = False
    degree: int | None = Field(default=None, ge=2, le=MAX_MEMBERS)
    neighbourhood_threshold: int | None = Field(default=None, ge=1, le=MAX_MEMBERS)

    def to_crypto(self, round_number: int) -> secagg.RoundParameters:
        return secagg.RoundParameters(
            round=round_number,
            threshold=self.threshold,
            vector_length=self.vector_length,
            secagg_plus=self.secagg_plus,
            degree=self.degree,
            neighbourhood_threshold=self.neighbourhood_threshold,
        )

    @classmethod
    def from_crypto(cls, parameters: secagg.RoundParameters) -> SecAggParameters:
        return cls(
            threshold=parameters.threshold,
            vector_length=parameters.vector_length,
            secagg_plus=parameters.secagg_plus,
            degree=parameters.degree,
            neighbourhood_threshold=parameters.neighbourhood_threshold,
        )


# --- Phase 2: check-in and cohort ------------------------------------------------------


class CheckIn(WireMessage):
    """A participant with new interactions (and privacy budget) asks to join the round
    ``round`` announced for ``model_version``; ``identity_key`` is its Ed25519 public key,
    which the invitation's directory binds to its member id."""

    kind: Literal["check-in"] = "check-in"
    max_bytes: ClassVar[int] = 1024

    participant_id: ParticipantId
    identity_key: PublicKey
    model_version: int = Field(ge=0)


class DirectoryEntry(_Strict):
    member: MemberId
    participant_id: ParticipantId
    identity_key: PublicKey


class CohortInvitation(WireMessage):
    """The aggregator's choice of cohort (phase 3), sent to each member on
    ``fedrank.direct``: its member id, the secagg parameters and the whole directory,
    signed with the aggregator's Ed25519 key over :meth:`signing_payload`.
    ``expires_in``: seconds after receipt by which the member may give the round up."""

    kind: Literal["cohort-invitation"] = "cohort-invitation"
    max_bytes: ClassVar[int] = 64 + MAX_MEMBERS * 140

    participant_id: ParticipantId
    member: MemberId
    model_version: int = Field(ge=0)
    parameters: SecAggParameters
    directory: tuple[DirectoryEntry, ...] = Field(min_length=1, max_length=MAX_MEMBERS)
    expires_in: float = Field(gt=0, le=86_400)
    signature: bytes = Field(default=b"", max_length=MAX_SIGNATURE_BYTES)

    @model_validator(mode="after")
    def _directory_consistent(self) -> CohortInvitation:
        _member_list(tuple(e.member for e in self.directory), "directory")
        if len({e.participant_id for e in self.directory}) != len(self.directory):
            raise ValueError("directory lists a participant twice")
        mine = [e for e in self.directory if e.member == self.member]
        if len(mine) != 1 or mine[0].participant_id != self.participant_id:
            raise ValueError("the recipient is not in the directory under its member id")
        if self.parameters.threshold > len(self.directory):
            raise ValueError("threshold exceeds the directory")
        return self

    def signing_payload(self) -> bytes:
        return encode(self.model_copy(update={"signature": b""}))

    def crypto_parameters(self) -> secagg.RoundParameters:
        return self.parameters.to_crypto(self.round)

    def crypto_directory(self) -> dict[int, bytes]:
        """member id -> Ed25519 identity key, as SecAggClient / SecAggServer take it."""
        return {e.member: e.identity_key for e in self.directory}


# --- Phases 2-6: secure aggregation, client -> aggregator ------------------------------


class AdvertiseKeys(WireMessage):
    kind: Literal["secagg-advertise-keys"] = "secagg-advertise-keys"
    max_bytes: ClassVar[int] = 1024

    participant_id: ParticipantId
    member: MemberId
    cipher_public_key: PublicKey
    mask_public_key: PublicKey
    signature: Signature

    def to_crypto(self) -> secagg.AdvertiseKeys:
        return secagg.AdvertiseKeys(
            self.round, self.member, self.cipher_public_key, self.mask_public_key, self.signature
        )

    @classmethod
    def from_crypto(cls, message: secagg.AdvertiseKeys, participant_id: str) -> AdvertiseKeys:
        return cls(
            round=message.round,
            participant_id=participant_id,
            member=message.sender,
            cipher_public_key=message.cipher_public_key,
            mask_public_key=message.mask_public_key,
            signature=message.signature,
        )


class EncryptedShare(_Strict):
    sender: MemberId
    recipient: MemberId
    ciphertext: Ciphertext

    def to_crypto(self) -> secagg.EncryptedShare:
        return secagg.EncryptedShare(self.sender, self.recipient, self.ciphertext)

    @classmethod
    def from_crypto(cls, share: secagg.EncryptedShare) -> EncryptedShare:
        return cls(sender=share.sender, recipient=share.recipient, ciphertext=share.ciphertext)


_SHARE_LIST_BYTES = MAX_MEMBERS * (MAX_CIPHERTEXT_BYTES // 4 + 48)


class EncryptedShares(WireMessage):
    kind: Literal["secagg-encrypted-shares"] = "secagg-encrypted-shares"
    max_bytes: ClassVar[int] = 256 + _SHARE_LIST_BYTES

    participant_id: ParticipantId
    member: MemberId
    shares: tuple[EncryptedShare, ...] = Field(max_length=MAX_MEMBERS)

    def to_crypto(self) -> secagg.EncryptedShares:
        return secagg.EncryptedShares(
            self.round, self.session, self.member, tuple(s.to_crypto() for s in self.shares)
        )

    @classmethod
    def from_crypto(cls, message: secagg.EncryptedShares, participant_id: str) -> EncryptedShares:
        return cls(
            round=message.round,
            session=message.session_id,
            participant_id=participant_id,
            member=message.sender,
            shares=tuple(EncryptedShare.from_crypto(s) for s in message.shares),
        )


class MaskedInput(WireMessage):
    """The member's input plus masks in Z_{2^32}: a little-endian uint32 vector."""

    kind: Literal["secagg-masked-input"] = "secagg-masked-input"
    max_bytes: ClassVar[int] = 256 + 4 * MAX_VECTOR_LENGTH

    participant_id: ParticipantId
    member: MemberId
    masked: Vector

    @model_validator(mode="after")
    def _ring_vector(self) -> MaskedInput:
        if self.masked.dtype != "<u4" or len(self.masked.shape) != 1:
            raise ValueError("masked input must be a one-dimensional <u4 vector")
        if not 1 <= self.masked.shape[0] <= MAX_VECTOR_LENGTH:
            raise ValueError(f"masked input length must be in [1, {MAX_VECTOR_LENGTH}]")
        return self

    def to_crypto(self) -> secagg.MaskedInput:
        masked = np.array(self.masked.array(), dtype=np.uint32)
        return secagg.MaskedInput(self.round, self.session, self.member, masked)

    @classmethod
    def from_crypto(cls, message: secagg.MaskedInput, participant_id: str) -> MaskedInput:
        return cls(
            round=message.round,
            session=message.session_id,
            participant_id=participant_id,
            member=message.sender,
            masked=Vector.of(np.asarray(message.masked, dtype=np.uint32)),
        )


class SurvivorSignature(WireMessage):
    kind: Literal["secagg-survivor-signature"] = "secagg-survivor-signature"
    max_bytes: ClassVar[int] = 512

    participant_id: ParticipantId
    member: MemberId
    signature: Signature

    def to_crypto(self) -> secagg.SurvivorSignature:
        return secagg.SurvivorSignature(self.round, self.session, self.member, self.signature)

    @classmethod
    def from_crypto(
        cls, message: secagg.SurvivorSignature, participant_id: str
    ) -> SurvivorSignature:
        return cls(
            round=message.round,
            session=message.session_id,
            participant_id=participant_id,
            member=message.sender,
            signature=message.signature,
        )


class RevealedShare(_Strict):
    owner: MemberId
    share_kind: Literal["self-mask-seed", "mask-key"]
    share: bytes = Field(min_length=1, max_length=MAX_SHARE_BYTES)

    def to_crypto(self) -> secagg.RevealedShare:
        return secagg.RevealedShare(self.owner, secagg.ShareKind(self.share_kind), self.share)

    @classmethod
    def from_crypto(cls, revealed: secagg.RevealedShare) -> RevealedShare:
        kind: Literal["self-mask-seed", "mask-key"] = (
            "self-mask-seed" if revealed.kind is secagg.ShareKind.SELF_MASK_SEED else "mask-key"
        )
        return cls(owner=revealed.owner, share_kind=kind, share=revealed.share)


class UnmaskResponse(WireMessage):
    kind: Literal["secagg-unmask-response"] = "secagg-unmask-response"
    max_bytes: ClassVar[int] = 256 + MAX_MEMBERS * (MAX_SHARE_BYTES + 48)

    participant_id: ParticipantId
    member: MemberId
    shares: tuple[RevealedShare, ...] = Field(max_length=MAX_MEMBERS)

    def to_crypto(self) -> secagg.UnmaskResponse:
        return secagg.UnmaskResponse(
            self.round, self.session, self.member, tuple(s.to_crypto() for s in self.shares)
        )

    @classmethod
    def from_crypto(cls, message: secagg.UnmaskResponse, participant_id: str) -> UnmaskResponse:
        return cls(
            round=message.round,
            session=message.session_id,
            participant_id=participant_id,
            member=message.sender,
            shares=tuple(RevealedShare.from_crypto(s) for s in message.shares),
        )


# --- Phases 3-6: secure aggregation, aggregator -> one member (fedrank.direct) ---------


class RosterEntry(_Strict):
    member: MemberId
    cipher_public_key: PublicKey
    mask_public_key: PublicKey
    signature: Signature

    def to_crypto(self) -> secagg.RosterEntry:
        return secagg.RosterEntry(
            self.member, self.cipher_public_key, self.mask_public_key, self.signature
        )

    @classmethod
    def from_crypto(cls, entry: secagg.RosterEntry) -> RosterEntry:
        return cls(
            member=entry.member,
            cipher_public_key=entry.cipher_public_key,
            mask_public_key=entry.mask_public_key,
            signature=entry.signature,
        )


class ShareKeysRequest(WireMessage):
    kind: Literal["secagg-share-keys-request"] = "secagg-share-keys-request"
    max_bytes: ClassVar[int] = 256 + MAX_MEMBERS * 200

    participant_id: ParticipantId
    member: MemberId
    roster: tuple[RosterEntry, ...] = Field(min_length=1, max_length=MAX_MEMBERS)

    def to_crypto(self) -> secagg.ShareKeysRequest:
        return secagg.ShareKeysRequest(
            self.round, self.session, self.member, tuple(e.to_crypto() for e in self.roster)
        )

    @classmethod
    def from_crypto(cls, message: secagg.ShareKeysRequest, participant_id: str) -> ShareKeysRequest:
        return cls(
            round=message.round,
            session=message.session_id,
            participant_id=participant_id,
            member=message.recipient,
            roster=tuple(RosterEntry.from_crypto(e) for e in message.roster),
        )


class MaskedInputRequest(WireMessage):
    kind: Literal["secagg-masked-input-request"] = "secagg-masked-input-request"
    max_bytes: ClassVar[int] = 256 + _SHARE_LIST_BYTES

    participant_id: ParticipantId
    member: MemberId
    shares: tuple[EncryptedShare, ...] = Field(max_length=MAX_MEMBERS)

    def to_crypto(self) -> secagg.MaskedInputRequest:
        return secagg.MaskedInputRequest(
            self.round, self.session, self.member, tuple(s.to_crypto() for s in self.shares)
        )

    @classmethod
    def from_crypto(
        cls, message: secagg.MaskedInputRequest, participant_id: str
    ) -> MaskedInputRequest:
        return cls(
            round=message.round,
            session=message.session_id,
            participant_id=participant_id,
            member=message.recipient,
            shares=tuple(EncryptedShare.from_crypto(s) for s in message.shares),
        )


class ConsistencyCheckRequest(WireMessage):
    kind: Literal["secagg-consistency-check-request"] = "secagg-consistency-check-request"
    max_bytes: ClassVar[int] = 256 + MAX_MEMBERS * 6

    participant_id: ParticipantId
    member: MemberId
    survivors: tuple[MemberId, ...] = Field(max_length=MAX_MEMBERS)

    @model_validator(mode="after")
    def _distinct(self) -> ConsistencyCheckRequest:
        _member_list(self.survivors, "survivors")
        return self

    def to_crypto(self) -> secagg.ConsistencyCheckRequest:
        return secagg.ConsistencyCheckRequest(self.round, self.session, self.member, self.survivors)

    @classmethod
    def from_crypto(
        cls, message: secagg.ConsistencyCheckRequest, participant_id: str
    ) -> ConsistencyCheckRequest:
        return cls(
            round=message.round,
            session=message.session_id,
            participant_id=participant_id,
            member=message.recipient,
            survivors=message.survivors,
        )


class MemberSignature(_Strict):
    member: MemberId
    signature: Signature


class UnmaskRequest(WireMessage):
    kind: Literal["secagg-unmask-request"] = "secagg-unmask-request"
    max_bytes: ClassVar[int] = 256 + MAX_MEMBERS * (12 + ED25519_SIGNATURE_BYTES + 16)

    participant_id: ParticipantId
    member: MemberId
    survivors: tuple[MemberId, ...] = Field(max_length=MAX_MEMBERS)
    dropped: tuple[MemberId, ...] = Field(max_length=MAX_MEMBERS)
    signatures: tuple[MemberSignature, ...] = Field(max_length=MAX_MEMBERS)

    @model_validator(mode="after")
    def _distinct(self) -> UnmaskRequest:
        _member_list(self.survivors, "survivors")
        _member_list(self.dropped, "dropped")
        _member_list(tuple(s.member for s in self.signatures), "signatures")
        return self

    def to_crypto(self) -> secagg.UnmaskRequest:
        return secagg.UnmaskRequest(
            self.round,
            self.session,
            self.member,
            self.survivors,
            self.dropped,
            tuple(secagg.MemberSignature(s.member, s.signature) for s in self.signatures),
        )

    @classmethod
    def from_crypto(cls, message: secagg.UnmaskRequest, participant_id: str) -> UnmaskRequest:
        return cls(
            round=message.round,
            session=message.session_id,
            participant_id=participant_id,
            member=message.recipient,
            survivors=message.survivors,
            dropped=message.dropped,
            signatures=tuple(
                MemberSignature(member=s.member, signature=s.signature) for s in message.signatures
            ),
        )


#: What participants publish to ``fedrank.submit`` (the aggregator decodes these).
SUBMISSION_TYPES: tuple[type[WireMessage], ...] = (
    ModelRequest,
    CheckIn,
    AdvertiseKeys,
    EncryptedShares,
    MaskedInput,
    SurvivorSignature,
    UnmaskResponse,
)
#: What a participant's queue carries (fanout announcements and direct messages).
PARTICIPANT_INBOX_TYPES: tuple[type[WireMessage], ...] = (
    ModelAnnouncement,
    CohortInvitation,
    ShareKeysRequest,
    MaskedInputRequest,
    ConsistencyCheckRequest,
    UnmaskRequest,
)

SecAggSubmission = (
    AdvertiseKeys | EncryptedShares | MaskedInput | SurvivorSignature | UnmaskResponse
)
SecAggRequest = ShareKeysRequest | MaskedInputRequest | ConsistencyCheckRequest | UnmaskRequest


def submission_to_crypto(message: SecAggSubmission) -> secagg.ClientMessage:
    """The crypto.secagg client message a wire submission carries."""
    return message.to_crypto()


def request_from_crypto(message: secagg.ServerMessage, participant_id: str) -> SecAggRequest:
    """Wrap a crypto.secagg server message addressed to ``participant_id``."""
    if isinstance(message, secagg.ShareKeysRequest):
        return ShareKeysRequest.from_crypto(message, participant_id)
    if isinstance(message, secagg.MaskedInputRequest):
        return MaskedInputRequest.from_crypto(message, participant_id)
    if isinstance(message, secagg.ConsistencyCheckRequest):
        return ConsistencyCheckRequest.from_crypto(message, participant_id)
    return UnmaskRequest.from_crypto(message, participant_id)


def requests_from_crypto(
    messages: Sequence[secagg.ServerMessage], participant_of: Mapping[int, str]
) -> list[SecAggRequest]:
    """Wrap a batch of server messages (one phase's, to every member), converting the
    roster and signature lists they share only once: O(n) instead of O(n^2) models."""
    shared: dict[int, tuple[object, tuple[Any, ...]]] = {}

    def once(source: tuple[Any, ...], convert: Callable[[Any], Any]) -> tuple[Any, ...]:
        hit = shared.get(id(source))
        if hit is None or hit[0] is not source:
            hit = (source, tuple(convert(item) for item in source))
            shared[id(source)] = hit
        return hit[1]

    wrapped: list[SecAggRequest] = []
    for message in messages:
        pid = participant_of[message.recipient]
        if isinstance(message, secagg.ShareKeysRequest):
            roster = once(message.roster, RosterEntry.from_crypto)
            wrapped.append(
                ShareKeysRequest(
                    round=message.round,
                    session=message.session_id,
                    participant_id=pid,
                    member=message.recipient,
                    roster=roster,
                )
            )
        elif isinstance(message, secagg.UnmaskRequest):
            signatures = once(
                message.signatures,
                lambda s: MemberSignature(member=s.member, signature=s.signature),
            )
            wrapped.append(
                UnmaskRequest(
                    round=message.round,
                    session=message.session_id,
                    participant_id=pid,
                    member=message.recipient,
                    survivors=message.survivors,
                    dropped=message.dropped,
                    signatures=signatures,
                )
            )
        else:
            wrapped.append(request_from_crypto(message, pid))
    return wrapped


def submission_from_crypto(message: secagg.ClientMessage, participant_id: str) -> SecAggSubmission:
    """Wrap a crypto.secagg client message sent by ``participant_id``."""
    if isinstance(message, secagg.AdvertiseKeys):
        return AdvertiseKeys.from_crypto(message, participant_id)
    if isinstance(message, secagg.EncryptedShares):
        return EncryptedShares.from_crypto(message, participant_id)
    if isinstance(message, secagg.MaskedInput):
        return MaskedInput.from_crypto(message, participant_id)
    if isinstance(message, secagg.SurvivorSignature):
        return SurvivorSignature.from_crypto(message, participant_id)
    return UnmaskResponse.from_crypto(message, participant_id)


# --- Signatures of the aggregator (Ed25519, crypto.hazmat.primitives) ------------------

Signed = TypeVar("Signed", ModelAnnouncement, CohortInvitation)


@functools.lru_cache(maxsize=8)
def _signing_key(private_key: bytes) -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(private_key)


def sign_message(private_key: bytes, message: Signed) -> Signed:
    """``message`` with its ``signature`` set: Ed25519 over its ``signing_payload()``."""
    signature = _signing_key(private_key).sign(message.signing_payload())
    return message.model_copy(update={"signature": signature})


def verify_message(public_key: bytes, message: ModelAnnouncement | CohortInvitation) -> bool:
    """Whether ``message`` carries ``public_key``'s valid signature (False if unsigned)."""
    if not message.signature:
        return False
    return primitives.verify(public_key, message.signature, message.signing_payload())


def sign_announcement(private_key: bytes, message: ModelAnnouncement) -> ModelAnnouncement:
    return sign_message(private_key, message)


def verify_announcement(public_key: bytes, message: ModelAnnouncement) -> bool:
    return verify_message(public_key, message)


# RoundParameters names the settings classes defined above it in the file's order.
RoundParameters.model_rebuild()
ModelAnnouncement.model_rebuild()


def load_aggregator_public_key(data: bytes) -> bytes:
    """The raw 32-byte Ed25519 key participants pin, from what ``fedrank aggregator
    --export-key`` prints: a PEM ``PUBLIC KEY`` block (or 64 hex digits).
    ``ValueError`` with a one-line reason for anything else."""
    text = data.strip()
    if len(text) == 2 * KEY_BYTES:
        try:
            return bytes.fromhex(text.decode("ascii"))
        except (UnicodeDecodeError, ValueError) as error:
            raise ValueError("aggregator key is neither PEM nor 64 hex digits") from error
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    try:
        key = load_pem_public_key(text)
    except (ValueError, TypeError) as error:
        raise ValueError(f"aggregator key is not a PEM public key ({error})") from error
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError("aggregator key is not an Ed25519 public key")
    return key.public_bytes_raw()
