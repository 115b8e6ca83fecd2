"""HAZARDOUS MATERIALS: raw cryptographic building blocks of secure aggregation.

Implements the primitives of DESIGN.md section 6 (X25519, HKDF-SHA256, a ChaCha20 mask
PRG, ChaCha20-Poly1305 AEAD with a random nonce, or the zero nonce for single-use keys,
Ed25519) and Shamir secret sharing over GF(2^31 - 1) (Bonawitz et al., CCS 2017,
section 3). Each is correct only when used exactly as ``crypto.secagg`` uses it: labels
per purpose, keys bound to session, round and pair, single-use AEAD keys.
Call ``crypto.secagg`` instead unless you are writing a protocol.
"""

from crypto.hazmat.primitives import (
    KEY_SIZE,
    DecryptionError,
    RandomSource,
    decrypt,
    decrypt_single_use,
    derive,
    encode_fields,
    encrypt,
    encrypt_single_use,
    exchange,
    expand_mask,
    generate_agreement_key,
    generate_signing_key,
    load_agreement_key,
    load_agreement_public_key,
    public_agreement_key,
    public_signing_key,
    sign,
    verify,
)
from crypto.hazmat.shamir import (
    PRIME,
    SECRET_CHUNKS,
    SHARE_SIZE,
    ReconstructionError,
    decode_share,
    encode_share,
    lagrange_at_zero,
    reconstruct,
    split,
)

__all__ = [
    "KEY_SIZE",
    "PRIME",
    "SECRET_CHUNKS",
    "SHARE_SIZE",
    "DecryptionError",
    "RandomSource",
    "ReconstructionError",
    "decode_share",
    "decrypt",
    "decrypt_single_use",
    "derive",
    "encode_fields",
    "encode_share",
    "encrypt",
    "encrypt_single_use",
    "exchange",
    "expand_mask",
    "generate_agreement_key",
    "generate_signing_key",
    "lagrange_at_zero",
    "load_agreement_key",
    "load_agreement_public_key",
    "public_agreement_key",
    "public_signing_key",
    "reconstruct",
    "sign",
    "split",
    "verify",
]
