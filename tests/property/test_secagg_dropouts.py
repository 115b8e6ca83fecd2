"""Correctness of secure aggregation under any dropout pattern (DESIGN.md s. 5; Bonawitz
et al. 2017, theorem 6.2 correctness; Bell et al. 2020 for SecAgg+).

The expected outcome is computed here from the dropout pattern alone (and, for SecAgg+,
the neighbour graph): with at least t members answering at every phase the output is
exactly the plain sum of the survivors' inputs mod 2^32; otherwise an abort naming the
first phase that fell short.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import numpy as np
from hypothesis import event, given, settings
from hypothesis import strategies as st

from crypto.secagg import (
    AbortReason,
    AggregateSum,
    NeighbourGraph,
    Outcome,
    Phase,
    RosterEntry,
    RoundAborted,
    RoundParameters,
    build_cohort,
    build_graph,
    drive,
    transcript,
)

PHASES = [
    Phase.ADVERTISE_KEYS,
    Phase.SHARE_KEYS,
    Phase.MASKED_INPUT_COLLECTION,
    Phase.CONSISTENCY_CHECK,
    Phase.UNMASKING,
]


@st.composite
def rounds(draw: st.DrawFn) -> tuple[int, int, int, dict[int, Phase]]:
    # most cohorts small (cost grows as n^2), some up to 60
    n = draw(st.one_of(st.integers(2, 12), st.integers(13, 60)))
    threshold = draw(st.integers(1, n))
    length = draw(st.integers(1, 40))
    dropped = draw(st.permutations(range(1, n + 1)))[: draw(st.integers(0, n))]
    phases = draw(st.lists(st.sampled_from(PHASES), min_size=len(dropped), max_size=len(dropped)))
    return n, threshold, length, dict(zip(dropped, phases, strict=True))


def answering(members: set[int], dropouts: dict[int, Phase], phase: Phase) -> set[int]:
    """Members of ``members`` still answering in ``phase``."""
    order = PHASES.index(phase)
    return {m for m in members if m not in dropouts or PHASES.index(dropouts[m]) > order}


def expected_outcome(
    n: int, threshold: int, dropouts: dict[int, Phase], graph: NeighbourGraph | None
) -> tuple[Phase, AbortReason] | set[int]:
    """The aborting phase and reason, or the survivors whose inputs are summed."""

    def closed(member: int) -> set[int]:
        return set(graph.neighbours(member)) | {member} if graph else set(range(1, n + 1))

    local_threshold = graph.threshold if graph else threshold
    advertised = answering(set(range(1, n + 1)), dropouts, Phase.ADVERTISE_KEYS)
    if len(advertised) < threshold:
        return Phase.ADVERTISE_KEYS, AbortReason.BELOW_THRESHOLD
    shared = answering(advertised, dropouts, Phase.SHARE_KEYS)
    if len(shared) < threshold:
        return Phase.SHARE_KEYS, AbortReason.BELOW_THRESHOLD
    asked = {m for m in shared if len(closed(m) & shared) >= local_threshold}
    survivors = answering(asked, dropouts, Phase.MASKED_INPUT_COLLECTION)
    if len(asked) < threshold or len(survivors) < threshold:
        return Phase.MASKED_INPUT_COLLECTION, AbortReason.BELOW_THRESHOLD
    signed = answering(survivors, dropouts, Phase.CONSISTENCY_CHECK)
    if len(signed) < threshold:
        return Phase.CONSISTENCY_CHECK, AbortReason.BELOW_THRESHOLD
    # a signer verifies its closed neighbourhood's signatures: below its threshold it
    # would refuse, so the server does not ask it
    eligible = {m for m in signed if len(closed(m) & signed) >= local_threshold}
    responders = answering(eligible, dropouts, Phase.UNMASKING)
    if len(responders) < threshold:
        return Phase.UNMASKING, AbortReason.BELOW_THRESHOLD
    needed = survivors | {w for w in shared - survivors if closed(w) & survivors - {w}}
    if any(len(closed(owner) & responders) < local_threshold for owner in needed):
        return Phase.UNMASKING, AbortReason.NEIGHBOURHOOD_BELOW_THRESHOLD
    return survivors


def run(
    n: int,
    threshold: int,
    length: int,
    dropouts: dict[int, Phase],
    secagg_plus: bool,
    degree: int | None = None,
) -> tuple[Outcome, dict[int, np.ndarray], NeighbourGraph | None]:
    rng = np.random.default_rng(n * 1000 + threshold)  # test data, not key material
    inputs = {m: rng.integers(0, 2**32, size=length, dtype=np.uint32) for m in range(1, n + 1)}
    parameters = RoundParameters(
        round=3,
        threshold=threshold,
        vector_length=length,
        secagg_plus=secagg_plus,
        degree=degree,
    )
    group = build_cohort(inputs, parameters)
    outcome = drive(group, dropouts)
    assert group.refusals == {}
    graph = None
    if secagg_plus and group.server.session_id:
        graph = build_graph(parameters, group.server.roster_members, group.server.session_id)
    return outcome, inputs, graph


def check(outcome: Outcome, inputs: dict[int, np.ndarray], expected: object) -> None:
    if isinstance(expected, set):
        assert isinstance(outcome, AggregateSum), outcome
        assert set(outcome.survivors) == expected
        plain = np.zeros_like(next(iter(inputs.values())), dtype=np.uint64)
        for member in expected:
            plain += inputs[member]
        assert np.array_equal(outcome.total, (plain % 2**32).astype(np.uint32))
    else:
        assert isinstance(outcome, RoundAborted), outcome
        assert (outcome.phase, outcome.reason) == expected


@settings(max_examples=15, deadline=None)
@given(rounds())
def test_full_graph_sum_is_exact_or_aborts_below_threshold(
    case: tuple[int, int, int, dict[int, Phase]],
) -> None:
    n, threshold, length, dropouts = case
    outcome, inputs, _ = run(n, threshold, length, dropouts, secagg_plus=False)
    expected = expected_outcome(n, threshold, dropouts, None)
    event("sum" if isinstance(expected, set) else f"abort {expected}")
    check(outcome, inputs, expected)


@settings(max_examples=15, deadline=None)
@given(rounds(), st.sampled_from([None, 2, 4]))
def test_secagg_plus_sum_is_exact_or_aborts_below_a_threshold(
    case: tuple[int, int, int, dict[int, Phase]], degree: int | None
) -> None:
    n, threshold, length, dropouts = case
    outcome, inputs, graph = run(n, threshold, length, dropouts, True, degree)
    expected = expected_outcome(n, threshold, dropouts, graph)
    event("sum" if isinstance(expected, set) else f"abort {expected}")
    check(outcome, inputs, expected)


def test_sixty_members_with_a_tenth_dropping_at_each_phase() -> None:
    n, threshold = 60, 40
    dropouts = {m: PHASES[m % 5] for m in range(1, n + 1) if m % 10 == 0}
    for secagg_plus in (False, True):
        outcome, inputs, graph = run(n, threshold, 22, dropouts, secagg_plus)
        expected = expected_outcome(n, threshold, dropouts, graph)
        assert isinstance(expected, set)
        check(outcome, inputs, expected)


def seeded_random(seed: int) -> Callable[[int], bytes]:
    """A reproducible byte source, so two cohorts get the same keys (test only)."""
    counter = 0

    def random(size: int) -> bytes:
        nonlocal counter
        counter += 1
        return hashlib.shake_256(f"{seed}/{counter}".encode()).digest(size)

    return random


def test_secagg_plus_aborts_when_one_neighbourhood_loses_its_threshold() -> None:
    n, threshold, degree, local = 30, 10, 4, 4
    parameters = RoundParameters(
        round=1,
        threshold=threshold,
        vector_length=5,
        secagg_plus=True,
        degree=degree,
        neighbourhood_threshold=local,
    )
    inputs = {m: np.full(5, m, dtype=np.uint32) for m in range(1, n + 1)}
    # first cohort only to learn the session id, hence the graph, of the second
    preview = build_cohort(inputs, parameters, random=seeded_random(7))
    adverts = [client.advertise(0.0) for client in preview.clients.values()]
    roster = tuple(
        RosterEntry(a.sender, a.cipher_public_key, a.mask_public_key, a.signature) for a in adverts
    )
    graph = build_graph(
        parameters, tuple(range(1, n + 1)), transcript.session_id(parameters, roster)
    )
    victim = 1
    # two of member 1's four neighbours fail to unmask: its closed neighbourhood keeps 3 < 4
    dropouts = {m: Phase.UNMASKING for m in sorted(graph.neighbours(victim))[:2]}
    group = build_cohort(inputs, parameters, random=seeded_random(7))
    outcome = drive(group, dropouts)
    assert group.server.session_id == transcript.session_id(parameters, roster)
    assert isinstance(outcome, RoundAborted)
    assert outcome.reason is AbortReason.NEIGHBOURHOOD_BELOW_THRESHOLD
    assert f"member {victim}: 3 shares of t={local}" in outcome.detail
    # and without those dropouts the same cohort sums exactly
    group = build_cohort(inputs, parameters, random=seeded_random(7))
    outcome = drive(group)
    assert isinstance(outcome, AggregateSum)
    assert outcome.total.tolist() == [n * (n + 1) // 2] * 5
