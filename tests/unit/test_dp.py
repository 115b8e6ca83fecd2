"""Statistical and calibration checks of the vote DP mechanisms (crypto/dp.py).

Every statistical test uses a fixed-seed ChaCha20 source and rejects only at p < 1e-6
(or |z| > 5.3), so a correct implementation essentially never flakes while a wrong
probability or variance is caught.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from crypto.dp import (
    SYSTEM_RANDOM,
    Neighbouring,
    SeededRandomSource,
    calibrate_skellam,
    debias_sum,
    decode_from_ring,
    encode_for_ring,
    expected_scale,
    keep_probability,
    randomized_response,
    sample_poisson,
    skellam_epsilon,
    skellam_noise,
    skellam_tail_bound,
    vote_sensitivity,
    wrap_probability_bound,
)

STRICT_P = 1e-6
STRICT_Z = 5.3


def _assert_fits(observed: np.ndarray, expected_probabilities: np.ndarray) -> None:
    expected = expected_probabilities / expected_probabilities.sum() * observed.sum()
    assert stats.chisquare(observed, expected).pvalue > STRICT_P


def _poisson_histogram(samples: list[int], mean: float) -> tuple[np.ndarray, np.ndarray]:
    """Observed counts and model probabilities, tail pooled so each bin expects >= 20."""
    top = int(stats.poisson.ppf(1 - 20 / len(samples), mean))
    values = np.asarray(samples)
    observed = np.array([np.sum(values == k) for k in range(top)] + [np.sum(values >= top)])
    model = np.append(stats.poisson.pmf(np.arange(top), mean), stats.poisson.sf(top - 1, mean))
    return observed, model


def test_seeded_source_is_reproducible_and_seed_dependent() -> None:
    def draws(seed: int) -> list[int]:
        source = SeededRandomSource(seed)
        return [source.randbelow(1 << 40) for _ in range(20)] + [source.random_bits(70)]

    assert draws(7) == draws(7)
    assert draws(7) != draws(8)
    assert all(0 <= x < 1 << 40 for x in draws(9)[:-1])


@pytest.mark.parametrize("source_name", ["seeded", "system"])
def test_randbelow_is_uniform(source_name: str) -> None:
    source = SeededRandomSource(b"uniform") if source_name == "seeded" else SYSTEM_RANDOM
    draws = np.array([source.randbelow(6) for _ in range(30_000)])
    assert draws.min() == 0 and draws.max() == 5
    _assert_fits(np.bincount(draws, minlength=6), np.ones(6))
    bits = [source.random_bits(3) for _ in range(8_000)]
    _assert_fits(np.bincount(bits, minlength=8), np.ones(8))


@pytest.mark.parametrize("epsilon", [0.0, 0.5, 2.0])
@pytest.mark.parametrize("value", [-1, 0, 1])
def test_randomized_response_keeps_the_documented_probabilities(epsilon: float, value: int) -> None:
    trials = 20_000
    source = SeededRandomSource(f"rr-{epsilon}-{value}")
    out = randomized_response(np.full(trials, value), epsilon, source)
    kept = int(np.sum(out == value))
    documented = math.exp(epsilon) / (math.exp(epsilon) + 2)
    assert stats.binomtest(kept, trials, documented).pvalue > STRICT_P
    others = [v for v in (-1, 0, 1) if v != value]
    counts = np.array([np.sum(out == other) for other in others])
    assert counts.sum() == trials - kept
    _assert_fits(counts, np.ones(2))


def test_keep_probability_and_scale_formulas() -> None:
    for epsilon in (0.0, 0.1, 1.0, 5.0):
        e = math.exp(epsilon)
        assert keep_probability(epsilon) == pytest.approx(e / (e + 2), rel=1e-14)
        assert expected_scale(epsilon) == pytest.approx((e - 1) / (e + 2), rel=1e-12, abs=1e-15)
    assert keep_probability(0.0) == pytest.approx(1 / 3)
    with pytest.raises(ValueError):
        keep_probability(-0.1)


def test_randomized_response_mean_is_scaled_vote_and_debiasing_recovers_the_sum() -> None:
    epsilon, members = 1.0, 3_000
    votes = np.array([1, -1, 0, 1, 1])
    source = SeededRandomSource(b"debias")
    noisy_sum = np.sum(
        [randomized_response(votes, epsilon, source) for _ in range(members)], axis=0
    )
    estimate = debias_sum(noisy_sum, epsilon)
    # Var of one randomized coordinate is E[x^2] - (c v)^2, with E[x^2] = 2q (v = 0) or p + q.
    p, q = keep_probability(epsilon), (1 - keep_probability(epsilon)) / 2
    c = expected_scale(epsilon)
    second_moment = np.where(votes == 0, 2 * q, p + q)
    sd_of_estimate = np.sqrt(members * (second_moment - (c * votes) ** 2)) / c
    z = (estimate - members * votes) / sd_of_estimate
    assert np.all(np.abs(z) < STRICT_Z)
    assert np.all(np.sign(noisy_sum[votes != 0]) == votes[votes != 0])


def test_randomized_response_rejects_non_votes() -> None:
    with pytest.raises(ValueError):
        randomized_response([0, 2, 1], 1.0)
    with pytest.raises(ValueError):
        randomized_response(np.zeros((2, 2), dtype=np.int64), 1.0)
    with pytest.raises(ValueError):
        debias_sum([3.0], 0.0)


@pytest.mark.parametrize("mean", [Fraction(3, 10), Fraction(1, 2), 2.75, 9])
def test_exact_poisson_sampler_fits_the_poisson_law(mean: Fraction | float | int) -> None:
    source = SeededRandomSource(f"poisson-{mean}")
    samples = [sample_poisson(mean, source) for _ in range(6_000)]
    observed, model = _poisson_histogram(samples, float(mean))
    _assert_fits(observed, model)
    z = (np.mean(samples) - float(mean)) / math.sqrt(float(mean) / len(samples))
    assert abs(z) < STRICT_Z


def test_poisson_of_zero_mean_is_zero_and_negative_mean_is_rejected() -> None:
    assert sample_poisson(0, SeededRandomSource(1)) == 0
    with pytest.raises(ValueError):
        sample_poisson(-1.0)


@pytest.mark.parametrize("variance", [1.0, 6.5])
def test_skellam_noise_has_mean_zero_and_the_documented_variance(variance: float) -> None:
    count = 15_000
    noise = skellam_noise(count, variance, SeededRandomSource(f"skellam-{variance}"))
    assert noise.dtype == np.int64 and noise.shape == (count,)
    mean_z = noise.mean() / math.sqrt(variance / count)
    assert abs(mean_z) < STRICT_Z
    # Skellam cumulants: k2 = k4 = variance, so Var(sample variance) ~ (v + 2 v^2) / n.
    variance_z = (noise.var(ddof=1) - variance) / math.sqrt((variance + 2 * variance**2) / count)
    assert abs(variance_z) < STRICT_Z
    reach = int(6 * math.sqrt(variance)) + 2
    support = np.arange(-reach, reach + 1)
    observed = np.array([np.sum(noise == k) for k in support])
    model = stats.skellam.pmf(support, variance / 2, variance / 2)
    keep = model * count >= 20
    pooled_observed = np.append(observed[keep], count - observed[keep].sum())
    pooled_model = np.append(model[keep], 1 - model[keep].sum())
    _assert_fits(pooled_observed, pooled_model)


def test_sum_of_member_noise_has_the_summed_variance() -> None:
    members, per_member, coordinates = 40, 0.75, 600
    source = SeededRandomSource(b"sum")
    total = np.sum([skellam_noise(coordinates, per_member, source) for _ in range(members)], axis=0)
    variance = members * per_member
    z = (total.var(ddof=1) - variance) / math.sqrt((variance + 2 * variance**2) / coordinates)
    assert abs(z) < STRICT_Z


def test_vote_sensitivity_matches_enumeration() -> None:
    dimension = 3
    votes = [np.array(v) for v in itertools.product((-1, 0, 1), repeat=dimension)]
    replace = vote_sensitivity(dimension, Neighbouring.REPLACE_ONE)
    assert replace.l1 == max(np.abs(x - y).sum() for x in votes for y in votes)
    assert replace.l2 == pytest.approx(max(np.linalg.norm(x - y) for x in votes for y in votes))
    add_remove = vote_sensitivity(dimension, Neighbouring.ADD_REMOVE_ONE)
    assert add_remove.l1 == max(np.abs(x).sum() for x in votes)
    assert add_remove.l2 == pytest.approx(max(np.linalg.norm(x) for x in votes))


def test_calibration_meets_the_target_tightly() -> None:
    sensitivity = vote_sensitivity(22)
    for epsilon, rounds in ((1.0, 1), (4.0, 30)):
        per_member = calibrate_skellam(
            epsilon, 1e-6, sensitivity.l1, sensitivity.l2, expected_survivors=200, rounds=rounds
        )
        total = per_member * 200
        achieved = skellam_epsilon(total, 1e-6, sensitivity.l1, sensitivity.l2, rounds)
        assert achieved <= epsilon
        less_noise = skellam_epsilon(total * 0.99, 1e-6, sensitivity.l1, sensitivity.l2, rounds)
        assert less_noise > epsilon


def test_calibration_is_monotone() -> None:
    s = vote_sensitivity(22)
    by_epsilon = [calibrate_skellam(e, 1e-6, s.l1, s.l2, 300) for e in (0.25, 0.5, 1.0, 2.0, 8.0)]
    assert by_epsilon == sorted(by_epsilon, reverse=True)
    by_survivors = [calibrate_skellam(1.0, 1e-6, s.l1, s.l2, n) for n in (50, 100, 400, 2000)]
    assert by_survivors == sorted(by_survivors, reverse=True)
    by_rounds = [calibrate_skellam(1.0, 1e-6, s.l1, s.l2, 300, rounds=t) for t in (1, 5, 50)]
    assert by_rounds == sorted(by_rounds)
    by_delta = [calibrate_skellam(1.0, d, s.l1, s.l2, 300) for d in (1e-9, 1e-6, 1e-3)]
    assert by_delta == sorted(by_delta, reverse=True)


def test_calibration_rejects_bad_targets() -> None:
    with pytest.raises(ValueError):
        calibrate_skellam(0.0, 1e-6, 1.0, 1.0, 10)
    with pytest.raises(ValueError):
        calibrate_skellam(1.0, 1e-6, 1.0, 1.0, 0)


@pytest.mark.parametrize("variance", [2.0, 30.0, 500.0])
def test_tail_bound_dominates_the_exact_skellam_tail(variance: float) -> None:
    for sds in (1.0, 3.0, 8.0):
        threshold = math.ceil(sds * math.sqrt(variance))
        exact = 2 * stats.skellam.sf(threshold - 1, variance / 2, variance / 2)
        bound = skellam_tail_bound(variance, threshold)
        assert exact <= bound <= 1.0
        if sds == 8.0:
            assert bound < 1e-8


def test_wrap_risk_is_negligible_for_realistic_rounds_and_certain_without_margin() -> None:
    s = vote_sensitivity(22)
    total = 1000 * calibrate_skellam(0.1, 1e-9, s.l1, s.l2, 1000, rounds=1000)
    assert wrap_probability_bound(total, max_abs_vote_sum=5000, dimension=27) < 1e-30
    assert wrap_probability_bound(total, max_abs_vote_sum=(1 << 31), dimension=27) == 1.0


def test_noised_votes_survive_the_trip_through_z_2_32() -> None:
    source = SeededRandomSource(b"ring")
    members = [np.array([1, -1, 0, 1]) + skellam_noise(4, 30.0, source) for _ in range(50)]
    ring_total = np.zeros(4, dtype=np.uint64)
    for contribution in members:
        encoded = encode_for_ring(contribution)
        assert encoded.dtype == np.uint32
        ring_total = (ring_total + encoded) % (1 << 32)
    assert decode_from_ring(ring_total).tolist() == np.sum(members, axis=0).tolist()
    extremes = [-(1 << 31), -1, 0, (1 << 31) - 1]
    assert decode_from_ring(encode_for_ring(extremes)).tolist() == extremes
