"""Shamir t-of-n over GF(2^31 - 1) (crypto.hazmat.shamir; Bonawitz et al. 2017, s. 3.1)."""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from crypto.hazmat import shamir


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 30),
    data=st.data(),
)
def test_any_threshold_subset_reconstructs(n: int, data: st.DataObject) -> None:
    threshold = data.draw(st.integers(1, n))
    xs = data.draw(st.lists(st.integers(1, shamir.PRIME - 1), min_size=n, max_size=n, unique=True))
    secrets = [os.urandom(32) for _ in range(data.draw(st.integers(1, 3)))]
    shares = shamir.split(secrets, threshold, xs)
    subset = data.draw(st.lists(st.integers(0, n - 1), min_size=threshold, max_size=n, unique=True))
    points = tuple(xs[i] for i in subset)
    assert shamir.reconstruct(points, shares[subset]) == secrets


def test_every_subset_of_size_t_reconstructs_small_case() -> None:
    secret = os.urandom(32)
    shares = shamir.split([secret], 3, [1, 2, 3, 4, 5])
    for subset in itertools.combinations(range(5), 3):
        points = tuple(i + 1 for i in subset)
        assert shamir.reconstruct(points, shares[list(subset)]) == [secret]


def test_fewer_than_threshold_shares_do_not_reconstruct() -> None:
    secret = os.urandom(32)
    shares = shamir.split([secret], 4, [1, 2, 3, 4, 5, 6])
    for subset in itertools.combinations(range(6), 3):
        points = tuple(i + 1 for i in subset)
        try:
            recovered = shamir.reconstruct(points, shares[list(subset)])
        except shamir.ReconstructionError:
            continue
        assert recovered != [secret]


def test_t_minus_one_shares_are_uniform_for_a_fixed_secret() -> None:
    # With threshold 3, any 2 shares of one fixed secret are uniform over GF(p)^2:
    # chi-square of their top 4 bits (16 bins) over many independent sharings.
    secret = bytes(32)
    samples = np.concatenate(
        [shamir.split([secret], 3, [1, 2, 3])[:2, 0, :].reshape(-1) for _ in range(2000)]
    )
    counts = np.bincount(samples >> 27, minlength=16)
    assert stats.chisquare(counts).pvalue > 1e-4


def test_lagrange_coefficients_are_cached_and_sum_to_one() -> None:
    points = (3, 9, 12, 40)
    first = shamir.lagrange_at_zero(points)
    assert shamir.lagrange_at_zero(points) is first
    # f = 1 (constant polynomial) has f(0) = sum of coefficients
    assert int(first.sum()) % shamir.PRIME == 1


def test_share_encoding_round_trips_and_rejects_garbage() -> None:
    share = shamir.split([os.urandom(32)], 2, [1, 2])[0, 0]
    assert np.array_equal(shamir.decode_share(shamir.encode_share(share)), share)
    with pytest.raises(ValueError):
        shamir.decode_share(b"\xff" * shamir.SHARE_SIZE)
    with pytest.raises(ValueError):
        shamir.decode_share(b"\x00" * 5)


def test_split_refuses_bad_points_and_thresholds() -> None:
    with pytest.raises(ValueError):
        shamir.split([bytes(32)], 2, [1, 1, 2])
    with pytest.raises(ValueError):
        shamir.split([bytes(32)], 2, [0, 1])
    with pytest.raises(ValueError):
        shamir.split([bytes(32)], 4, [1, 2, 3])


def test_random_field_elements_stay_in_field_even_when_source_hits_p() -> None:
    stream = iter([b"\xff\xff\xff\x7f" * 4, b"\x05\x00\x00\x00" * 4])
    values = shamir.random_field_elements(4, lambda n: next(stream)[:n])
    assert values.tolist() == [5, 5, 5, 5]
