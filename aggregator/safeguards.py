"""The optimizer's safeguards: paper section 4.6 ("Safeguards"), DESIGN.md section 4.

Pure functions, no I/O. Three checks guard a Rprop step (protocol step 7, "Step and
publish"):

* :func:`vote_total_problem` — the poisoning bound. Honest participants each add a vote in
  {-1, 0, +1} per weight, so a vote total from ``n`` voters lies in ``[-n, n]``; anything
  else (or ``n < 1``, or a vector of the wrong length, or non-integers) aborts the step.
* :func:`violations` — every constraint a weight vector must keep: the spec's bounds
  (nonnegativity, first cutoff >= 1), integrality of integer prefs, ``spec.increasing``
  groups strictly increasing by ``spec.min_gap`` (bucket cutoffs) and
  ``spec.non_increasing`` groups not increasing (bucket weights by age, kind weights).
* :func:`project` — the nearest weight vector (least squares, group by group) to a
  proposed one that keeps every constraint *and* moves no weight more than its per-round
  maximum from the previous (feasible) weights. The max-step bound wins over closeness.

Why a feasible answer always exists: the previous weights ``p`` satisfy every constraint,
and ``p`` lies in its own step box ``[p - m, p + m]`` (``m >= 0``). So the set of vectors
satisfying the constraints inside the box is never empty. :func:`project` keeps that
guarantee constructively: every coordinate is first clipped to ``box ∩ bounds``, a set
that contains ``p``; each ordered group is then solved exactly (isotonic regression with
bounds, see :func:`_bounded_isotonic`; integer groups round that solution, which keeps
order and integer bounds), whose bounds still contain the transformed ``p``;
and if floating point or a mixed integer/real group ever leaves a violation, the
coordinates of the offending groups fall back to ``p``, which is feasible.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from frecency.spec import ModelSpec

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

#: slack for float comparisons of real-valued weights (integers compare exactly)
TOLERANCE = 1e-9


def vote_total_problem(
    spec: ModelSpec, vote_total: Sequence[int] | IntArray, voters: int, slack: int = 0
) -> str | None:
    """Why ``vote_total`` from ``voters`` participants cannot come from honest votes, or
    ``None`` when it can. The reason names the exact coordinate and value.

    ``slack`` widens the bound to ``[-(n + slack), n + slack]`` for a sum that carries
    central-DP noise (a high-probability bound on the noise); 0 is the exact bound.
    """
    if isinstance(voters, bool) or not isinstance(voters, int | np.integer):
        return f"voters must be an integer, got {voters!r}"
    if voters < 1:
        return f"voters = {voters}: a step needs at least 1 voter"
    if slack < 0:
        return f"slack = {slack}: must be nonnegative"
    limit = int(voters) + int(slack)
    totals = np.asarray(vote_total)
    if totals.ndim != 1 or totals.shape[0] != spec.dimension:
        return (
            f"vote total has shape {totals.shape}, expected ({spec.dimension},) "
            f"for spec {spec.name}"
        )
    if totals.dtype.kind not in "iu":
        if totals.dtype.kind != "f":
            return f"vote total has dtype {totals.dtype}, expected integers"
        for k, value in enumerate(totals.tolist()):
            if not math.isfinite(value) or value != math.floor(value):
                return (
                    f"vote total for coordinate {k} ({spec.params[k].name}) is {value!r}, "
                    "not an integer"
                )
    for k, value in enumerate(totals.tolist()):
        if abs(value) > limit:
            return (
                f"vote total for coordinate {k} ({spec.params[k].name}) is {int(value)}, "
                f"outside [-{limit}, {limit}] for {voters} voters (poisoning bound)"
            )
    return None


def violations(
    spec: ModelSpec,
    weights: Sequence[float] | FloatArray,
    previous: Sequence[float] | FloatArray | None = None,
    max_move: Sequence[float] | FloatArray | None = None,
) -> tuple[str, ...]:
    """Every safeguard ``weights`` breaks, as readable strings (empty when none).

    With ``previous`` and ``max_move`` also checks the per-round step bound
    ``|weights - previous| <= max_move``.
    """
    w = np.asarray(weights, dtype=np.float64)
    problems: list[str] = []
    if w.shape != (spec.dimension,):
        return (f"weights have shape {w.shape}, expected ({spec.dimension},)",)
    for k, param in enumerate(spec.params):
        value = float(w[k])
        if not math.isfinite(value):
            problems.append(f"{param.name} = {value} is not finite")
            continue
        if value < param.lower - TOLERANCE:
            problems.append(f"{param.name} = {value} below its lower bound {param.lower}")
        if value > param.upper + TOLERANCE:
            problems.append(f"{param.name} = {value} above its upper bound {param.upper}")
        if param.integer and value != math.floor(value):
            problems.append(f"{param.name} = {value} is not an integer")
    for group in spec.increasing:
        for a, b in itertools.pairwise(group):
            if w[b] - w[a] < spec.min_gap - TOLERANCE:
                problems.append(
                    f"{spec.params[b].name} = {w[b]} is not at least {spec.min_gap} above "
                    f"{spec.params[a].name} = {w[a]}"
                )
    for group in spec.non_increasing:
        for a, b in itertools.pairwise(group):
            if w[b] > w[a] + TOLERANCE:
                problems.append(
                    f"{spec.params[b].name} = {w[b]} exceeds {spec.params[a].name} = {w[a]}"
                )
    if previous is not None and max_move is not None:
        p = np.asarray(previous, dtype=np.float64)
        m = np.asarray(max_move, dtype=np.float64)
        for k, param in enumerate(spec.params):
            moved = abs(float(w[k] - p[k]))
            if moved > m[k] + TOLERANCE * max(1.0, abs(float(p[k]))):
                problems.append(f"{param.name} moved {moved}, more than its max step {m[k]}")
    return tuple(problems)


def project(
    spec: ModelSpec,
    proposed: Sequence[float] | FloatArray,
    previous: Sequence[float] | FloatArray,
    max_move: Sequence[float] | FloatArray,
) -> FloatArray:
    """The weights closest to ``proposed`` that keep every safeguard of ``spec`` and move
    no coordinate more than ``max_move`` from ``previous``.

    ``previous`` must itself keep every safeguard (``ValueError`` otherwise): it is the
    witness that the answer exists. Integer prefs come out as integers.
    """
    p = np.asarray(previous, dtype=np.float64)
    x = np.asarray(proposed, dtype=np.float64)
    m = np.asarray(max_move, dtype=np.float64)
    d = spec.dimension
    if p.shape != (d,) or x.shape != (d,) or m.shape != (d,):
        raise ValueError(f"previous, proposed and max_move must all have shape ({d},)")
    if np.any(~np.isfinite(m)) or np.any(m < 0):
        raise ValueError("max_move must be finite and nonnegative")
    problems = violations(spec, p)
    if problems:
        raise ValueError("previous weights break the safeguards: " + "; ".join(problems))
    x = np.where(np.isfinite(x), x, p)

    integer = spec.integer_mask()
    low = np.maximum(spec.lower_bounds(), p - m)
    high = np.minimum(spec.upper_bounds(), p + m)
    # Integer prefs: the box shrinks to the integers in it; p is an integer inside it.
    low = np.where(integer, np.ceil(low - TOLERANCE), low)
    high = np.where(integer, np.floor(high + TOLERANCE), high)
    result = np.clip(x, low, high)
    result = np.where(integer, np.round(result), result)

    for group in spec.increasing:
        _project_group(spec, x, result, low, high, group, gap=spec.min_gap, increasing=True)
    for group in spec.non_increasing:
        _project_group(spec, x, result, low, high, group, gap=0.0, increasing=False)

    if violations(spec, result, p, m):
        _fall_back_to_previous(spec, result, p, m)
    return result + 0.0  # no negative zeros


def _project_group(
    spec: ModelSpec,
    proposed: FloatArray,
    weights: FloatArray,
    low: FloatArray,
    high: FloatArray,
    group: tuple[int, ...],
    *,
    gap: float,
    increasing: bool,
) -> None:
    """Solve one ordered group into ``weights``: the least-squares closest values to
    ``proposed`` that keep the group's order within
    ``[low, high]``. An increasing group with gap g becomes non-decreasing under
    ``y_i = x_i - i g``; a non-increasing group becomes non-decreasing under ``y = -x``."""
    index = np.asarray(group, dtype=np.int64)
    all_integer = bool(np.all(spec.integer_mask()[index]))
    if increasing and all_integer:
        gap = float(math.ceil(gap - TOLERANCE))  # integers >= g apart are >= ceil(g) apart
    offsets = np.arange(len(group), dtype=np.float64) * gap
    sign = 1.0 if increasing else -1.0
    target = sign * proposed[index] - offsets
    lo = np.where(sign > 0, low[index], -high[index]) - offsets
    hi = np.where(sign > 0, high[index], -low[index]) - offsets
    solved = _bounded_isotonic(target, lo, hi)
    if all_integer:
        # Rounding is monotone and the bounds are integers, so order and bounds survive.
        solved = np.round(solved)
    weights[index] = sign * (solved + offsets)


def _bounded_isotonic(target: FloatArray, low: FloatArray, high: FloatArray) -> FloatArray:
    """Least-squares non-decreasing fit to ``target`` with ``low <= y <= high``.

    A non-decreasing y with ``y_j >= low_j`` has ``y_i >= max(low_j, j <= i)``, and likewise
    for the upper bounds from the right, so tightening the bounds to those running extrema
    keeps the same feasible set and makes both bound sequences non-decreasing. Then pool
    adjacent violators with each block's value the minimiser of its summed convex losses,
    ``clip(mean, max low, min high)`` (PAVA is exact for separable convex losses). Two
    blocks are pooled only when the left value exceeds the right one, which implies
    ``low(last of right) <= right value < left value <= high(first of left)``: the pooled
    interval is never empty.
    """
    lo = np.maximum.accumulate(low)
    hi = np.minimum.accumulate(high[::-1])[::-1]
    if np.any(lo > hi):
        raise ValueError("ordered group has no feasible point in its bounds")
    sums: list[float] = []
    sizes: list[int] = []
    lows: list[float] = []
    highs: list[float] = []
    values: list[float] = []
    for value, block_low, block_high in zip(target.tolist(), lo.tolist(), hi.tolist(), strict=True):
        sums.append(float(value))
        sizes.append(1)
        lows.append(float(block_low))
        highs.append(float(block_high))
        values.append(min(max(float(value), block_low), block_high))
        while len(values) > 1 and values[-2] > values[-1]:
            sums[-2:] = [sums[-2] + sums[-1]]
            sizes[-2:] = [sizes[-2] + sizes[-1]]
            lows[-2:] = [max(lows[-2], lows[-1])]
            highs[-2:] = [min(highs[-2], highs[-1])]
            values[-2:] = [min(max(sums[-1] / sizes[-1], lows[-1]), highs[-1])]
    return np.repeat(np.asarray(values, dtype=np.float64), sizes)


def _fall_back_to_previous(
    spec: ModelSpec, weights: FloatArray, previous: FloatArray, max_move: FloatArray
) -> None:
    """Reset to ``previous`` every coordinate of every ordered group (and group linked to
    it through shared coordinates) still breaking a safeguard, and any lone coordinate out
    of its box. ``previous`` is feasible and constraints only link coordinates within
    groups, so the result is feasible."""
    groups = [tuple(g) for g in (*spec.increasing, *spec.non_increasing)]
    bad: set[int] = set()
    for k in range(spec.dimension):
        single = violations(
            _only(spec, k), weights[k : k + 1], previous[k : k + 1], max_move[k : k + 1]
        )
        if single:
            bad.add(k)
    for group in spec.increasing:
        if _group_broken(weights, group, spec.min_gap, increasing=True):
            bad.update(group)
    for group in spec.non_increasing:
        if _group_broken(weights, group, 0.0, increasing=False):
            bad.update(group)
    changed = True
    while changed:  # close over groups sharing a coordinate with a reset one
        changed = False
        for group in groups:
            if bad.intersection(group) and not bad.issuperset(group):
                bad.update(group)
                changed = True
    for k in bad:
        weights[k] = previous[k]


def _group_broken(
    weights: FloatArray, group: tuple[int, ...], gap: float, *, increasing: bool
) -> bool:
    values = weights[np.asarray(group, dtype=np.int64)]
    steps = np.diff(values)
    if increasing:
        return bool(np.any(steps < gap - TOLERANCE))
    return bool(np.any(steps > TOLERANCE))


def _only(spec: ModelSpec, k: int) -> ModelSpec:
    """A one-weight spec holding ``spec``'s k-th weight and none of its group orders."""
    return ModelSpec(name=spec.name, description="", params=(spec.params[k],))
