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
here (``ParticipantId``, ``Vector``).
"""

from __future__ import annotations

import itertools
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from broker.codec import WireMessage, encode
from broker.topology import ParticipantId

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
    """Cohort size n, quorum t (t of n secret sharing) and the phase deadlines."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid", allow_inf_nan=False)

    cohort_size: int = Field(ge=1, le=100_000)
    quorum: int = Field(ge=1)
    deadlines: PhaseDeadlines

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
