"""What is signed, hashed, derived and encrypted in a round, and how it is bound
(DESIGN.md s. 6; Bonawitz et al. 2017, figure 4).

- the advert signature covers round, member id and both public keys;
- the session id hashes the round parameters and every roster entry, length-prefixed;
- every derived key has its own HKDF label, uses the session id as salt and the round and
  the pair (ordered for encryption keys, sorted for pairwise masks) as context;
- an encrypted share's associated data is sender || recipient || session id || round;
  its plaintext is the two 36-byte shares, fixed layout, nothing else (the ids are bound
  by the associated data and by the single-use key, which is derived for that ordered
  pair, so repeating them inside would add bytes and no binding);
- the survivor signature covers the session id, round and sorted survivor list.
"""

from __future__ import annotations

import hashlib
import struct
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray

from crypto.hazmat.primitives import KEY_SIZE, derive, encode_fields, expand_mask, hkdf
from crypto.hazmat.shamir import SHARE_SIZE
from crypto.secagg.messages import RosterEntry
from crypto.secagg.params import RoundParameters

ADVERT_LABEL = "fedrank/secagg/advertise-keys"
SESSION_LABEL = "fedrank/secagg/session"
SURVIVORS_LABEL = "fedrank/secagg/survivors"
SHARE_KEY_LABEL = "fedrank/secagg/share-encryption"
SHARE_AD_LABEL = "fedrank/secagg/share-ad"
PAIRWISE_MASK_LABEL = "fedrank/secagg/pairwise-mask"
SELF_MASK_LABEL = "fedrank/secagg/self-mask"
_PAIR = struct.Struct(">QQQQ")


def advert_payload(round_number: int, member: int, cipher_key: bytes, mask_key: bytes) -> bytes:
    return encode_fields(ADVERT_LABEL, round_number, member, cipher_key, mask_key)


def session_id(parameters: RoundParameters, roster: tuple[RosterEntry, ...]) -> bytes:
    """SHA-256 over the parameters and all public keys, by member id, length-prefixed."""
    fields: list[bytes | str | int] = [
        SESSION_LABEL,
        parameters.round,
        parameters.threshold,
        parameters.vector_length,
        int(parameters.secagg_plus),
        parameters.degree or 0,
        parameters.neighbourhood_threshold or 0,
        len(roster),
    ]
    for entry in sorted(roster, key=lambda e: e.member):
        fields += [entry.member, entry.cipher_public_key, entry.mask_public_key]
    return hashlib.sha256(encode_fields(*fields)).digest()


def survivors_payload(session: bytes, round_number: int, survivors: tuple[int, ...]) -> bytes:
    return encode_fields(SURVIVORS_LABEL, session, round_number, *sorted(survivors))


def share_encryption_key(
    shared_secret: bytes, session: bytes, round_number: int, sender: int, recipient: int
) -> bytes:
    """One AEAD key per direction of a pair (so a key encrypts one message only)."""
    return derive(
        shared_secret, SHARE_KEY_LABEL, salt=session, context=(round_number, sender, recipient)
    )


def share_associated_data(sender: int, recipient: int, session: bytes, round_number: int) -> bytes:
    return encode_fields(SHARE_AD_LABEL, sender, recipient, session, round_number)


def share_plaintext(key_share: bytes, seed_share: bytes) -> bytes:
    """Fixed layout: the mask-key share, then the self-mask-seed share (36 bytes each)."""
    if len(key_share) != SHARE_SIZE or len(seed_share) != SHARE_SIZE:
        raise ValueError(f"shares are {SHARE_SIZE} bytes")
    return key_share + seed_share


def parse_share_plaintext(plaintext: bytes) -> tuple[bytes, bytes]:
    """Inverse of ``share_plaintext``: (key share, seed share); ``ValueError`` if malformed."""
    if len(plaintext) != 2 * SHARE_SIZE:
        raise ValueError("malformed share plaintext")
    return plaintext[:SHARE_SIZE], plaintext[SHARE_SIZE:]


@lru_cache(maxsize=64)
def _pairwise_info_prefix(round_number: int) -> bytes:
    return encode_fields(PAIRWISE_MASK_LABEL, round_number)


def pairwise_mask(
    shared_secret: bytes, session: bytes, round_number: int, a: int, b: int, length: int
) -> NDArray[np.uint32]:
    """PRG(s_ab): the mask members ``a`` and ``b`` agree on (symmetric in a, b).

    The seed is ``derive(s_ab, PAIRWISE_MASK_LABEL, salt=session, context=(round, low,
    high))``, written out here because the server computes it for every (dropped,
    survivor) pair.
    """
    low, high = min(a, b), max(a, b)
    info = _pairwise_info_prefix(round_number) + _PAIR.pack(8, low, 8, high)
    return expand_mask(hkdf(shared_secret, session, info, KEY_SIZE), length)


def self_mask(seed: bytes, session: bytes, round_number: int, length: int) -> NDArray[np.uint32]:
    """PRG(b_u): a member's self mask."""
    return expand_mask(derive(seed, SELF_MASK_LABEL, salt=session, context=(round_number,)), length)
