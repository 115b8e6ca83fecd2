"""The round's wire messages (broker/messages.py) and the secure input (broker/payload.py):
a real secure-aggregation round whose every message crosses the codec, every rejection
class of the new kinds, the aggregator's signatures, and the payload's clip and layout."""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np
import pytest

import crypto.secagg as secagg
from broker.codec import PROTOCOL_VERSION, DecodeError, Vector, WireMessage, decode, encode
from broker.messages import (
    MAX_MEMBERS,
    PARTICIPANT_INBOX_TYPES,
    SUBMISSION_TYPES,
    AdvertiseKeys,
    CheckIn,
    CohortInvitation,
    DirectoryEntry,
    EncryptedShares,
    MaskedInput,
    ModelAnnouncement,
    PhaseDeadlines,
    PrivacySettings,
    RoundParameters,
    SecAggParameters,
    SecureAggregationSettings,
    request_from_crypto,
    requests_from_crypto,
    sign_announcement,
    sign_message,
    submission_from_crypto,
    verify_announcement,
    verify_message,
)
from broker.payload import (
    METRIC_COUNT,
    MetricClip,
    MetricTotals,
    ParticipantMetrics,
    PayloadError,
    decode_total,
    encode_input,
    input_length,
    metric_totals_problem,
)
from crypto.dp import decode_from_ring
from crypto.hazmat import primitives

DEADLINES = PhaseDeadlines(
    check_in=5.0, share_keys=10.0, masked_input=15.0, consistency_check=20.0, unmask=25.0
)
KEY = primitives.generate_signing_key()
PUBLIC = primitives.public_signing_key(KEY)


def through_wire(message: WireMessage) -> WireMessage:
    decoded = decode(encode(message), type(message))
    assert decoded == message
    return decoded


def reason_of(data: bytes, expected: Any = None) -> str:
    with pytest.raises(DecodeError) as info:
        decode(data, expected)
    return info.value.reason


def wire(kind: str, fields: dict[str, Any]) -> bytes:
    data: bytes = msgpack.packb([PROTOCOL_VERSION, kind, fields], use_bin_type=True)
    return data


# --- a real round across the codec -------------------------------------------------------


@pytest.mark.parametrize("secagg_plus", [False, True])
def test_a_secure_round_whose_every_message_crosses_the_wire_sums_the_inputs(
    secagg_plus: bool,
) -> None:
    members = {m: f"p{m}" for m in range(1, 7)}
    parameters = secagg.RoundParameters(
        round=4, threshold=4, vector_length=22 + METRIC_COUNT, secagg_plus=secagg_plus, degree=2
    )
    identities = {m: primitives.generate_signing_key() for m in members}
    directory = {m: primitives.public_signing_key(k) for m, k in identities.items()}
    invitation = sign_message(
        KEY,
        CohortInvitation(
            round=4,
            participant_id="p1",
            member=1,
            model_version=3,
            parameters=SecAggParameters.from_crypto(parameters),
            directory=tuple(
                DirectoryEntry(member=m, participant_id=p, identity_key=directory[m])
                for m, p in members.items()
            ),
            expires_in=30.0,
        ),
    )
    received = through_wire(invitation)
    assert isinstance(received, CohortInvitation)
    assert verify_message(PUBLIC, received)
    assert received.crypto_parameters() == parameters
    assert received.crypto_directory() == directory

    rng = np.random.default_rng(7)  # test data only, not keys
    votes = {m: rng.integers(-1, 2, 22) for m in members}
    inputs = {
        m: encode_input(votes[m], ParticipantMetrics(3, 1.25 * m, 10, 4, 20)) for m in members
    }
    clients = {
        m: secagg.SecAggClient(parameters, m, identities[m], directory, inputs[m]) for m in members
    }
    server = secagg.SecAggServer(parameters, directory, now=0.0, phase_timeout=60.0)
    outbox: list[secagg.ServerMessage] = []
    outcome: list[secagg.Outcome] = []

    def to_server(message: secagg.ClientMessage, member: int) -> None:
        wrapped = through_wire(submission_from_crypto(message, members[member]))
        assert wrapped.round == 4
        step = server.receive(wrapped.to_crypto(), 0.0)  # type: ignore[attr-defined]
        outbox.extend(step.messages)
        if step.outcome is not None:
            outcome.append(step.outcome)

    for member, client in clients.items():
        to_server(client.advertise(0.0), member)
    while not outcome:
        batch, outbox[:] = outbox[:], []
        assert requests_from_crypto(batch, members) == [
            request_from_crypto(request, members[request.recipient]) for request in batch
        ]
        for request in batch:
            wrapped = through_wire(request_from_crypto(request, members[request.recipient]))
            assert wrapped.participant_id == members[request.recipient]  # type: ignore[attr-defined]
            reply = clients[request.recipient].receive(wrapped.to_crypto(), 0.0)  # type: ignore[attr-defined]
            to_server(reply, request.recipient)
    result = outcome[0]
    assert isinstance(result, secagg.AggregateSum)
    vote_total, metrics = decode_total(result.total, 22)
    assert vote_total.tolist() == np.sum(list(votes.values()), axis=0).tolist()
    assert metrics.interactions == 18
    assert metrics.loss == pytest.approx(1.25 * 21)
    assert (metrics.chars_typed, metrics.rank_selected, metrics.suggestions_displayed) == (
        60,
        24,
        120,
    )


def test_submission_and_inbox_kinds_are_disjoint_and_registered() -> None:
    assert not set(SUBMISSION_TYPES) & set(PARTICIPANT_INBOX_TYPES)
    data = encode(CheckIn(round=1, participant_id="p1", identity_key=PUBLIC, model_version=0))
    assert "unexpected message kind" in reason_of(data, PARTICIPANT_INBOX_TYPES)
    assert isinstance(decode(data, SUBMISSION_TYPES), CheckIn)


# --- the announcement --------------------------------------------------------------------


def announcement(**params: Any) -> ModelAnnouncement:
    return ModelAnnouncement(
        round=2,
        model_version=1,
        spec="firefox-2018",
        weights=(4.0, 14.0, 31.0),
        params=RoundParameters(cohort_size=10, quorum=6, deadlines=DEADLINES, **params),
    )


def test_announcement_carries_secagg_plus_and_dp_settings_and_verifies_when_signed() -> None:
    message = announcement(
        secure_aggregation=SecureAggregationSettings(secagg_plus=True, degree=6),
        privacy=PrivacySettings(mode="skellam", skellam_variance=4.0),
    )
    signed = sign_announcement(KEY, message)
    received = through_wire(signed)
    assert isinstance(received, ModelAnnouncement)
    assert verify_announcement(PUBLIC, received)
    assert received.params.secure_aggregation.degree == 6
    assert received.params.privacy.skellam_variance == 4.0


def test_unsigned_tampered_or_foreign_signed_announcements_do_not_verify() -> None:
    signed = sign_announcement(KEY, announcement())
    assert not verify_announcement(PUBLIC, announcement())
    assert not verify_announcement(PUBLIC, signed.model_copy(update={"model_version": 9}))
    other = primitives.public_signing_key(primitives.generate_signing_key())
    assert not verify_announcement(other, signed)


def test_privacy_settings_need_the_parameter_of_their_mode() -> None:
    with pytest.raises(ValueError, match="rr_epsilon"):
        PrivacySettings(mode="rr")
    with pytest.raises(ValueError, match="skellam_variance"):
        PrivacySettings(mode="none", skellam_variance=1.0)
    assert PrivacySettings(mode="rr", rr_epsilon=1.0).rr_epsilon == 1.0


# --- rejections --------------------------------------------------------------------------


def test_check_in_rejects_wrong_key_size_and_bad_participant_id() -> None:
    good = {"round": 1, "session": b"", "participant_id": "p1", "identity_key": PUBLIC}
    good["model_version"] = 0
    assert isinstance(decode(wire("check-in", good)), CheckIn)
    assert "identity_key" in reason_of(wire("check-in", {**good, "identity_key": b"x" * 31}))
    assert "participant_id" in reason_of(wire("check-in", {**good, "participant_id": "a b"}))
    assert "model_version" in reason_of(wire("check-in", {**good, "model_version": "0"}))
    assert "extra" in reason_of(wire("check-in", {**good, "admin": True})).lower()


@pytest.mark.parametrize("kind", [cls.model_fields["kind"].default for cls in SUBMISSION_TYPES])
def test_every_submission_kind_refuses_a_message_above_its_cap(kind: str) -> None:
    cls = {c.model_fields["kind"].default: c for c in SUBMISSION_TYPES}[kind]
    data = wire(kind, {"round": 1, "padding": b"\0" * cls.max_bytes})
    assert "exceeds its cap" in reason_of(data)


@pytest.mark.parametrize(
    "kind", [cls.model_fields["kind"].default for cls in PARTICIPANT_INBOX_TYPES]
)
def test_every_inbox_kind_refuses_a_message_above_its_cap(kind: str) -> None:
    cls = {c.model_fields["kind"].default: c for c in PARTICIPANT_INBOX_TYPES}[kind]
    data = wire(kind, {"round": 1, "padding": b"\0" * cls.max_bytes})
    assert "exceeds its cap" in reason_of(data)


def test_masked_input_must_be_a_one_dimensional_uint32_vector() -> None:
    fields = {"round": 1, "session": b"s", "participant_id": "p1", "member": 1}
    good = Vector.of(np.arange(5, dtype=np.uint32)).to_wire()
    assert isinstance(decode(wire("secagg-masked-input", {**fields, "masked": good})), MaskedInput)
    as_int64 = Vector.of(np.arange(5, dtype=np.int64)).to_wire()
    assert "<u4" in reason_of(wire("secagg-masked-input", {**fields, "masked": as_int64}))
    matrix = Vector.of(np.zeros((2, 2), dtype=np.uint32)).to_wire()
    assert "one-dimensional" in reason_of(wire("secagg-masked-input", {**fields, "masked": matrix}))
    assert "masked" in reason_of(wire("secagg-masked-input", {**fields, "masked": [1, 2]}))


def test_member_ids_and_share_kinds_are_checked() -> None:
    fields = {"round": 1, "session": b"s", "participant_id": "p1"}
    share = {"sender": 1, "recipient": 2, "ciphertext": b"c"}
    assert isinstance(
        decode(wire("secagg-encrypted-shares", {**fields, "member": 1, "shares": (share,)})),
        EncryptedShares,
    )
    assert "member" in reason_of(
        wire("secagg-encrypted-shares", {**fields, "member": 0, "shares": ()})
    )
    too_big = {**share, "ciphertext": b"c" * 2000}
    assert "ciphertext" in reason_of(
        wire("secagg-encrypted-shares", {**fields, "member": 1, "shares": (too_big,)})
    )
    revealed = {"owner": 2, "share_kind": "both", "share": b"x" * 36}
    assert "share_kind" in reason_of(
        wire("secagg-unmask-response", {**fields, "member": 1, "shares": (revealed,)})
    )


def test_request_lists_must_not_repeat_a_member() -> None:
    fields = {"round": 1, "session": b"s", "participant_id": "p1", "member": 1}
    data = wire("secagg-consistency-check-request", {**fields, "survivors": (1, 2, 2)})
    assert "twice" in reason_of(data)
    data = wire(
        "secagg-unmask-request",
        {**fields, "survivors": (1, 2), "dropped": (3, 3), "signatures": ()},
    )
    assert "twice" in reason_of(data)


def test_invitation_must_list_its_recipient_under_its_member_id() -> None:
    entries = tuple(
        DirectoryEntry(member=m, participant_id=f"p{m}", identity_key=PUBLIC) for m in (1, 2, 3)
    )
    base: dict[str, Any] = {
        "round": 1,
        "participant_id": "p1",
        "member": 1,
        "model_version": 0,
        "parameters": SecAggParameters(threshold=2, vector_length=27),
        "directory": entries,
        "expires_in": 10.0,
    }
    assert CohortInvitation(**base).member == 1
    with pytest.raises(ValueError, match="recipient"):
        CohortInvitation(**{**base, "member": 2})
    with pytest.raises(ValueError, match="threshold"):
        CohortInvitation(**{**base, "parameters": SecAggParameters(threshold=4, vector_length=27)})
    with pytest.raises(ValueError, match="twice"):
        CohortInvitation(**{**base, "directory": (*entries, entries[0])})
    assert MAX_MEMBERS >= 1000


def test_advertise_keys_round_trips_its_crypto_dataclass() -> None:
    advert = secagg.AdvertiseKeys(3, 7, b"c" * 32, b"m" * 32, b"s" * 64)
    wrapped = AdvertiseKeys.from_crypto(advert, "p7")
    assert through_wire(wrapped).to_crypto() == advert  # type: ignore[attr-defined]


# --- the payload ------------------------------------------------------------------------


def test_payload_layout_is_votes_then_five_metric_fields() -> None:
    vector = encode_input(np.array([1, -1, 0]), ParticipantMetrics(2, 3.456, 9, 3, 11))
    assert vector.dtype == np.uint32 and vector.shape == (input_length(3),)
    assert decode_from_ring(vector).tolist() == [1, -1, 0, 2, 346, 9, 3, 11]


def test_metrics_are_clipped_per_participant() -> None:
    clip = MetricClip()
    huge = ParticipantMetrics(10**6, 1e12, 10**9, 10**9, 10**9)
    fields = decode_from_ring(encode_input(np.zeros(2, dtype=np.int64), huge, clip))[2:]
    count = clip.max_interactions
    assert fields.tolist() == [
        count,
        round(count * clip.max_loss_per_interaction * 100),
        count * clip.max_chars_per_interaction,
        count * clip.max_rank_per_interaction,
        count * clip.max_displayed_per_interaction,
    ]
    negative = ParticipantMetrics(-5, -1.0, -3, -3, -3)
    assert (
        decode_from_ring(encode_input(np.zeros(2, dtype=np.int64), negative))[2:].tolist()
        == [0] * 5
    )


def test_the_sum_of_200_worst_case_payloads_decodes_without_wrapping() -> None:
    worst = encode_input(np.full(4, -1), ParticipantMetrics(10**6, 1e12, 10**9, 10**9, 10**9))
    total = (worst.astype(np.uint64) * 200 % (1 << 32)).astype(np.uint32)
    votes, metrics = decode_total(total, 4)
    assert votes.tolist() == [-200] * 4
    assert metrics.interactions == 200 * MetricClip().max_interactions
    assert metrics.loss > 0 and metrics.chars_typed > 0


def test_payload_refuses_bad_votes_and_bad_sums() -> None:
    metrics = ParticipantMetrics(1, 1.0, 1, 1, 1)
    with pytest.raises(PayloadError):
        encode_input(np.array([0.5, 1.0]), metrics)
    with pytest.raises(PayloadError):
        encode_input(np.array([1 << 30]), metrics)
    with pytest.raises(PayloadError):
        encode_input(np.array([1]), ParticipantMetrics(1, float("nan"), 1, 1, 1))
    with pytest.raises(PayloadError):
        decode_total(np.zeros(4, dtype=np.uint32), 4)


def test_metric_totals_beyond_what_clipped_payloads_can_sum_to_are_flagged() -> None:
    honest = [ParticipantMetrics(100, 1e9, 10**6, 10**6, 10**6) for _ in range(3)]
    total = np.sum(
        [encode_input(np.zeros(2, dtype=np.int64), m).astype(np.uint64) for m in honest], axis=0
    )
    _, metrics = decode_total((total % (1 << 32)).astype(np.uint32), 2)
    assert metric_totals_problem(metrics, 3) is None
    assert "interactions total" in (metric_totals_problem(metrics, 2) or "")
    inflated = MetricTotals(10, 10 * 1000.0 + 1, 0, 0, 0)
    assert "loss total" in (metric_totals_problem(inflated, 1) or "")
    assert "chars_typed" in (metric_totals_problem(MetricTotals(1, 0.0, 65, 0, 0), 1) or "")
    assert "interactions" in (metric_totals_problem(MetricTotals(-1, 0.0, 0, 0, 0), 1) or "")
