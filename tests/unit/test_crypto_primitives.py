"""Published vectors and misuse checks for crypto.hazmat.primitives (DESIGN.md s. 6)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from crypto.hazmat import primitives as p

H = bytes.fromhex


@pytest.mark.parametrize(
    ("scalar", "u", "expected"),
    [  # RFC 7748 section 5.2, single-iteration vectors
        (
            "a546e36bf0527c9d3b16154b82465edd62144c0ac1fc5a18506a2244ba449ac4",
            "e6db6867583030db3594c1a424b15f7c726624ec26b3353b10a903a6d0ab1c4c",
            "c3da55379de9c6908e94ea4df28d084f32eccf03491c71f754b4075577a28552",
        ),
        (
            "4b66e9d4d1b4673c5ad22691957d6af5c11b6421e0ea01d42ca4169e7918ba0d",
            "e5210f12786811d3f4b7959d0538ae2c31dbe7106fc03c3efc4cd549c715a493",
            "95cbde9476e8907d7aade45cb4b873f88b595a68799fa152e6f8f7647aac7957",
        ),
    ],
)
def test_x25519_rfc7748_section_5_2(scalar: str, u: str, expected: str) -> None:
    assert p.exchange(H(scalar), H(u)) == H(expected)


def test_x25519_rfc7748_section_6_1_diffie_hellman() -> None:
    alice = H("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a")
    bob = H("5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb")
    alice_public = p.public_agreement_key(alice)
    bob_public = p.public_agreement_key(bob)
    assert alice_public == H("8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a")
    assert bob_public == H("de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f")
    shared = H("4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742")
    assert p.exchange(alice, bob_public) == shared
    assert p.exchange(bob, alice_public) == shared


def test_x25519_refuses_low_order_point() -> None:
    with pytest.raises(ValueError):
        p.exchange(p.generate_agreement_key(), bytes(32))


@pytest.mark.parametrize(
    ("ikm", "salt", "info", "length", "okm"),
    [  # RFC 5869 appendix A.1-A.3 (SHA-256)
        (
            "0b" * 22,
            "000102030405060708090a0b0c",
            "f0f1f2f3f4f5f6f7f8f9",
            42,
            "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865",
        ),
        (
            bytes(range(0x00, 0x50)).hex(),
            bytes(range(0x60, 0xB0)).hex(),
            bytes(range(0xB0, 0x100)).hex(),
            82,
            "b11e398dc80327a1c8e7f78c596a49344f012eda2d4efad8a050cc4c19afa97c"
            "59045a99cac7827271cb41c65e590e09da3275600c2f09b8367793a9aca3db71"
            "cc30c58179ec3e87c14c01d5c1f3434f1d87",
        ),
        (
            "0b" * 22,
            "",
            "",
            42,
            "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8",
        ),
    ],
)
def test_hkdf_rfc5869_sha256(ikm: str, salt: str, info: str, length: int, okm: str) -> None:
    assert p.hkdf(H(ikm), H(salt), H(info), length) == H(okm)


def test_derive_is_hkdf_over_the_encoded_label_and_context() -> None:
    ikm = H("0b" * 22)
    salt = H("000102030405060708090a0b0c")
    derived = p.derive(ikm, "fedrank/test", salt=salt, context=(7, b"\x01"))
    assert derived == p.hkdf(ikm, salt, p.encode_fields("fedrank/test", 7, b"\x01"), 32)
    assert derived != p.derive(ikm, "fedrank/other", salt=salt, context=(7, b"\x01"))
    assert derived != p.derive(ikm, "fedrank/test", salt=salt, context=(8, b"\x01"))


def test_encode_fields_is_unambiguous() -> None:
    assert p.encode_fields(b"ab", b"c") != p.encode_fields(b"a", b"bc")
    assert p.encode_fields(b"") != p.encode_fields()


def test_expand_mask_is_the_chacha20_keystream_as_little_endian_words() -> None:
    seed = bytes(range(32))
    mask = p.expand_mask(seed, 1000)
    assert mask.dtype == np.uint32 and mask.shape == (1000,)
    assert np.array_equal(p.expand_mask(seed, 10), mask[:10])
    assert not np.array_equal(p.expand_mask(bytes(32), 10), mask[:10])


def test_expand_mask_rfc7539_zero_key_block_one() -> None:
    # RFC 7539 appendix A.1 test vector #2: key 0, nonce 0, block counter 1.
    second_block = H(
        "9f07e7be5551387a98ba977c732d080dcb0f29a048e3656912c6533e32ee7aed"
        "29b721769ce64e43d57133b074d839d531ed1f28510afb45ace10a1f4b794d6f"
    )
    expected = np.frombuffer(second_block, dtype="<u4")
    assert np.array_equal(p.expand_mask(bytes(32), 16), expected)
    assert p.chacha20_keystream(bytes(32), 64) == second_block


@pytest.mark.parametrize("length", [1, 15, 16, 17, 1023, 1024, 1025, 5000])
def test_expand_mask_fast_path_equals_the_plain_cipher(length: int) -> None:
    # short masks come off ChaCha20-Poly1305, long ones off ChaCha20: the same stream
    seed = os.urandom(32)
    assert p.expand_mask(seed, length).tobytes() == p.chacha20_keystream(seed, 4 * length)


@pytest.mark.parametrize("length", [1, 31, 32, 33, 64, 100, 8160])
@pytest.mark.parametrize("salt_size", [0, 13, 32, 100])
def test_hkdf_equals_the_cryptography_reference(length: int, salt_size: int) -> None:
    ikm, salt, info = os.urandom(32), os.urandom(salt_size), os.urandom(40)
    expected = p.reference_hkdf(ikm, salt or None, info, length)
    assert p.hkdf(ikm, salt or None, info, length) == expected
    assert p.hkdf(ikm, salt, info, length) == expected  # empty salt = no salt (RFC 5869)


def test_hkdf_refuses_lengths_outside_the_rfc_range() -> None:
    for length in (0, 8161):
        with pytest.raises(ValueError):
            p.hkdf(bytes(32), None, b"", length)


def test_single_use_aead_round_trip_no_nonce_sent_and_one_opaque_error() -> None:
    key = p.generate_agreement_key()
    ciphertext = p.encrypt_single_use(key, b"share" * 10, b"ad")
    assert len(ciphertext) == 50 + 16  # ciphertext and tag only
    assert p.decrypt_single_use(key, ciphertext, b"ad") == b"share" * 10
    tampered = bytearray(ciphertext)
    tampered[0] ^= 1
    for bad_key, bad_ciphertext, bad_ad in [
        (key, bytes(tampered), b"ad"),
        (key, ciphertext, b"other"),
        (bytes(32), ciphertext, b"ad"),
        (key, ciphertext[:15], b"ad"),
    ]:
        with pytest.raises(p.DecryptionError) as caught:
            p.decrypt_single_use(bad_key, bad_ciphertext, bad_ad)
        assert str(caught.value) == "decryption failed"


def test_aead_round_trip_and_one_opaque_error() -> None:
    key = p.generate_agreement_key()
    ciphertext = p.encrypt(key, b"share", b"ad")
    assert p.decrypt(key, ciphertext, b"ad") == b"share"
    tampered = bytearray(ciphertext)
    tampered[-1] ^= 1
    for bad_key, bad_ciphertext, bad_ad in [
        (key, bytes(tampered), b"ad"),
        (key, ciphertext, b"other"),
        (bytes(32), ciphertext, b"ad"),
        (key, ciphertext[:5], b"ad"),
    ]:
        with pytest.raises(p.DecryptionError) as caught:
            p.decrypt(bad_key, bad_ciphertext, bad_ad)
        assert str(caught.value) == "decryption failed"


def test_ed25519_rfc8032_test_1() -> None:
    secret = H("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
    public = H("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
    signature = H(
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e06522490155"
        "5fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
    )
    assert p.public_signing_key(secret) == public
    assert p.sign(secret, b"") == signature
    assert p.verify(public, signature, b"")
    assert not p.verify(public, signature, b"x")
    assert not p.verify(public, signature[:10], b"")
    assert not p.verify(b"short", signature, b"")
