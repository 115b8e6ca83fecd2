"""Errors and abort reasons of the secure-aggregation state machines (DESIGN.md s. 5-6).

As in h11: ``LocalProtocolError`` means this process used its state machine wrongly (a
bug here); ``RemoteProtocolError`` means the other side misbehaved, and says how with a
``Refusal``. A server round that cannot finish is not an error but an outcome,
``RoundAborted``, whose ``AbortReason`` and detail say exactly why.
"""

from __future__ import annotations

import enum


class Refusal(enum.Enum):
    """Why a message from the other side was refused."""

    WRONG_ROUND = "wrong round"
    WRONG_SESSION = "wrong session"
    WRONG_RECIPIENT = "addressed to another member"
    UNEXPECTED_MESSAGE = "message not expected in this phase"
    UNKNOWN_MEMBER = "member not in the directory or roster"
    DUPLICATE_MEMBER = "member listed twice"
    BAD_SIGNATURE = "signature does not verify"
    BELOW_THRESHOLD = "fewer members than the threshold"
    OVERLAPPING_LISTS = "survivor and dropout lists overlap"
    INCONSISTENT_LISTS = "member lists contradict what was seen before"
    DECRYPTION_FAILED = "ciphertext did not decrypt"
    MALFORMED = "malformed message"
    EXPIRED = "round expired"


class AbortReason(enum.Enum):
    """Why the server gave up a round."""

    BELOW_THRESHOLD = "below threshold"
    NEIGHBOURHOOD_BELOW_THRESHOLD = "a neighbourhood is below its threshold"
    INCONSISTENT_SHARES = "shares do not reconstruct the advertised secret"


class SecAggError(Exception):
    """Base of the errors raised by crypto.secagg."""


class LocalProtocolError(SecAggError):
    """The caller drove a state machine wrongly (wrong phase, after failure, bad config)."""


class RemoteProtocolError(SecAggError):
    """The peer sent something this side refuses; ``refusal`` says what kind."""

    def __init__(self, refusal: Refusal, detail: str) -> None:
        super().__init__(f"{refusal.value}: {detail}")
        self.refusal = refusal
        self.detail = detail
