"""The re-measure: the fastest feasible configs and the baseline, each timed alone on its GPU several times,
so the answer rests on medians and spreads of exclusive timed windows, not on one brief screen. Their
compiles overlap each other (the caches are warm by now), but a timed window waits until no run on its GPU
is compiling: a launch-bound config loses speed to compiles on the CPUs it launches from."""

from __future__ import annotations

from tuner.context import SearchContext
from tuner.observe import annotate
from tuner.records import BASELINE_ID, TrialRow
from tuner.runner import run_cases


def run(ctx: SearchContext, screen: list[TrialRow]) -> list[TrialRow]:
    feasible = [t for t in screen if t.feasible and t.status == "ok"]
    feasible.sort(key=lambda t: -(t.tokens_per_s or 0))
    finalists: list[tuple[str, dict]] = [(BASELINE_ID, {})]
    cases = [ctx.short_run({})]
    for t in feasible:  # distinct configs only
        case = ctx.short_run(t.config)
        if case not in cases and len(finalists) <= ctx.cfg.search.remeasure_top:
            finalists.append((t.id, t.config))
            cases.append(case)
    placement = ctx.speed_placement(quiet=True)
    s = ctx.cfg.search
    repeats = [s.baseline_runs] + [s.repeats] * (len(cases) - 1)
    rows = run_cases("remeasure", ctx.out, cases, placement, repeats=repeats)
    for row in rows:
        row.finalist, row.config = finalists[row.case]
        row.val_loss = None
    return annotate(ctx, rows)
