"""Names of a round's phases and of the reasons messages are refused, as the round log
writes them (docs/reading-round-logs.md; DESIGN.md section 5, phases 2-7).

Phase keys: ``check_in``, ``advertise_keys``, ``share_keys``, ``masked_input``,
``consistency_check``, ``unmask``, ``step``. A rejection's category is its reason up to
the first colon (``wrong round``, ``duplicate``, ``user id mismatch``, ...); crypto's
refusals are mapped onto the same categories where they mean the same thing.
"""

from __future__ import annotations

import crypto.secagg as secagg

_SERVER_PHASE_NAMES = {
    secagg.Phase.ADVERTISE_KEYS: "advertise_keys",
    secagg.Phase.SHARE_KEYS: "share_keys",
    secagg.Phase.MASKED_INPUT_COLLECTION: "masked_input",
    secagg.Phase.CONSISTENCY_CHECK: "consistency_check",
    secagg.Phase.UNMASKING: "unmask",
    secagg.Phase.FINISHED: "step",
}
_ORDER = list(secagg.Phase)
_PHASE_KEYS = {"check-in": "check_in"} | {
    phase.value: name for phase, name in _SERVER_PHASE_NAMES.items()
}
_REFUSAL_CATEGORIES = {
    secagg.Refusal.WRONG_SESSION: "wrong session",
    secagg.Refusal.DUPLICATE_MEMBER: "duplicate",
    secagg.Refusal.UNEXPECTED_MESSAGE: "wrong phase",
    secagg.Refusal.WRONG_ROUND: "wrong round",
    secagg.Refusal.EXPIRED: "wrong phase",
    secagg.Refusal.UNKNOWN_MEMBER: "unknown participant",
}


def rejection_category(reason: str) -> str:
    """The round log's rejection category: the reason up to its first colon."""
    return reason.split(":", 1)[0].strip()[:48] or "unknown"


def refusal_reason(refused: secagg.RemoteProtocolError) -> str:
    """A crypto refusal as a rejection reason with a round-log category."""
    category = _REFUSAL_CATEGORIES.get(refused.refusal, f"secagg {refused.refusal.value}")
    return f"{category}: {refused}"


def phase_name(phase: secagg.Phase) -> str:
    return _SERVER_PHASE_NAMES[phase]


def phase_key(coordinator_phase: str) -> str:
    """The round-log key of ``Coordinator.phase`` (``check-in`` or a secagg phase)."""
    return _PHASE_KEYS.get(coordinator_phase, coordinator_phase)


def phase_before(phase: secagg.Phase) -> str:
    """The phase that just ended when the server entered ``phase``."""
    return _SERVER_PHASE_NAMES[_ORDER[max(_ORDER.index(phase) - 1, 0)]]
