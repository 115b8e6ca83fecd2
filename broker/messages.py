"""Protocol messages (DESIGN.md section 5, phases 1 and 7; the late-joiner fix).

Every message is a strict, frozen :class:`broker.codec.WireMessage` registered by its
``kind``. This module holds the messages that do not depend on secure aggregation:

- :class:`ModelAnnouncement` (phase 1 "Announce" and phase 7 "publish"): the signed
  model, version, round and round parameters, on ``fedrank.model`` (fanout), or on
  ``fedrank.direct`` as the answer to a request.
- :class:`ModelRequest`: a participant that joined (or reconnected) after the fanout asks
  the aggregator, on ``fedrank.submit``, to send it the current announcement.

It also holds ``CheckIn`` and ``CohortInvitation`` (phases 2-3), the announced SecAgg+ /
DP settings, and the aggregator's Ed25519 signatures over announcements and invitations
(``sign_message`` / ``verify_message``). The secure-aggregation wrappers (AdvertiseKeys ...
UnmaskResponse) live in ``broker.secagg_messages`` and are re-exported here, so that
``broker.messages`` names every message of the protocol.
"""

from __future__ import annotations

import functools
import itertools
from typing import ClassVar, Literal, TypeVar

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import BaseModel, ConfigDict, Field, model_validator

import crypto.secagg as secagg
from broker.codec import WireMessage, encode
from broker.secagg_messages import (
    AdvertiseKeys,
    ConsistencyCheckRequest,
    EncryptedShare,
    EncryptedShares,
    MaskedInput,
    MaskedInputRequest,
    MemberSignature,
    RevealedShare,
    RosterEntry,
    SecAggRequest,
    SecAggSubmission,
    ShareKeysRequest,
    SurvivorSignature,
    UnmaskRequest,
    UnmaskResponse,
    request_from_crypto,
    requests_from_crypto,
    submission_from_crypto,
    submission_to_crypto,
)
from broker.topology import ParticipantId
from broker.wire_types import (
    ED25519_SIGNATURE_BYTES,
    KEY_BYTES,
    MAX_CIPHERTEXT_BYTES,
    MAX_MEMBER_ID,
    MAX_MEMBERS,
    MAX_SHARE_BYTES,
    MAX_SIGNATURE_BYTES,
    MAX_VECTOR_LENGTH,
    MAX_WEIGHTS,
    Ciphertext,
    MemberId,
    PublicKey,
    Signature,
    _member_list,
    _Strict,
)
from crypto.hazmat import primitives

__all__ = [
    "ED25519_SIGNATURE_BYTES",
    "KEY_BYTES",
    "MAX_CIPHERTEXT_BYTES",
    "MAX_MEMBERS",
    "MAX_MEMBER_ID",
    "MAX_SHARE_BYTES",
    "MAX_SIGNATURE_BYTES",
    "MAX_VECTOR_LENGTH",
    "MAX_WEIGHTS",
    "AdvertiseKeys",
    "Ciphertext",
    "ConsistencyCheckRequest",
    "EncryptedShare",
    "EncryptedShares",
    "MaskedInput",
    "MaskedInputRequest",
    "MemberId",
    "MemberSignature",
    "PublicKey",
    "RevealedShare",
    "RosterEntry",
    "SecAggRequest",
    "SecAggSubmission",
    "ShareKeysRequest",
    "Signature",
    "SurvivorSignature",
    "UnmaskRequest",
    "UnmaskResponse",
    "request_from_crypto",
    "requests_from_crypto",
    "submission_from_crypto",
    "submission_to_crypto",
]



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


class LearningObjective(BaseModel):
    """The loss every participant of the round computes its vote with (DESIGN.md section
    3), announced so that participants and aggregator cannot disagree: ``svm`` is the
    pointwise SVM ranking loss the 2018 study shipped; ``relative`` (default) divides each
    score by the selected suggestion's, which makes the loss independent of the model's
    scale (docs/simulation.md); ``margin`` is the SVM margin."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid", allow_inf_nan=False)

    loss: Literal["relative", "svm"] = "relative"
    margin: float = Field(default=0.0, ge=0.0, le=1e6)


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
    objective: LearningObjective = Field(default_factory=LearningObjective)

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
