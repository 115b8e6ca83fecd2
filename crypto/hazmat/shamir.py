"""Shamir t-of-n secret sharing of 32-byte secrets over GF(2^31 - 1), vectorized.

Implements SS.share / SS.recon of Bonawitz et al. (CCS 2017, section 3.1) for the mask
keys and self-mask seeds of DESIGN.md section 5, step 3.

Field choice: p = 2^31 - 1 (a Mersenne prime). A 32-byte secret is cut into
``SECRET_CHUNKS`` = 9 chunks of 30 bits, and each chunk is shared with its own
independent random polynomial of degree t - 1. Secrecy of Shamir's scheme is
information-theoretic for any field with more elements than shareholders, so the small
field costs nothing in security (t - 1 shares of each chunk are uniform and independent of
it), while every product of two field elements is below 2^62: evaluation and Lagrange
interpolation run exactly in numpy int64 with no overflow and no Python big integers, so
the server reconstructs thousands of secrets in one matrix operation. Shareholders are
evaluation points x in [1, p - 1] (member ids). Lagrange coefficients at 0 are cached per
set of evaluation points (one survivor set reconstructs every secret of a round).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray

from crypto.hazmat.primitives import KEY_SIZE, RandomSource

PRIME = (1 << 31) - 1
CHUNK_BITS = 30
SECRET_CHUNKS = -(-8 * KEY_SIZE // CHUNK_BITS)  # 9 chunks of 30 bits hold 256 bits
#: Bytes of one encoded share (one field element per chunk, 4 bytes little-endian each).
SHARE_SIZE = 4 * SECRET_CHUNKS

FieldArray = NDArray[np.int64]


class ReconstructionError(ValueError):
    """Shares did not interpolate to a valid secret (inconsistent or corrupted shares)."""


def secret_to_chunks(secret: bytes) -> FieldArray:
    """A 32-byte secret as 9 field elements of 30 bits (little-endian order)."""
    if len(secret) != KEY_SIZE:
        raise ValueError(f"secrets are {KEY_SIZE} bytes, got {len(secret)}")
    value = int.from_bytes(secret, "little")
    mask = (1 << CHUNK_BITS) - 1
    return np.array(
        [(value >> (CHUNK_BITS * i)) & mask for i in range(SECRET_CHUNKS)], dtype=np.int64
    )


def chunks_to_secret(chunks: FieldArray) -> bytes:
    """Inverse of ``secret_to_chunks``; ``ReconstructionError`` if a chunk is out of range."""
    if chunks.shape != (SECRET_CHUNKS,) or bool(np.any((chunks < 0) | (chunks >> CHUNK_BITS))):
        raise ReconstructionError("shares do not interpolate to a valid secret")
    value = 0
    for i, chunk in enumerate(chunks.tolist()):
        value |= int(chunk) << (CHUNK_BITS * i)
    if value >> (8 * KEY_SIZE):
        raise ReconstructionError("shares do not interpolate to a valid secret")
    return value.to_bytes(KEY_SIZE, "little")


def random_field_elements(count: int, random: RandomSource = os.urandom) -> FieldArray:
    """``count`` uniform elements of GF(p) from cryptographic bytes (rejection sampling)."""
    values = np.frombuffer(random(4 * count), dtype="<u4").astype(np.int64) & PRIME
    rejected = np.flatnonzero(values == PRIME)  # 31 random bits; only p itself is out
    while rejected.size:
        fresh = np.frombuffer(random(4 * rejected.size), dtype="<u4").astype(np.int64) & PRIME
        values[rejected] = fresh
        rejected = rejected[fresh == PRIME]
    return values


def _check_points(xs: Sequence[int]) -> NDArray[np.int64]:
    points = np.asarray(list(xs), dtype=np.int64)
    if points.ndim != 1 or points.size == 0:
        raise ValueError("need at least one evaluation point")
    if bool(np.any((points <= 0) | (points >= PRIME))):
        raise ValueError("evaluation points must lie in [1, p - 1]")
    if np.unique(points).size != points.size:
        raise ValueError("evaluation points must be distinct")
    return points


def split(
    secrets: Sequence[bytes],
    threshold: int,
    xs: Sequence[int],
    random: RandomSource = os.urandom,
) -> NDArray[np.int64]:
    """Shares of each secret for each point: array ``[len(xs), len(secrets), 9]``.

    Any ``threshold`` rows reconstruct every secret; fewer are uniformly distributed.
    """
    points = _check_points(xs)
    if not 1 <= threshold <= points.size:
        raise ValueError(f"threshold {threshold} outside [1, {points.size}]")
    constant = np.stack([secret_to_chunks(s) for s in secrets]).reshape(-1)
    width = constant.size
    coefficients = random_field_elements((threshold - 1) * width, random).reshape(
        threshold - 1, width
    )
    x_column = points[:, None]
    values = np.zeros((points.size, width), dtype=np.int64)
    for row in coefficients[::-1]:  # Horner, highest degree first
        values = (values * x_column + row) % PRIME
    values = (values * x_column + constant) % PRIME
    return values.reshape(points.size, len(secrets), SECRET_CHUNKS)


@lru_cache(maxsize=256)
def lagrange_at_zero(xs: tuple[int, ...]) -> NDArray[np.int64]:
    """Coefficients l_i with f(0) = sum_i l_i f(x_i) for any f of degree < len(xs).

    l_i = prod_{j != i} x_j / (x_j - x_i) mod p; cached per point set.
    """
    points = _check_points(xs)
    numerator = 1
    for x in xs:
        numerator = numerator * x % PRIME
    denominators = np.ones(points.size, dtype=np.int64)
    for j, x_j in enumerate(xs):
        differences = (x_j - points) % PRIME
        differences[j] = 1
        denominators = denominators * differences % PRIME
    coefficients = [
        numerator * pow(int(x_i) * int(d_i) % PRIME, PRIME - 2, PRIME) % PRIME
        for x_i, d_i in zip(xs, denominators.tolist(), strict=True)
    ]
    result = np.array(coefficients, dtype=np.int64)
    result.setflags(write=False)
    return result


def interpolate(xs: tuple[int, ...], shares: NDArray[np.int64]) -> NDArray[np.int64]:
    """f(0) for shares ``[len(xs), ...]`` of any trailing shape, as field elements."""
    if shares.shape[0] != len(xs):
        raise ValueError("one share row per evaluation point")
    weights = lagrange_at_zero(xs).reshape((len(xs),) + (1,) * (shares.ndim - 1))
    result: NDArray[np.int64] = ((weights * shares) % PRIME).sum(axis=0) % PRIME
    return result


def reconstruct(xs: tuple[int, ...], shares: NDArray[np.int64]) -> list[bytes]:
    """Secrets from shares ``[len(xs), secrets, 9]`` held at points ``xs``.

    ``len(xs)`` must be at least the threshold used in ``split``; with fewer (or corrupted)
    shares the result is garbage, detected as ``ReconstructionError`` when out of range.
    """
    if shares.ndim != 3 or shares.shape[2] != SECRET_CHUNKS:
        raise ValueError("shares must have shape [points, secrets, 9]")
    constants = interpolate(xs, shares)
    return [chunks_to_secret(row) for row in constants]


def encode_share(share: NDArray[np.int64]) -> bytes:
    """One share (9 field elements) as 36 bytes."""
    if share.shape != (SECRET_CHUNKS,):
        raise ValueError("a share has 9 field elements")
    return share.astype("<u4").tobytes()


def decode_share(data: bytes) -> NDArray[np.int64]:
    """Inverse of ``encode_share``; ``ValueError`` if malformed."""
    if len(data) != SHARE_SIZE:
        raise ValueError(f"a share is {SHARE_SIZE} bytes, got {len(data)}")
    share = np.frombuffer(data, dtype="<u4").astype(np.int64)
    if bool(np.any(share >= PRIME)):
        raise ValueError("share element outside the field")
    return share
