"""The re-measure: the fastest feasible configs and the baseline, each run alone several times, so the
answer rests on medians and spreads of exclusive runs, not on one brief screen."""

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
    for t in feasible:  # distinct configs only: TPE may propose the same point twice
        case = ctx.short_run(t.config)
        if case not in cases and len(finalists) <= ctx.cfg.search.remeasure_top:
            finalists.append((t.id, t.config))
            cases.append(case)
    rows = run_cases(
        "remeasure",
        ctx.out,
        cases,
        ctx.exclusive(),
        repeats=ctx.cfg.search.repeats,
        max_concurrent=max(1, ctx.hw.gpus),
        reuse_actors=ctx.reuse_actors(),
    )
    for row in rows:
        row.finalist, row.config = finalists[row.case]
        row.val_loss = None
    return annotate(ctx, rows)
