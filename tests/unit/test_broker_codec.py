"""broker/codec.py and broker/messages.py: round trips and every rejection reason."""

from __future__ import annotations

import subprocess
import sys
from typing import ClassVar, Literal

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.codec import (
    GLOBAL_MAX_BYTES,
    PROTOCOL_VERSION,
    DecodeError,
    EncodeError,
    Vector,
    WireMessage,
    decode,
    encode,
    message_types,
)
from broker.messages import ModelAnnouncement, ModelRequest, PhaseDeadlines, RoundParameters


class VectorMessage(WireMessage):
    """A test-only message carrying a vector (as masked inputs will)."""

    kind: Literal["test-vector"] = "test-vector"
    max_bytes: ClassVar[int] = 4096

    values: Vector


DEADLINES = PhaseDeadlines(
    check_in=10.0, share_keys=20.0, masked_input=30.0, consistency_check=40.0, unmask=50.0
)


def announcement(**changes: object) -> ModelAnnouncement:
    fields: dict[str, object] = {
        "round": 3,
        "session": b"",
        "model_version": 2,
        "spec": "firefox-2018",
        "weights": (4.0, 14.0, 31.0, 90.0),
        "params": RoundParameters(cohort_size=100, quorum=60, deadlines=DEADLINES),
        "signature": bytes(range(64)),
    }
    fields.update(changes)
    return ModelAnnouncement(**fields)  # type: ignore[arg-type]


def wire(kind: object, fields: object, version: object = PROTOCOL_VERSION) -> bytes:
    data: bytes = msgpack.packb([version, kind, fields], use_bin_type=True)
    return data


def reason_of(data: bytes, **kwargs: object) -> str:
    with pytest.raises(DecodeError) as info:
        decode(data, **kwargs)  # type: ignore[arg-type]
    return info.value.reason


# -- round trips -------------------------------------------------------------------------


def test_announcement_round_trips() -> None:
    message = announcement()
    assert decode(encode(message)) == message


finite = st.floats(allow_nan=False, allow_infinity=False, width=64)


@settings(max_examples=60, deadline=None)
@given(
    round_=st.integers(0, 2**40),
    session=st.binary(max_size=64),
    version=st.integers(0, 2**31),
    weights=st.lists(finite, min_size=1, max_size=64).map(tuple),
    signature=st.binary(max_size=128),
)
def test_any_valid_announcement_round_trips(
    round_: int, session: bytes, version: int, weights: tuple[float, ...], signature: bytes
) -> None:
    message = announcement(
        round=round_, session=session, model_version=version, weights=weights, signature=signature
    )
    assert decode(encode(message), expected=ModelAnnouncement) == message


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.integers(0, 2**32 - 1), max_size=200),
    pid=st.from_regex(r"\A[A-Za-z0-9_-]{1,64}\Z"),
)
def test_vectors_and_requests_round_trip(values: list[int], pid: str) -> None:
    vector = Vector.of(np.array(values, dtype=np.uint32))
    decoded = decode(encode(VectorMessage(round=1, values=vector)))
    assert isinstance(decoded, VectorMessage)
    assert decoded.values.array().tolist() == values
    assert decoded.values.array().dtype == np.uint32
    request = ModelRequest(round=5, participant_id=pid, have_version=2)
    assert decode(encode(request)) == request


def test_vector_of_big_endian_array_is_stored_little_endian() -> None:
    vector = Vector.of(np.array([1, 2, 2**31], dtype=">u4"))
    assert vector.dtype == "<u4"
    assert vector.data[:4] == b"\x01\x00\x00\x00"
    assert not vector.array().flags.writeable


def test_signing_payload_excludes_signature() -> None:
    signed = announcement(signature=b"\x01" * 64)
    assert signed.signing_payload() == announcement(signature=b"").signing_payload()
    assert signed.signing_payload() == encode(announcement(signature=b""))
    assert signed.signing_payload() != announcement(round=4).signing_payload()


def test_registry_knows_the_shipped_kinds_and_refuses_duplicates() -> None:
    kinds = message_types()
    assert kinds["model-announcement"] is ModelAnnouncement
    assert kinds["model-request"] is ModelRequest
    with pytest.raises(TypeError, match="already registered"):

        class Duplicate(WireMessage):
            kind: Literal["model-request"] = "model-request"


# -- rejections ----------------------------------------------------------------------------

GOOD_REQUEST = {"round": 0, "session": b"", "participant_id": "p1", "have_version": -1}


def test_valid_wire_built_by_hand_decodes() -> None:
    """The hand-built wire of the rejection tests is right when nothing is broken."""
    assert decode(wire("model-request", GOOD_REQUEST)) == ModelRequest(round=0, participant_id="p1")


@pytest.mark.parametrize(
    ("data", "expected_reason"),
    [
        (b"", "empty message"),
        (b"\xc1garbage", "not a msgpack message envelope"),
        (msgpack.packb({"kind": "model-request"}), "not a msgpack message envelope"),
        (msgpack.packb([1, "model-request"]), "envelope has 2 items, expected 3"),
        (wire("model-request", GOOD_REQUEST, version=2), "protocol version 2 not supported"),
        (wire("model-request", GOOD_REQUEST, version="1"), "protocol version '1' is not an int"),
        (wire(7, GOOD_REQUEST), "message kind 7 is not a string"),
        (wire("no-such-kind", GOOD_REQUEST), "unknown message kind 'no-such-kind'"),
        (wire("model-request", [1, 2]), "body is a tuple, not a map"),
        (wire("model-request", GOOD_REQUEST) + b"\x00", "1 trailing bytes"),
        (wire("model-request", GOOD_REQUEST)[:-2], "body is not valid msgpack"),
        (
            wire("model-request", {**GOOD_REQUEST, "kind": "model-request"}),
            "repeats the header field 'kind'",
        ),
    ],
)
def test_malformed_wire_is_rejected_with_its_reason(data: bytes, expected_reason: str) -> None:
    assert expected_reason in reason_of(data)


@pytest.mark.parametrize(
    ("fields", "expected_reason"),
    [
        ({**GOOD_REQUEST, "extra": 1}, "field 'extra': Extra inputs are not permitted"),
        ({**GOOD_REQUEST, "round": "0"}, "field 'round': Input should be a valid integer"),
        ({**GOOD_REQUEST, "round": -1}, "field 'round': Input should be greater than or equal"),
        ({**GOOD_REQUEST, "session": "abc"}, "field 'session': Input should be a valid bytes"),
        ({**GOOD_REQUEST, "session": b"x" * 65}, "field 'session'"),
        ({**GOOD_REQUEST, "participant_id": "a.b"}, "field 'participant_id': String should match"),
        ({"round": 0}, "field 'participant_id': Field required"),
        ({**GOOD_REQUEST, "round": True}, "field 'round'"),
    ],
)
def test_schema_errors_name_the_field(fields: dict[str, object], expected_reason: str) -> None:
    reason = reason_of(wire("model-request", fields))
    assert reason.startswith("model-request fails its schema: ")
    assert expected_reason in reason


def test_announcement_semantic_checks_are_schema_errors() -> None:
    body = encode(announcement())
    _version, kind, fields = msgpack.unpackb(body, raw=False)
    fields["params"]["quorum"] = 101
    assert "quorum 101 exceeds cohort size 100" in reason_of(wire(kind, fields))
    fields["params"]["quorum"] = 60
    fields["weights"] = [float("nan")]
    assert "field 'weights.0'" in reason_of(wire(kind, fields))
    fields["weights"] = [1.0]
    fields["params"]["deadlines"]["unmask"] = 5.0
    assert "phase deadlines must strictly increase" in reason_of(wire(kind, fields))


def test_bad_vectors_are_schema_errors() -> None:
    good = {"round": 0, "values": {"dtype": "<u4", "shape": [2], "data": b"\x00" * 8}}
    assert isinstance(decode(wire("test-vector", good)), VectorMessage)
    short = {**good, "values": {"dtype": "<u4", "shape": [3], "data": b"\x00" * 8}}
    assert "field 'values'" in reason_of(wire("test-vector", short))
    assert "needs 12" in reason_of(wire("test-vector", short))
    pickled = {**good, "values": {"dtype": "|O", "shape": [1], "data": b"\x00" * 8}}
    assert "dtype '|O' not allowed" in reason_of(wire("test-vector", pickled))


def test_unexpected_kind_is_rejected() -> None:
    data = encode(ModelRequest(round=0, participant_id="p"))
    reason = reason_of(data, expected=(ModelAnnouncement,))
    assert reason == "unexpected message kind 'model-request' (expected model-announcement)"


def test_oversized_message_is_rejected_before_its_body_is_unpacked() -> None:
    # a valid header followed by a body that is too big *and* not msgpack: the size is
    # what gets reported, so the body was never parsed
    data = wire("model-request", GOOD_REQUEST)[:-1] + b"\xc1" * 2000
    with pytest.raises(DecodeError) as info:
        decode(data)
    assert info.value.reason == f"model-request of {len(data)} bytes exceeds its cap of 1024"
    assert info.value.kind == "model-request" and info.value.size == len(data)


def test_message_above_the_global_cap_is_rejected_first() -> None:
    data = b"\xc1" * (GLOBAL_MAX_BYTES + 1)
    assert reason_of(data) == (
        f"message of {GLOBAL_MAX_BYTES + 1} bytes exceeds the global cap of {GLOBAL_MAX_BYTES}"
    )


def test_encode_refuses_a_message_above_its_cap() -> None:
    vector = Vector.of(np.zeros(2000, dtype=np.uint32))
    with pytest.raises(EncodeError, match="above its cap of 4096"):
        encode(VectorMessage(round=0, values=vector))


def test_messages_are_frozen_and_strict() -> None:
    request = ModelRequest(round=0, participant_id="p")
    with pytest.raises(ValueError):
        request.round = 2  # type: ignore[misc]
    with pytest.raises(ValueError):
        ModelRequest(round="1", participant_id="p")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("body", "expected_reason"),
    [
        (b"\x91" * 60_000 + b"\x00", "body is not valid msgpack (StackError"),
        (b"\xdd\xff\xff\xff\xff", "exceeds max_array_len"),
        (b"\xc6\xff\xff\xff\xff", "body is not valid msgpack"),
    ],
)
def test_hostile_bodies_are_decode_errors(body: bytes, expected_reason: str) -> None:
    data = b"\x93\x01" + msgpack.packb("model-announcement") + body
    assert expected_reason in reason_of(data)


def test_importing_the_codec_alone_registers_every_shipped_kind() -> None:
    code = (
        "from broker.codec import message_types; "
        "assert {'model-announcement', 'model-request'} <= set(message_types())"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
