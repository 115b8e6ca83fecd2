"""Masks are uniform over Z_{2^32} and bound to their purpose, session, round and pair;
the SecAgg+ neighbour graph is k-regular, symmetric and agreed from the session id
(DESIGN.md s. 6; Bonawitz et al. 2017 s. 4; Bell et al. 2020 s. 3)."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from scipy import stats

from crypto.hazmat import primitives
from crypto.secagg import (
    AggregateSum,
    LocalProtocolError,
    MaskedInput,
    RoundParameters,
    build_cohort,
    build_graph,
    default_degree,
    drive,
    ring,
    run_in_process,
    transcript,
)
from crypto.secagg.params import (
    DESIGN_DROPOUT_RATE,
    FAILURE_BOUND,
    degree_for,
    logarithmic_degree,
    majority_threshold,
    neighbourhood_failure_probability,
)

SAMPLE = 1 << 18  # words per uniformity test


def assert_uniform_words(words: np.ndarray) -> None:
    """Chi-square over 256 bins of each byte lane of 32-bit words: uniform at 1e-4."""
    assert words.dtype == np.uint32
    for shift in (0, 8, 16, 24):
        counts = np.bincount((words >> shift) & 0xFF, minlength=256)
        assert stats.chisquare(counts).pvalue > 1e-4, f"byte lane {shift // 8}"


def test_pairwise_and_self_masks_are_uniform() -> None:
    session = os.urandom(32)
    secret = os.urandom(32)
    assert_uniform_words(transcript.pairwise_mask(secret, session, 1, 3, 9, SAMPLE))
    assert_uniform_words(transcript.self_mask(os.urandom(32), session, 1, SAMPLE))


def test_a_masked_input_is_uniform_whatever_the_input() -> None:
    # all-zero inputs: what the server sees of one member is its total mask
    length = SAMPLE // 4
    inputs = {m: np.zeros(length, dtype=np.uint32) for m in (1, 2, 3)}
    group = build_cohort(inputs, RoundParameters(round=0, threshold=2, vector_length=length))
    seen: list[MaskedInput] = []
    receive = group.server.receive

    def spy(message: object, now: float) -> object:
        if isinstance(message, MaskedInput):
            seen.append(message)
        return receive(message, now)  # type: ignore[arg-type]

    group.server.receive = spy  # type: ignore[assignment,method-assign]
    drive(group)
    assert len(seen) == 3
    for message in seen:
        assert_uniform_words(message.masked)


def test_pairwise_mask_is_symmetric_and_bound_to_session_round_and_pair() -> None:
    session, secret = os.urandom(32), os.urandom(32)
    mask = transcript.pairwise_mask(secret, session, 1, 3, 9, 16)
    assert np.array_equal(mask, transcript.pairwise_mask(secret, session, 1, 9, 3, 16))
    for other in [
        transcript.pairwise_mask(secret, os.urandom(32), 1, 3, 9, 16),
        transcript.pairwise_mask(secret, session, 2, 3, 9, 16),
        transcript.pairwise_mask(secret, session, 1, 3, 8, 16),
        transcript.self_mask(secret, session, 1, 16),
    ]:
        assert not np.array_equal(mask, other)


def test_share_keys_differ_by_direction() -> None:
    session, secret = os.urandom(32), os.urandom(32)
    forward = transcript.share_encryption_key(secret, session, 1, 3, 9)
    assert forward != transcript.share_encryption_key(secret, session, 1, 9, 3)
    assert len(forward) == primitives.KEY_SIZE


@pytest.mark.parametrize("members", [17, 40, 200])
def test_secagg_plus_graph_is_regular_symmetric_and_agreed(members: int) -> None:
    degree = logarithmic_degree(members)
    parameters = RoundParameters(
        round=0, threshold=members // 2, vector_length=1, secagg_plus=True, degree=degree
    )
    ids = tuple(range(5, 5 + members))
    session = os.urandom(32)
    graph = build_graph(parameters, ids, session)
    assert degree % 2 == 0 and degree < members - 1
    assert not graph.complete and graph.degree == degree
    for member in ids:
        neighbours = graph.neighbours(member)
        assert len(neighbours) == degree and member not in neighbours
        assert all(member in graph.neighbours(peer) for peer in neighbours)
        assert {p for p in ids if graph.are_neighbours(member, p)} == neighbours
        assert graph.share_holders(member) == tuple(sorted(neighbours | {member}))
    again = build_graph(parameters, ids, session)
    assert all(again.neighbours(m) == graph.neighbours(m) for m in ids)
    other = build_graph(parameters, ids, os.urandom(32))
    assert any(other.neighbours(m) != graph.neighbours(m) for m in ids)
    assert graph.threshold == majority_threshold(degree) == degree // 2 + 1


def test_graph_falls_back_to_complete_when_the_degree_covers_everyone() -> None:
    parameters = RoundParameters(round=0, threshold=3, vector_length=1, secagg_plus=True)
    graph = build_graph(parameters, (1, 2, 3, 4, 5), os.urandom(32))
    assert graph.complete and graph.threshold == 3
    assert graph.neighbours(2) == {1, 3, 4, 5} and graph.share_holders(4) == (1, 2, 3, 4, 5)
    assert graph.are_neighbours(1, 5) and not graph.are_neighbours(1, 1)
    assert not graph.are_neighbours(1, 6)


def test_complete_graph_of_a_thousand_is_implicit_and_small() -> None:
    parameters = RoundParameters(round=0, threshold=501, vector_length=1)
    ids = tuple(range(1, 1001))
    graph = build_graph(parameters, ids, os.urandom(32))
    # O(n) ids held, not n frozensets of n - 1: the members tuple and one frozenset
    assert graph.complete and graph.degree == 999
    assert len(graph.neighbours(500)) == 999 and 500 not in graph.neighbours(500)
    assert sys.getsizeof(graph.everyone) < 100_000


def test_logarithmic_degree_grows_as_twice_log2() -> None:
    assert [logarithmic_degree(n) for n in (2, 100, 1000, 10_000)] == [2, 14, 20, 28]


def test_default_degree_survives_the_design_dropout_rate_with_a_majority_threshold() -> None:
    for n in (50, 100, 300, 1000, 10_000):
        degree = default_degree(n)
        if degree >= n - 1:  # no sparser ring meets the bound: the complete graph
            sparser = degree_for(n)
            assert sparser >= n - 1
            continue
        assert degree % 2 == 0 and degree >= logarithmic_degree(n)
        failure = neighbourhood_failure_probability(
            n, degree, majority_threshold(degree), DESIGN_DROPOUT_RATE
        )
        assert failure <= FAILURE_BOUND
        smaller = degree - 2
        if smaller >= logarithmic_degree(n):
            assert (
                neighbourhood_failure_probability(
                    n, smaller, majority_threshold(smaller), DESIGN_DROPOUT_RATE
                )
                > FAILURE_BOUND
            )
    # 10 % dropouts need far fewer neighbours than 30 %
    assert degree_for(1000, 0.1) < degree_for(1000, 0.3) < 999


def test_failure_probability_matches_a_direct_binomial_tail() -> None:
    from scipy.stats import binom

    for degree, threshold, rate in ((14, 8, 0.3), (30, 16, 0.1), (206, 104, 0.3)):
        expected = 100 * binom.cdf(threshold - 1, degree + 1, 1 - rate)
        got = neighbourhood_failure_probability(100, degree, threshold, rate)
        assert got == pytest.approx(min(1.0, expected), rel=1e-9)


def test_parameters_and_inputs_are_validated() -> None:
    with pytest.raises(LocalProtocolError):
        RoundParameters(round=0, threshold=0, vector_length=1)
    with pytest.raises(LocalProtocolError):
        RoundParameters(round=0, threshold=1, vector_length=1, degree=1)
    with pytest.raises(LocalProtocolError):
        build_cohort({1: np.zeros(3, dtype=np.int64)}, RoundParameters(0, 1, 3))
    with pytest.raises(LocalProtocolError):
        build_cohort({0: np.zeros(3, dtype=np.uint32)}, RoundParameters(0, 1, 3))


def test_pairwise_mask_seed_is_the_labelled_derivation() -> None:
    session, secret = os.urandom(32), os.urandom(32)
    seed = primitives.derive(
        secret, transcript.PAIRWISE_MASK_LABEL, salt=session, context=(4, 3, 9)
    )
    expected = primitives.expand_mask(seed, 8)
    assert np.array_equal(transcript.pairwise_mask(secret, session, 4, 9, 3, 8), expected)


def test_signed_votes_and_fixed_point_metrics_sum_through_the_ring() -> None:
    votes = [np.array([-1, 0, 1, -1], dtype=np.int64), np.array([-1, 1, 1, 0], dtype=np.int64)]
    total = run_in_process([ring.to_ring(v) for v in votes], threshold=2)
    assert isinstance(total, AggregateSum)
    assert ring.from_ring(total.total).tolist() == [-2, 1, 2, -1]
    losses = [ring.to_fixed_point([0.25, -3.5], 1000), ring.to_fixed_point([1.125, 2.0], 1000)]
    summed = run_in_process(losses, threshold=2)
    assert isinstance(summed, AggregateSum)
    assert ring.from_fixed_point(summed.total, 1000).tolist() == [1.375, -1.5]
    with pytest.raises(ValueError):
        ring.to_ring([1 << 31])
