"""The default SecAgg+ parameters tolerate the design dropout rate (DESIGN.md s. 6;
Bell et al. 2020, s. 3; crypto/secagg/params.py: 30 % dropouts, majority neighbourhood
thresholds, failure probability at most 2^-20): rounds with 30 % of members dropping at
any phase finish with the exact sum of the survivors. Deterministic (derandomized)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from crypto.secagg import AggregateSum, Phase, RoundParameters, build_cohort, drive
from crypto.secagg.params import degree_for

PHASES = [
    Phase.ADVERTISE_KEYS,
    Phase.SHARE_KEYS,
    Phase.MASKED_INPUT_COLLECTION,
    Phase.CONSISTENCY_CHECK,
    Phase.UNMASKING,
]


@st.composite
def dropout_patterns(
    draw: st.DrawFn, low: int, high: int, rate: float
) -> tuple[int, dict[int, Phase]]:
    n = draw(st.integers(low, high))
    dropped = draw(st.permutations(range(1, n + 1)))[: round(rate * n)]
    phases = draw(st.lists(st.sampled_from(PHASES), min_size=len(dropped), max_size=len(dropped)))
    return n, dict(zip(dropped, phases, strict=True))


def run_and_check(n: int, dropouts: dict[int, Phase], parameters: RoundParameters) -> None:
    rng = np.random.default_rng(n)  # input values only
    inputs = {m: rng.integers(0, 2**32, size=22, dtype=np.uint32) for m in range(1, n + 1)}
    group = build_cohort(inputs, parameters)
    outcome = drive(group, dropouts)
    assert isinstance(outcome, AggregateSum), outcome
    assert group.refusals == {}
    # whoever sent a masked input is summed: members dropping at the consistency check or
    # at unmasking still count
    late = {Phase.CONSISTENCY_CHECK, Phase.UNMASKING}
    expected_survivors = {m for m in inputs if m not in dropouts or dropouts[m] in late}
    assert set(outcome.survivors) == expected_survivors
    plain = sum((inputs[m].astype(np.uint64) for m in expected_survivors), np.uint64(0))
    assert np.array_equal(outcome.total, (np.asarray(plain) % 2**32).astype(np.uint32))


@settings(max_examples=3, deadline=None, derandomize=True)
@given(dropout_patterns(50, 100, 0.3))
def test_default_secagg_plus_finishes_with_thirty_percent_dropouts(
    case: tuple[int, dict[int, Phase]],
) -> None:
    n, dropouts = case
    parameters = RoundParameters(round=1, threshold=n // 2 + 1, vector_length=22, secagg_plus=True)
    run_and_check(n, dropouts, parameters)


@settings(max_examples=3, deadline=None, derandomize=True)
@given(dropout_patterns(80, 120, 0.1))
def test_sparse_ring_sized_for_ten_percent_finishes_with_ten_percent_dropouts(
    case: tuple[int, dict[int, Phase]],
) -> None:
    n, dropouts = case
    degree = degree_for(n, 0.1)
    assert degree < n - 1  # a real ring, majority thresholds, not the complete graph
    parameters = RoundParameters(
        round=1, threshold=n // 2 + 1, vector_length=22, secagg_plus=True, degree=degree
    )
    run_and_check(n, dropouts, parameters)
