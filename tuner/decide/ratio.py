"""Where one run of the winner and one of the baseline, outside the search, should put their speed ratio.

A user checks the search by training best.yaml and the baseline once each. On a GPU the launch-bound
baseline varies ~8% from one process to the next (docs/benchmarks.md), so that single pair can land well
away from the ratio of the search's medians, and the min–max of three repeats is no yardstick: a fourth
run falls outside the range of three half the time. What the report gives instead is a 95% prediction
interval for that one pair, on the log scale (speeds are positive and vary by a factor): centred on the
search's speed-up, half-width t * sqrt(s_a^2 (1 + 1/n_a) + s_b^2 (1 + 1/n_b)) with each config's own spread
of its re-measure runs and Welch's degrees of freedom, rounded down (wider, never narrower).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

# Student's t, 97.5th percentile (two-sided 95%), by degrees of freedom; past the table, the normal's.
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
         10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110,
         18: 2.101, 19: 2.093, 20: 2.086, 25: 2.060, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980}  # fmt: skip
Z_975 = 1.960
# Runs of each config a range needs: with two, each spread rests on one degree of freedom and the range
# spans orders of magnitude (0.3x-16.6x, issue 23); with three or more it says something. The default
# search.repeats is 3 (baseline_repeats 6 in configs/default.yaml).
MIN_RUNS = 3


def t_975(df: float) -> float:
    """The t quantile at `df` degrees of freedom, read at the table's nearest df at or below it."""
    below = [k for k in T_975 if k <= math.floor(df)]
    if not below:
        raise ValueError(f"t_975 needs at least 1 degree of freedom, got {df}")
    return Z_975 if df > max(T_975) * 2 else T_975[max(below)]


def one_run_ratio_range(
    numerator: Sequence[float], denominator: Sequence[float], center: float
) -> tuple[float, float] | None:
    """95% prediction interval for one run of each config's tok/s ratio around `center` (the search's
    speed-up); None with fewer than MIN_RUNS positive runs of either, or no spread at all to go on."""
    logs = [[math.log(v) for v in runs if v and v > 0] for runs in (numerator, denominator)]
    if any(len(xs) < MIN_RUNS for xs in logs) or center <= 0:
        return None
    terms = [statistics.variance(xs) * (1 + 1 / len(xs)) for xs in logs]
    if sum(terms) == 0:
        return None
    df = sum(terms) ** 2 / sum(term**2 / (len(xs) - 1) for term, xs in zip(terms, logs, strict=True))
    half = t_975(df) * math.sqrt(sum(terms))
    return center * math.exp(-half), center * math.exp(half)


def too_few_runs(numerator: Sequence[float], denominator: Sequence[float]) -> str | None:
    """Why there is no range, when it is the number of runs: the line the report prints instead."""
    counts = [sum(1 for v in runs if v and v > 0) for runs in (numerator, denominator)]
    if min(counts) >= MIN_RUNS:
        return None
    return (
        f"no range for one run of each outside the search: {counts[0]} run(s) of it and {counts[1]} of the "
        f"baseline, {MIN_RUNS} of each needed (search.repeats, search.baseline_repeats)"
    )
