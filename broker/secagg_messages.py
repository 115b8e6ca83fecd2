"""Secure-aggregation messages on the wire (DESIGN.md section 5, phases 2-6).

Round flow (the lead's protocol decisions; DESIGN.md section 5):
  ModelAnnouncement (fanout) -> CheckIn -> CohortInvitation (direct) -> AdvertiseKeys
  -> ShareKeysRequest -> EncryptedShares -> MaskedInputRequest -> MaskedInput
  -> ConsistencyCheckRequest -> SurvivorSignature -> UnmaskRequest -> UnmaskResponse.
Participants publish to ``fedrank.submit``; the aggregator answers one participant on
``fedrank.direct`` (routing key = participant id). Every secagg wire model wraps the
crypto.secagg dataclass of the same name 1:1 (``to_crypto`` / ``from_crypto``), adds
the participant id, and carries the round and session in the envelope.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

import crypto.secagg as secagg
from broker.codec import Vector, WireMessage
from broker.topology import ParticipantId
from broker.wire_types import (
    ED25519_SIGNATURE_BYTES,
    MAX_CIPHERTEXT_BYTES,
    MAX_MEMBERS,
    MAX_SHARE_BYTES,
    MAX_VECTOR_LENGTH,
    Ciphertext,
    MemberId,
    PublicKey,
    Signature,
    _member_list,
    _Strict,
)

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
