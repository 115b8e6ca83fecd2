"""The wire codec: strict pydantic messages <-> size-limited msgpack (DESIGN.md sections 5, 7).

Every protocol message is a subclass of :class:`WireMessage`: strict, frozen, no extra
fields, carrying the protocol version, a ``kind`` discriminator, the round and the
secure-aggregation session id (empty before a session exists). Subclasses register
themselves by their ``kind`` when the class is defined (see ``broker/messages.py``).

Wire format: one msgpack array ``[protocol_version, kind, fields]`` where ``fields`` is a
map of the remaining model fields; ``bytes`` travel as msgpack ``bin``, numpy arrays as
:class:`Vector` maps ``{"dtype", "shape", "data"}``. The header comes first so that
:func:`decode` can refuse a wrong version, an unknown kind or an oversized message
*before* it unpacks the body: first a global cap, then the cap of the message's kind.

Every way a byte string can fail to be a valid message raises the one error type
:class:`DecodeError`, whose text says what was wrong (DESIGN.md section 7: "rejected,
logged and acked away").
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import msgpack
import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler, ValidationError
from pydantic_core import core_schema

#: The protocol version this code speaks; a message with another version is refused.
PROTOCOL_VERSION = 1
#: No message of any kind may be larger than this many encoded bytes.
GLOBAL_MAX_BYTES = 8 * 1024 * 1024
#: Default cap of a message kind that does not set its own ``max_bytes``.
DEFAULT_MAX_BYTES = 64 * 1024
#: Session ids are hashes (DESIGN.md section 6): never longer than this.
MAX_SESSION_BYTES = 64
_MAX_KIND_CHARS = 64

#: dtypes a :class:`Vector` may carry on the wire, always little-endian.
VECTOR_DTYPES = frozenset({"<u4", "<i4", "<u8", "<i8", "<f8", "|i1", "|u1"})


class DecodeError(ValueError):
    """A byte string is not a valid message; ``reason`` says exactly why."""

    def __init__(self, reason: str, *, kind: str | None = None, size: int | None = None):
        super().__init__(reason)
        self.reason = reason
        self.kind = kind
        self.size = size


class EncodeError(ValueError):
    """A message cannot be put on the wire (it would exceed its size cap)."""


class Vector:
    """An immutable numpy array on the wire: dtype, shape and raw little-endian bytes.

    Used for masked inputs in ``Z_{2^32}`` (``<u4``) and weight vectors (``<f8``). Two
    vectors are equal when dtype, shape and bytes are.
    """

    __slots__ = ("_data", "_dtype", "_shape")

    def __init__(self, dtype: str, shape: tuple[int, ...], data: bytes) -> None:
        if dtype not in VECTOR_DTYPES:
            raise ValueError(f"vector dtype {dtype!r} not allowed (one of {sorted(VECTOR_DTYPES)})")
        if any(not isinstance(n, int) or n < 0 for n in shape) or len(shape) > 4:
            raise ValueError(f"vector shape {shape!r} must be at most 4 nonnegative ints")
        expected = math.prod(shape) * np.dtype(dtype).itemsize
        if len(data) != expected:
            raise ValueError(
                f"vector data has {len(data)} bytes, dtype {dtype} shape {shape} needs {expected}"
            )
        self._dtype = dtype
        self._shape = tuple(shape)
        self._data = bytes(data)

    @classmethod
    def of(cls, array: NDArray[Any]) -> Vector:
        """Wrap a numpy array (copied, converted to little-endian)."""
        dtype = np.dtype(array.dtype).newbyteorder("<")
        contiguous = np.ascontiguousarray(array, dtype=dtype)
        return cls(dtype.str, tuple(int(n) for n in contiguous.shape), contiguous.tobytes())

    @property
    def dtype(self) -> str:
        return self._dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def data(self) -> bytes:
        return self._data

    def array(self) -> NDArray[Any]:
        """A read-only numpy view of the data."""
        view = np.frombuffer(self._data, dtype=np.dtype(self._dtype)).reshape(self._shape)
        view.flags.writeable = False
        return view

    def to_wire(self) -> dict[str, Any]:
        return {"dtype": self._dtype, "shape": list(self._shape), "data": self._data}

    @classmethod
    def from_wire(cls, value: Any) -> Vector:
        if isinstance(value, Vector):
            return value
        if not isinstance(value, dict) or set(value) != {"dtype", "shape", "data"}:
            raise ValueError("a vector is a map with exactly the keys dtype, shape, data")
        dtype, shape, data = value["dtype"], value["shape"], value["data"]
        if not isinstance(dtype, str) or not isinstance(data, bytes):
            raise ValueError("vector dtype must be a string and data bytes")
        if not isinstance(shape, list | tuple):
            raise ValueError("vector shape must be an array of ints")
        return cls(dtype, tuple(shape), data)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Vector):
            return NotImplemented
        return (self._dtype, self._shape, self._data) == (other._dtype, other._shape, other._data)

    def __hash__(self) -> int:
        return hash((self._dtype, self._shape, self._data))

    def __repr__(self) -> str:
        return f"Vector(dtype={self._dtype!r}, shape={self._shape!r}, {len(self._data)} bytes)"

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: type[Any], handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            cls.from_wire,
            serialization=core_schema.plain_serializer_function_ser_schema(cls.to_wire),
        )


_REGISTRY: dict[str, type[WireMessage]] = {}


class WireMessage(BaseModel):
    """Base of every protocol message: strict, frozen, no extra fields.

    A subclass declares ``kind: Literal["its-kind"] = "its-kind"`` and may set the class
    variable ``max_bytes`` (its encoded size cap, at most :data:`GLOBAL_MAX_BYTES`).
    """

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid", allow_inf_nan=False)

    max_bytes: ClassVar[int] = DEFAULT_MAX_BYTES

    protocol_version: int = PROTOCOL_VERSION
    kind: str
    round: int = Field(ge=0)
    session: bytes = Field(default=b"", max_length=MAX_SESSION_BYTES)

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        kind = cls.model_fields["kind"].default
        if not isinstance(kind, str) or not kind or len(kind) > _MAX_KIND_CHARS:
            raise TypeError(f"{cls.__name__} must give `kind` a Literal default string")
        if kind in _REGISTRY and _REGISTRY[kind] is not cls:
            raise TypeError(f"message kind {kind!r} already registered by {_REGISTRY[kind]}")
        if not 0 < cls.max_bytes <= GLOBAL_MAX_BYTES:
            raise TypeError(f"{cls.__name__}.max_bytes must be in (0, {GLOBAL_MAX_BYTES}]")
        _REGISTRY[kind] = cls


def message_types() -> dict[str, type[WireMessage]]:
    """Every registered message class by kind (a copy)."""
    return dict(_REGISTRY)


def encode(message: WireMessage) -> bytes:
    """The wire bytes of ``message``; raises :class:`EncodeError` above its size cap."""
    fields = message.model_dump(mode="python", exclude={"protocol_version", "kind"})
    data: bytes = msgpack.packb([message.protocol_version, message.kind, fields], use_bin_type=True)
    cap = type(message).max_bytes
    if len(data) > cap:
        raise EncodeError(f"{message.kind} encodes to {len(data)} bytes, above its cap of {cap}")
    return data


def _kind_names(expected: tuple[type[WireMessage], ...]) -> str:
    return ", ".join(sorted(cls.model_fields["kind"].default for cls in expected))


def _schema_reason(kind: str, error: ValidationError) -> str:
    parts = []
    for item in error.errors(include_url=False):
        where = ".".join(str(p) for p in item["loc"]) or "(message)"
        parts.append(f"field {where!r}: {item['msg']}")
    return f"{kind} fails its schema: " + "; ".join(parts)


def decode(
    data: bytes,
    expected: type[WireMessage] | tuple[type[WireMessage], ...] | None = None,
) -> WireMessage:
    """Parse wire bytes into a message, checking sizes, version, kind and schema.

    ``expected`` restricts the kinds accepted. Raises :class:`DecodeError` for anything
    that is not a valid message of an accepted kind.
    """
    size = len(data)
    if size == 0:
        raise DecodeError("empty message (0 bytes)", size=0)
    if size > GLOBAL_MAX_BYTES:
        raise DecodeError(
            f"message of {size} bytes exceeds the global cap of {GLOBAL_MAX_BYTES}", size=size
        )
    unpacker = msgpack.Unpacker(
        use_list=False,
        raw=False,
        strict_map_key=True,
        max_buffer_size=max(size, 1),
        max_str_len=size,
        max_bin_len=size,
        max_array_len=size,
        max_map_len=size,
        max_ext_len=0,
    )
    unpacker.feed(data)
    try:
        length = unpacker.read_array_header()
        if length != 3:
            raise DecodeError(f"envelope has {length} items, expected 3", size=size)
        version = unpacker.unpack()
        kind = unpacker.unpack()
    except DecodeError:
        raise
    except Exception as exc:
        raise DecodeError(f"not a msgpack message envelope ({exc!r})", size=size) from exc
    if not isinstance(version, int) or isinstance(version, bool):
        raise DecodeError(f"protocol version {version!r} is not an integer", size=size)
    if version != PROTOCOL_VERSION:
        raise DecodeError(
            f"protocol version {version} not supported (this node speaks {PROTOCOL_VERSION})",
            size=size,
        )
    if not isinstance(kind, str):
        raise DecodeError(f"message kind {kind!r} is not a string", size=size)
    cls = _REGISTRY.get(kind)
    if cls is None:
        raise DecodeError(f"unknown message kind {kind[:_MAX_KIND_CHARS]!r}", size=size)
    if expected is not None:
        allowed = expected if isinstance(expected, tuple) else (expected,)
        if cls not in allowed:
            raise DecodeError(
                f"unexpected message kind {kind!r} (expected {_kind_names(allowed)})",
                kind=kind,
                size=size,
            )
    if size > cls.max_bytes:
        raise DecodeError(
            f"{kind} of {size} bytes exceeds its cap of {cls.max_bytes}", kind=kind, size=size
        )
    try:
        fields = unpacker.unpack()
    except Exception as exc:
        raise DecodeError(
            f"{kind} body is not valid msgpack ({exc!r})", kind=kind, size=size
        ) from exc
    if unpacker.tell() != size:
        raise DecodeError(
            f"{kind} has {size - unpacker.tell()} trailing bytes after the message",
            kind=kind,
            size=size,
        )
    if not isinstance(fields, dict):
        raise DecodeError(
            f"{kind} body is a {type(fields).__name__}, not a map", kind=kind, size=size
        )
    for header_field in ("protocol_version", "kind"):
        if header_field in fields:
            raise DecodeError(
                f"{kind} body repeats the header field {header_field!r}", kind=kind, size=size
            )
    try:
        return cls.model_validate({**fields, "protocol_version": version, "kind": kind})
    except ValidationError as exc:
        raise DecodeError(_schema_reason(kind, exc), kind=kind, size=size) from exc
