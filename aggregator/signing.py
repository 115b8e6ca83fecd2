"""The aggregator's model-signing key (DESIGN.md section 6: "Ed25519 ... for the
aggregator's model signature"; the issue: "made on first start; ``fedrank aggregator
--export-key`` prints the public key participants pin").

The private key lives in the state directory as a PKCS#8 PEM file, mode 0600, created
exclusively (never overwritten) on first start. The public key is exported as a PEM
``PUBLIC KEY`` block, which ``broker.messages.load_aggregator_public_key`` reads back.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
    load_pem_private_key,
)

from aggregator.state import StateError


def load_or_create_signing_key(path: Path) -> bytes:
    """The raw 32-byte Ed25519 private key at ``path``, created (0600) if missing."""
    if not path.exists():
        _create(path)
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
        data = path.read_bytes()
    except OSError as error:
        raise StateError(f"cannot read signing key {path}: {error.strerror}") from error
    if mode & 0o077:
        raise StateError(f"signing key {path} is readable by others (mode {mode:o}); chmod 600")
    try:
        key = load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as error:
        raise StateError(f"signing key {path} is not a PEM private key") from error
    if not isinstance(key, Ed25519PrivateKey):
        raise StateError(f"signing key {path} is not an Ed25519 key")
    return key.private_bytes_raw()


def _create(path: Path) -> None:
    pem = Ed25519PrivateKey.generate().private_bytes(
        Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()
    )
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return  # another process created it first: use theirs
    except OSError as error:
        raise StateError(f"cannot create signing key {path}: {error.strerror}") from error
    try:
        os.write(fd, pem)
        os.fsync(fd)
    finally:
        os.close(fd)


def public_key_pem(private_key: bytes) -> str:
    """The PEM ``PUBLIC KEY`` block participants pin (``--aggregator-key FILE``)."""
    public = Ed25519PrivateKey.from_private_bytes(private_key).public_key()
    return public.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo).decode("ascii")
