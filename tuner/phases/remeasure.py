"""The re-measure: the fastest feasible configs and the baseline, each timed alone on its GPU several times,
so the answer rests on medians and spreads of exclusive timed windows, not on one brief screen. Their
compiles overlap each other (the caches are warm by now), but a timed window waits until no run on its GPU
is compiling: a launch-bound config loses speed to compiles on the CPUs it launches from.

Load from outside the search must not pick the answer: the repeats go round robin over the configs and the
baseline (runner.round_robin), so a burst lands on all of them alike, and a window that was contended
(TrialRow.contended) is timed again, up to as many extra runs as the config was asked for. What stays
contended after that is left to selection, which crowns no winner on it (select.refuse_untrusted)."""

from __future__ import annotations

from collections.abc import Sequence

from trainables.spec import TrialSpec
from tuner.context import SearchContext
from tuner.recipe import as_run_here, in_reach, row_ids
from tuner.records import BASELINE_ID, TrialRow
from tuner.runs.pool import RunPool
from tuner.runs.request import Placement, Role, RunRequest

# steps one re-measure run of each finalist trains under torch.profiler after its timed window
# (trainables/profile.py): a fraction of its timed steps, enough for each op's share
PROFILE_STEPS = 10


def run(ctx: SearchContext, screen: list[TrialRow], planned_s: float | None = None) -> list[TrialRow]:
    """`planned_s`: the search's estimate of this phase (eta.py), for its progress lines."""
    feasible = [t for t in screen if t.feasible and t.status == "ok"]
    feasible.sort(key=lambda t: -(t.tokens_per_s or 0))
    finalists: list[tuple[str, dict]] = [(BASELINE_ID, {})]
    cases, peaks = [ctx.short_run({})], [None]  # the baseline is not screened (its twin is)
    for t in feasible:  # distinct configs only
        case = ctx.short_run(t.config)
        if case not in cases and len(finalists) <= ctx.cfg.search.remeasure_top:
            finalists.append((t.id, t.config))
            cases.append(case)
            peaks.append(t.peak_mem_mb)
    recipe = _recipe_finalist(ctx, feasible)  # beside the top, where the screen cannot tell them apart
    if recipe is not None and ctx.short_run(recipe.config) not in cases:
        finalists.append((recipe.id, recipe.config))
        cases.append(ctx.short_run(recipe.config))
        peaks.append(recipe.peak_mem_mb)
    base_runs, runs = ctx.cfg.search.remeasure_runs(confirming=bool(ctx.state.data.get("remembered")))
    wanted = [base_runs] + [runs] * (len(cases) - 1)
    specs, asked, peaks = profiled_once(finalists, cases, wanted, peaks)
    rows = measure(ctx, specs, asked, ctx.placement.remeasure(asked, peaks), planned_s)
    return [row.speed_only() for row in rows]


def _recipe_finalist(ctx: SearchContext, feasible: list[TrialRow]) -> TrialRow | None:
    """The usual recipe's screen run, when it passed the loss check and its screen figure is in reach of the
    fastest feasible one's (tuner/recipe.py): the answer is then picked against it on exclusive runs."""
    ids = row_ids(feasible, as_run_here(ctx.cfg.search, ctx.base, ctx.hw.model_dump()), ctx.base)
    mine = next((t for t in feasible if t.id in ids), None)
    top = feasible[0].tokens_per_s if feasible else None
    return mine if mine is not None and in_reach(mine.tokens_per_s, top) else None


def profiled_once(
    finalists: list[tuple[str, dict]], cases: list[dict], wanted: list[int], peaks: list[float | None]
) -> tuple[list[TrialSpec], list[int], list[float | None]]:
    """Each finalist's runs as two cases: one run that profiles its steps after its timed window (the
    report's profile line) and the rest that do not. A profile holds its GPU's gate while it runs, so
    profiling every repeat would queue every other window behind it (15 profiles in the default search's
    re-measure). Both cases carry the finalist's label, so its figures are still all its runs'. The
    baseline is profiled only when it is the only finalist (so the answer): the profile line is the
    answer's, and the eager baseline's profile held its GPU's gate for 30 s while its other windows waited
    (one H200, docs/benchmarks.md)."""
    specs, asked, sized = [], [], []
    for (finalist, knobs), case, runs, peak in zip(finalists, cases, wanted, peaks, strict=True):
        profiled = 0 if finalist == BASELINE_ID and len(finalists) > 1 else 1
        if profiled:
            specs.append(
                TrialSpec.of({**case, "profile_steps": PROFILE_STEPS}, finalist=finalist, knobs=knobs)
            )
            asked.append(1)
            sized.append(peak)
        if runs > profiled:
            specs.append(TrialSpec.of(case, finalist=finalist, knobs=knobs))
            asked.append(runs - profiled)
            sized.append(peak)
    return specs, asked, sized


def measure(
    ctx: SearchContext,
    cases: list[TrialSpec],
    asked: Sequence[int],
    placement: Placement,
    planned_s: float | None = None,
) -> list[TrialRow]:
    """Every case timed `asked[i]` times in uncontended windows where that can be had: contended windows
    are timed again (bounded by `more_runs`); the counts follow from the ledger, so --resume goes on.
    `planned_s` is the estimate of the first pass (the windows timed again are not in it)."""
    counts, pool = list(asked), RunPool(ctx)  # one pool: a row joined once keeps its join
    requests = [RunRequest(case, Role.REMEASURE) for case in cases]
    while True:
        # contention is known once joined: the pool's rows come back joined
        rows = pool.cases("remeasure", requests, placement, repeats=counts, planned_s=planned_s)
        planned_s = None
        wanted = more_runs(rows, asked)
        if all(w <= c for w, c in zip(wanted, counts, strict=True)):
            return rows
        again = sum(w - c for w, c in zip(wanted, counts, strict=True) if w > c)
        ctx.notice(
            f"remeasure: {again} contended or failed run{'s' if again != 1 else ''} timed again "
            "(each config at most twice its repeats)"
        )
        counts = [max(w, c) for w, c in zip(wanted, counts, strict=True)]


def more_runs(rows: list[TrialRow], asked: Sequence[int]) -> list[int]:
    """How many runs each case needs so that `asked[i]` of them timed an uncontended window, at most
    2 x asked[i]. A run that timed nothing (its process died, an error) is run again too: on one H200 of
    two, 7 of the 100M search's 9 re-measure runs died at once 34 s in, the baseline's three among them,
    and without a rerun the answer goes out with no baseline speed and no ratio."""
    out = []
    for i, want in enumerate(asked):
        mine = [r for r in rows if r.case == i]
        clean = sum(1 for r in mine if r.status == "ok" and not r.contended)
        out.append(min(2 * want, len(mine) + max(0, want - clean)))
    return out
