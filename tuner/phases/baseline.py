"""The baseline: the user's own training config, trained to its full token budget, alone on a GPU."""

from __future__ import annotations

from tuner.context import SearchContext, log
from tuner.observe import annotate
from tuner.records import TrialRow
from tuner.runner import run_cases


class SearchFailed(RuntimeError):
    """The search cannot go on (e.g. the baseline itself fails); one line, exit 1."""


def run(ctx: SearchContext) -> TrialRow:
    rows = run_cases("baseline", ctx.out, [ctx.base], ctx.exclusive(), reuse_actors=ctx.reuse_actors())
    return annotate(ctx, rows)[0]


def checked(ctx: SearchContext, baseline: TrialRow) -> tuple[TrialRow, float]:
    """The baseline row, marked feasible, and the loss limit it sets; SearchFailed if it did not train."""
    if baseline.status != "ok":
        raise SearchFailed(f"the baseline run failed ({baseline.status}: {baseline.error})")
    baseline.feasible = True
    limit = ctx.cfg.quality.limit(baseline.val_loss)
    log(f"baseline: {baseline.tokens_per_s:,.0f} tok/s, val loss {baseline.val_loss:.4f} (limit {limit:.4f})")
    return baseline, limit
