"""Field types and limits shared by the wire messages (DESIGN.md sections 5 and 7).

Every size a message may carry is bounded here, so that ``broker.codec``'s per-type byte
caps and the strict schemas agree.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

MAX_WEIGHTS = 1024
MAX_SIGNATURE_BYTES = 128
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
