"""Differential privacy for sign votes (DESIGN.md section 6, "DP, optional"; docs/privacy.md).

Two mechanisms, both applied by a participant to its vote in {-1, 0, +1}^d *before* masking
(protocol step 4, MaskedInput):

- Local DP: ``randomized_response`` keeps each coordinate with probability
  e^eps / (e^eps + 2), else replaces it by one of the two other values uniformly. Each
  coordinate is eps-LDP; the vector of d coordinates is (d * eps)-LDP (the RDP accountant
  gives a tighter composed figure). ``expected_scale`` is c in E[rr(v)] = c * v.
- Distributed central DP: each member adds symmetric Skellam noise (Poisson(v/2) -
  Poisson(v/2), variance v) to every coordinate. The sum of n members' noise is Skellam
  of variance n * v, so the secure sum carries the Skellam mechanism's guarantee
  (Agarwal, Kairouz, Liu 2021) as long as ``expected_survivors`` honest members add
  noise. ``calibrate_skellam`` finds v for a target (epsilon, delta) over ``rounds`` rounds.

Poisson variates are sampled *exactly* from uniform integers (no floating point):
Poisson(lambda) is a sum of Poisson(gamma) pieces with rational gamma <= 1/2; each piece
draws J = number of successes before the first failure of Bernoulli(gamma/1),
Bernoulli(gamma/2), ... (P[J = j] = gamma^j/j! (1 - gamma/(j+1)), the counter of
Canonne-Kamath-Steinke 2020's Bernoulli(exp(-gamma)) sampler), then accepts J with
probability (1 - gamma)(j+1)/(j+1-gamma), which leaves exactly gamma^j/j! i.e. Poisson(gamma)
(acceptance rate (1-gamma)e^gamma >= 0.82). Cost is about 6.5 uniform draws per unit of mean.

Randomness comes from a ``RandomSource``: the OS CSPRNG (``secrets``) by default, or a
ChaCha20 keystream from a seed (``SeededRandomSource``, reproducible runs and tests).
Pure computation, no I/O.
"""

from __future__ import annotations

import hashlib
import math
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from fractions import Fraction
from typing import Protocol

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from numpy.typing import NDArray

from crypto.accountant import DEFAULT_ORDERS, Conversion, skellam_rdp

IntArray = NDArray[np.int64]


class RandomSource(Protocol):
    """Uniform random integers from a cryptographically secure generator."""

    def randbelow(self, n: int) -> int:
        """A uniform integer in [0, n), n >= 1."""
        ...

    def random_bits(self, k: int) -> int:
        """A uniform integer in [0, 2^k)."""
        ...


class SystemRandomSource:
    """The OS CSPRNG via ``secrets``: the default for every real participant."""

    def randbelow(self, n: int) -> int:
        return secrets.randbelow(n)

    def random_bits(self, k: int) -> int:
        return secrets.randbits(k) if k > 0 else 0


class SeededRandomSource:
    """A ChaCha20 keystream keyed by SHA-256(seed): reproducible, for tests and simulations.

    Cryptographically strong but *deterministic*: anyone who knows the seed knows the
    noise, so a real participant must use ``SystemRandomSource``.
    """

    _CHUNK = 8192

    def __init__(self, seed: bytes | str | int) -> None:
        if isinstance(seed, int):
            seed = seed.to_bytes(16, "big", signed=True)
        elif isinstance(seed, str):
            seed = seed.encode()
        key = hashlib.sha256(b"fedrank/dp/seeded-source\x00" + seed).digest()
        self._stream = Cipher(algorithms.ChaCha20(key, bytes(16)), mode=None).encryptor()
        self._buffer = b""
        self._position = 0

    def _take(self, count: int) -> bytes:
        if self._position + count > len(self._buffer):
            fresh = self._stream.update(bytes(max(self._CHUNK, count)))
            self._buffer = self._buffer[self._position :] + fresh
            self._position = 0
        out = self._buffer[self._position : self._position + count]
        self._position += count
        return out

    def random_bits(self, k: int) -> int:
        if k <= 0:
            return 0
        value = int.from_bytes(self._take((k + 7) // 8), "little")
        return value & ((1 << k) - 1)

    def randbelow(self, n: int) -> int:
        if n <= 0:
            raise ValueError("randbelow needs n >= 1")
        bits = (n - 1).bit_length()
        while True:  # rejection sampling: exactly uniform
            value = self.random_bits(bits)
            if value < n:
                return value


SYSTEM_RANDOM: RandomSource = SystemRandomSource()


# --- local DP: randomized response -------------------------------------------------------

_PROBABILITY_BITS = 53


def keep_probability(epsilon_per_coordinate: float) -> float:
    """P[rr(v)_k = v_k] = e^eps / (e^eps + 2); each other value has 1 / (e^eps + 2)."""
    if not epsilon_per_coordinate >= 0:
        raise ValueError("epsilon_per_coordinate must be >= 0")
    return 1.0 / (1.0 + 2.0 * math.exp(-epsilon_per_coordinate))


def expected_scale(epsilon_per_coordinate: float) -> float:
    """c = (e^eps - 1) / (e^eps + 2), with E[rr(v)] = c * v for v in {-1, 0, 1}^d."""
    if not epsilon_per_coordinate >= 0:
        raise ValueError("epsilon_per_coordinate must be >= 0")
    return -math.expm1(-epsilon_per_coordinate) / (1.0 + 2.0 * math.exp(-epsilon_per_coordinate))


def randomized_response(
    votes: Sequence[int] | NDArray[np.integer],
    epsilon_per_coordinate: float,
    rng: RandomSource = SYSTEM_RANDOM,
) -> IntArray:
    """Ternary randomized response on every coordinate of a vote in {-1, 0, +1}^d.

    Each coordinate is ``epsilon_per_coordinate``-LDP; the whole vote is
    (d * epsilon_per_coordinate)-LDP per round (use ``randomized_response_rdp`` of the
    accountant for the composed RDP cost). The keep probability is realised to 53 bits.
    """
    values = np.asarray(votes, dtype=np.int64)
    if values.ndim != 1:
        raise ValueError("votes must be a 1-D vector")
    if np.any((values < -1) | (values > 1)):
        raise ValueError("votes must be in {-1, 0, +1}")
    threshold = round(keep_probability(epsilon_per_coordinate) * (1 << _PROBABILITY_BITS))
    out = values.copy()
    for k, value in enumerate(values.tolist()):
        if rng.random_bits(_PROBABILITY_BITS) >= threshold:
            others = [-1, 0, 1]
            others.remove(value)
            out[k] = others[rng.randbelow(2)]
    return out


def debias_sum(
    noisy_sum: Sequence[float] | NDArray[np.number], epsilon_per_coordinate: float
) -> NDArray[np.float64]:
    """Unbiased estimate of the true vote sum from a sum of randomized responses.

    The sign is unchanged (c > 0 for eps > 0), so the sign-only aggregator need not call this.
    """
    scale = expected_scale(epsilon_per_coordinate)
    if scale <= 0:
        raise ValueError("epsilon 0 destroys the signal: nothing to debias")
    return np.asarray(noisy_sum, dtype=np.float64) / scale


# --- distributed DP: Skellam noise -----------------------------------------------------


class Neighbouring(Enum):
    """Which pairs of vote totals must be indistinguishable (docs/privacy.md)."""

    REPLACE_ONE = "replace-one"  # one member's vote changes arbitrarily (the default)
    ADD_REMOVE_ONE = "add-remove-one"  # one member's vote is present or absent


@dataclass(frozen=True, slots=True)
class Sensitivity:
    """How far one privacy unit can move the vote total, in L1 and L2."""

    l1: float
    l2: float


def vote_sensitivity(
    dimension: int, relation: Neighbouring = Neighbouring.REPLACE_ONE
) -> Sensitivity:
    """Sensitivity of the sum of votes in {-1, 0, +1}^dimension under ``relation``."""
    if dimension < 1:
        raise ValueError("dimension must be >= 1")
    per_coordinate = 2.0 if relation is Neighbouring.REPLACE_ONE else 1.0
    return Sensitivity(l1=per_coordinate * dimension, l2=per_coordinate * math.sqrt(dimension))


def _bernoulli(numerator: int, denominator: int, rng: RandomSource) -> bool:
    return rng.randbelow(denominator) < numerator


def _poisson_at_most_half(gamma: Fraction, rng: RandomSource) -> int:
    """Exact Poisson(gamma), 0 <= gamma <= 1/2, by the rejection described in the module doc."""
    a, b = gamma.numerator, gamma.denominator
    if a == 0:
        return 0
    while True:
        j = 0
        while _bernoulli(a, b * (j + 1), rng):
            j += 1
        if _bernoulli((b - a) * (j + 1), (j + 1) * b - a, rng):
            return j


def sample_poisson(mean: Fraction | float | int, rng: RandomSource = SYSTEM_RANDOM) -> int:
    """An exact Poisson(mean) variate for a rational mean (a float is taken exactly)."""
    remaining = Fraction(mean)
    if remaining < 0:
        raise ValueError("Poisson mean must be >= 0")
    half = Fraction(1, 2)
    total = 0
    while remaining > 0:
        piece = min(remaining, half)
        total += _poisson_at_most_half(piece, rng)
        remaining -= piece
    return total


def skellam_noise(
    dimension: int, variance_per_member: float, rng: RandomSource = SYSTEM_RANDOM
) -> IntArray:
    """A vector of i.i.d. symmetric Skellam integers: Poisson(v/2) - Poisson(v/2), variance v.

    Mean 0, variance ``variance_per_member`` per coordinate; add it to the (integer) vote
    before masking, in Z (the masking then reduces mod 2^32).
    """
    if dimension < 0:
        raise ValueError("dimension must be >= 0")
    if not variance_per_member >= 0:
        raise ValueError("variance_per_member must be >= 0")
    half = Fraction(variance_per_member) / 2
    return np.array(
        [sample_poisson(half, rng) - sample_poisson(half, rng) for _ in range(dimension)],
        dtype=np.int64,
    )


def encode_for_ring(values: Sequence[int] | NDArray[np.integer]) -> NDArray[np.uint32]:
    """Signed integers (vote + noise) as elements of Z_{2^32}, the secure-aggregation input."""
    return (np.asarray(values, dtype=np.int64) % (1 << 32)).astype(np.uint32)


def decode_from_ring(total: Sequence[int] | NDArray[np.integer]) -> IntArray:
    """An unmasked sum in Z_{2^32} read back as a signed integer in [-2^31, 2^31)."""
    unsigned = np.asarray(total, dtype=np.int64) % (1 << 32)
    return np.where(unsigned >= 1 << 31, unsigned - (1 << 32), unsigned).astype(np.int64)


def skellam_epsilon(
    total_variance: float,
    delta: float,
    sensitivity_l1: float,
    sensitivity_l2: float,
    rounds: int = 1,
    conversion: Conversion = Conversion.BALLE_2020,
) -> float:
    """Central epsilon (at ``delta``) of ``rounds`` releases of a sum with Skellam noise."""
    curve = skellam_rdp(total_variance, sensitivity_l1, sensitivity_l2, DEFAULT_ORDERS)
    return curve.times(rounds).epsilon(delta, conversion)


def calibrate_skellam(
    epsilon: float,
    delta: float,
    sensitivity_l1: float,
    sensitivity_l2: float,
    expected_survivors: int,
    rounds: int = 1,
    conversion: Conversion = Conversion.BALLE_2020,
) -> float:
    """Per-member Skellam variance so the sum over ``expected_survivors`` meets (eps, delta).

    The guarantee covers ``rounds`` rounds composed (RDP). Pass as ``expected_survivors``
    a *lower bound* on honest survivors (e.g. the quorum t): fewer survivors means less
    total noise than calibrated. Returns the smallest total variance (to 1e-6 relative)
    meeting the target, divided by ``expected_survivors``.
    """
    if not epsilon > 0 or not 0 < delta < 1:
        raise ValueError("need epsilon > 0 and 0 < delta < 1")
    if expected_survivors < 1 or rounds < 1:
        raise ValueError("need expected_survivors >= 1 and rounds >= 1")
    if sensitivity_l1 <= 0 or sensitivity_l2 <= 0:
        raise ValueError("sensitivities must be > 0")

    def meets(total: float) -> bool:
        achieved = skellam_epsilon(total, delta, sensitivity_l1, sensitivity_l2, rounds, conversion)
        return achieved <= epsilon

    low, high = 1e-9, 1.0
    while not meets(high):
        low, high = high, high * 2.0
        if high > 1e30:
            raise ValueError("target unreachable on the order grid")
    while high / low > 1.0 + 1e-6:
        middle = math.sqrt(low * high)
        if meets(middle):
            high = middle
        else:
            low = middle
    return high / expected_survivors


def skellam_tail_bound(total_variance: float, threshold: float) -> float:
    """Chernoff bound on P[|X| >= threshold] for symmetric Skellam X of variance mu.

    E[e^{sX}] = exp(mu (cosh s - 1)); at s = asinh(t/mu) this gives
    P[|X| >= t] <= 2 exp(mu (sqrt(1 + (t/mu)^2) - 1) - t asinh(t/mu)).
    """
    if total_variance <= 0:
        return 0.0 if threshold > 0 else 1.0
    if threshold <= 0:
        return 1.0
    ratio = threshold / total_variance
    exponent = total_variance * (math.sqrt(1.0 + ratio * ratio) - 1.0) - threshold * math.asinh(
        ratio
    )
    return min(1.0, 2.0 * math.exp(exponent))


def wrap_probability_bound(
    total_variance: float, max_abs_vote_sum: int, dimension: int, modulus_bits: int = 32
) -> float:
    """Bound on P[some coordinate of vote sum + noise leaves the signed range of Z_{2^bits}].

    The aggregator reads the unmasked sum as a signed integer in [-2^(bits-1), 2^(bits-1));
    a wrap needs the noise to exceed 2^(bits-1) - 1 - ``max_abs_vote_sum`` in magnitude.
    """
    margin = (1 << (modulus_bits - 1)) - 1 - max_abs_vote_sum
    if margin <= 0:
        return 1.0
    return min(1.0, dimension * skellam_tail_bound(total_variance, margin))
