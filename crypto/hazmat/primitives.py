"""Raw primitives of secure aggregation (DESIGN.md section 6; Bonawitz et al. 2017, s. 3).

Thin, typed wrappers over pyca/cryptography with verbs as names:

- ``generate_agreement_key`` / ``public_agreement_key`` / ``exchange``: X25519 (RFC 7748);
- ``derive``: HKDF-SHA256 (RFC 5869) with a purpose label and a context, so that every key
  is bound to its purpose, session, round and pair;
- ``expand_mask``: a ChaCha20 keystream (nonce 0, from block 1) read as little-endian
  uint32, the mask PRG;
- ``encrypt`` / ``decrypt``: ChaCha20-Poly1305 with associated data and a random nonce;
  ``encrypt_single_use`` / ``decrypt_single_use`` the same with the all-zero nonce, for
  keys derived to encrypt exactly one message (no nonce sent); every failure is the one
  opaque ``DecryptionError``;
- ``generate_signing_key`` / ``sign`` / ``verify``: Ed25519 identities.

Keys are raw 32-byte strings so messages stay plain data. Randomness is a
``RandomSource`` (``n -> n random bytes``), ``os.urandom`` unless a test injects one.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Callable
from functools import lru_cache

import numpy as np
from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from numpy.typing import NDArray

#: Size in bytes of every symmetric key, X25519 key, seed and Ed25519 key here.
KEY_SIZE = 32
NONCE_SIZE = 12
_ZERO_NONCE = bytes(NONCE_SIZE)
# 32-bit little-endian block counter 1 || 96-bit nonce 0 (OpenSSL's ChaCha20 "nonce")
_CHACHA_FROM_BLOCK_ONE = (1).to_bytes(4, "little") + bytes(12)
# Up to this many bytes a keystream is cheaper through the AEAD object (one Rust call)
# than through a Cipher context; beyond, Poly1305 over the zeros costs more than it saves.
_AEAD_KEYSTREAM_MAX_BYTES = 4096

#: n -> n uniformly random bytes. ``os.urandom`` in production.
RandomSource = Callable[[int], bytes]


class DecryptionError(Exception):
    """A ciphertext did not decrypt: wrong key, wrong associated data, or tampered.

    Deliberately says nothing more.
    """


def encode_fields(*fields: bytes | str | int) -> bytes:
    """Unambiguous encoding of a tuple: each field length-prefixed (8 bytes, big-endian).

    ``str`` is UTF-8, ``int`` a non-negative 8-byte big-endian integer.
    """
    parts: list[bytes] = []
    for field in fields:
        if isinstance(field, int):
            if field < 0:
                raise ValueError("encode_fields takes non-negative integers")
            parts += (_EIGHT, field.to_bytes(8, "big"))
            continue
        data = field.encode() if isinstance(field, str) else bytes(field)
        parts += (len(data).to_bytes(8, "big"), data)
    return b"".join(parts)


_EIGHT = (8).to_bytes(8, "big")


def _check_key(key: bytes, what: str) -> None:
    if len(key) != KEY_SIZE:
        raise ValueError(f"{what} must be {KEY_SIZE} bytes, got {len(key)}")


# --- X25519 -----------------------------------------------------------------------------


def generate_agreement_key(random: RandomSource = os.urandom) -> bytes:
    """A fresh X25519 private key (32 raw bytes; clamped on use, RFC 7748 s. 5)."""
    return random(KEY_SIZE)


def public_agreement_key(private_key: bytes) -> bytes:
    """The X25519 public key (32 raw bytes) of ``private_key``."""
    _check_key(private_key, "X25519 private key")
    return X25519PrivateKey.from_private_bytes(private_key).public_key().public_bytes_raw()


def load_agreement_key(private_key: bytes) -> X25519PrivateKey:
    """The X25519 key object of ``private_key``, to ``exchange`` with many peers at once."""
    _check_key(private_key, "X25519 private key")
    return X25519PrivateKey.from_private_bytes(private_key)


def load_agreement_public_key(public_key: bytes) -> X25519PublicKey:
    """The X25519 public key object of ``public_key``, to ``exchange`` with many times."""
    _check_key(public_key, "X25519 public key")
    return X25519PublicKey.from_public_bytes(public_key)


def exchange(
    private_key: bytes | X25519PrivateKey, peer_public_key: bytes | X25519PublicKey
) -> bytes:
    """X25519(private_key, peer_public_key): the raw 32-byte shared secret.

    Raises ``ValueError`` on a malformed or low-order peer key (all-zero output).
    """
    if isinstance(private_key, bytes):
        private_key = load_agreement_key(private_key)
    if isinstance(peer_public_key, bytes):
        peer_public_key = load_agreement_public_key(peer_public_key)
    return private_key.exchange(peer_public_key)


# --- HKDF -------------------------------------------------------------------------------


_HASH_SIZE = 32
_ZERO_SALT = bytes(_HASH_SIZE)


def hkdf(input_key: bytes, salt: bytes | None, info: bytes, length: int) -> bytes:
    """Plain HKDF-SHA256 (RFC 5869): extract with ``salt``, expand with ``info``.

    Written with one-shot HMACs (``hmac.digest``, OpenSSL underneath): the same bytes as
    ``cryptography``'s ``HKDF`` (tested), without building its objects per call, which
    dominated a derivation of 32 bytes.
    """
    if not 0 < length <= 255 * _HASH_SIZE:
        raise ValueError("HKDF-SHA256 output length must lie in [1, 8160]")
    prk = hmac.digest(salt or _ZERO_SALT, input_key, "sha256")
    if length <= _HASH_SIZE:  # one block: every key derived here
        return hmac.digest(prk, info + b"\x01", "sha256")[:length]
    blocks: list[bytes] = []
    previous = b""
    for counter in range(1, -(-length // _HASH_SIZE) + 1):
        previous = hmac.digest(prk, previous + info + bytes((counter,)), "sha256")
        blocks.append(previous)
    return b"".join(blocks)[:length]


def reference_hkdf(input_key: bytes, salt: bytes | None, info: bytes, length: int) -> bytes:
    """``cryptography``'s HKDF-SHA256, the reference ``hkdf`` is tested against."""
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=salt, info=info).derive(input_key)


def derive(
    input_key: bytes,
    label: str,
    *,
    salt: bytes | None = None,
    context: tuple[bytes | str | int, ...] = (),
    length: int = KEY_SIZE,
) -> bytes:
    """HKDF-SHA256 of ``input_key``; ``info`` encodes the purpose ``label`` and ``context``.

    ``salt`` is the session id where there is one; ``context`` carries round and pair.
    Distinct labels or contexts give independent keys.
    """
    return hkdf(input_key, salt, encode_fields(label, *context), length)


# --- mask PRG ---------------------------------------------------------------------------


def expand_mask(seed: bytes, length: int) -> NDArray[np.uint32]:
    """``length`` pseudo-random words of Z_{2^32}: the ChaCha20 keystream under ``seed``,
    nonce 0, starting at block 1 (RFC 8439 numbering).

    Block 1 because ChaCha20-Poly1305 encrypts from block 1 (block 0 keys Poly1305): short
    masks are read off its ciphertext of zeros, with one call and no cipher context, which
    was a third of the server's cost per (dropped, survivor) pair; long masks come from
    the plain ChaCha20 cipher at the same position. Both give the same words (tested).
    Each seed must be used for one mask only (callers derive it per purpose and pair).
    """
    _check_key(seed, "mask seed")
    size = 4 * length
    if size <= _AEAD_KEYSTREAM_MAX_BYTES:
        stream = ChaCha20Poly1305(seed).encrypt(_ZERO_NONCE, _zeros(size), None)[:size]
    else:
        stream = chacha20_keystream(seed, size)
    return np.frombuffer(stream, dtype="<u4").astype(np.uint32, copy=False)


def chacha20_keystream(seed: bytes, size: int) -> bytes:
    """``size`` bytes of the ChaCha20 keystream under ``seed``, nonce 0, from block 1,
    through the plain cipher (the reference the fast path of ``expand_mask`` is tested
    against)."""
    _check_key(seed, "mask seed")
    encryptor = Cipher(algorithms.ChaCha20(seed, _CHACHA_FROM_BLOCK_ONE), mode=None).encryptor()
    return encryptor.update(_zeros(size))


@lru_cache(maxsize=8)
def _zeros(size: int) -> bytes:
    """``size`` zero bytes, kept: a round expands thousands of masks of one length."""
    return bytes(size)


# --- AEAD -------------------------------------------------------------------------------


def encrypt(
    key: bytes, plaintext: bytes, associated_data: bytes, random: RandomSource = os.urandom
) -> bytes:
    """ChaCha20-Poly1305: ``nonce || ciphertext || tag``, authenticating ``associated_data``."""
    _check_key(key, "AEAD key")
    nonce = random(NONCE_SIZE)
    return nonce + ChaCha20Poly1305(key).encrypt(nonce, plaintext, associated_data)


def encrypt_single_use(key: bytes, plaintext: bytes, associated_data: bytes) -> bytes:
    """ChaCha20-Poly1305 under the all-zero nonce: ``ciphertext || tag``.

    Only for a key that encrypts exactly one message (derived per purpose, session, round
    and ordered pair): a (key, nonce) pair must never repeat, and here the key never does.
    """
    _check_key(key, "AEAD key")
    return ChaCha20Poly1305(key).encrypt(_ZERO_NONCE, plaintext, associated_data)


def decrypt_single_use(key: bytes, ciphertext: bytes, associated_data: bytes) -> bytes:
    """Inverse of ``encrypt_single_use``; any failure raises ``DecryptionError``."""
    _check_key(key, "AEAD key")
    if len(ciphertext) < 16:
        raise DecryptionError("decryption failed")
    try:
        return ChaCha20Poly1305(key).decrypt(_ZERO_NONCE, ciphertext, associated_data)
    except InvalidTag:
        raise DecryptionError("decryption failed") from None


def decrypt(key: bytes, ciphertext: bytes, associated_data: bytes) -> bytes:
    """Inverse of ``encrypt``; any failure (short, tampered, wrong key or AD) raises
    ``DecryptionError``."""
    _check_key(key, "AEAD key")
    if len(ciphertext) < NONCE_SIZE + 16:
        raise DecryptionError("decryption failed")
    try:
        return ChaCha20Poly1305(key).decrypt(
            ciphertext[:NONCE_SIZE], ciphertext[NONCE_SIZE:], associated_data
        )
    except InvalidTag:
        raise DecryptionError("decryption failed") from None


# --- Ed25519 ----------------------------------------------------------------------------


def generate_signing_key(random: RandomSource = os.urandom) -> bytes:
    """A fresh Ed25519 private key (32-byte seed, RFC 8032)."""
    return random(KEY_SIZE)


def public_signing_key(private_key: bytes) -> bytes:
    """The Ed25519 public key (32 raw bytes) of ``private_key``."""
    _check_key(private_key, "Ed25519 private key")
    return Ed25519PrivateKey.from_private_bytes(private_key).public_key().public_bytes_raw()


def sign(private_key: bytes, message: bytes) -> bytes:
    """Ed25519 signature (64 bytes) of ``message``."""
    _check_key(private_key, "Ed25519 private key")
    return Ed25519PrivateKey.from_private_bytes(private_key).sign(message)


def verify(public_key: bytes, signature: bytes, message: bytes) -> bool:
    """Whether ``signature`` is ``public_key``'s Ed25519 signature of ``message``.

    False, never an exception, for malformed keys or signatures.
    """
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, message)
    except (InvalidSignature, ValueError):
        return False
    return True
