"""The search's estimate of its remaining phases, from what the screen measured.

Rough on purpose (it says "~"): loss runs share GPUs, so the loss check takes about its runs' compile plus
the larger of its longest run and the GPU work of all its runs (the candidates the re-measure could time
and the baseline's twin, at their screened speeds); the re-measure's timed windows take turns, so it takes
about their sum plus one warm-up. Loss runs on a GPU have so far compiled as if the cache were empty (run
G, docs/benchmarks.md), so they are counted at the graph's cold warm-up; re-measure runs hit the cache,
about half the screen's warm-up.
"""

from __future__ import annotations

from tuner.context import SearchContext, log
from tuner.costs import cold_warmup
from tuner.phases import baseline
from tuner.records import TrialRow
from tuner.select import loss_check_candidates


def _fmt(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s"


def loss_check_s(ctx: SearchContext, screen: list[TrialRow]) -> float:
    tokens, top = ctx.base["tokens"], ctx.cfg.search.remeasure_top
    picks = [c.row for c in loss_check_candidates(screen, ctx.base, top) if not c.inherits]
    runs = [r for r in [*picks, baseline.twin(ctx, screen)] if r is not None and r.tokens_per_s]
    if not runs:
        return 0.0
    compile_s = max(cold_warmup(r, screen, ctx.base) or 0.0 for r in runs)
    gpu_work = sum(tokens / r.tokens_per_s for r in runs) / max(1, ctx.hw.gpus)
    return compile_s + max(max(tokens / r.tokens_per_s for r in runs), gpu_work)


def remeasure_s(ctx: SearchContext, fastest: list[TrialRow]) -> float:
    s = ctx.cfg.search
    finalists = fastest[: s.remeasure_top]
    window = [s.screen_steps * (r.step_ms_median or 0.0) / 1000 for r in finalists]
    # The baseline is not screened (its twin is), so its windows are counted at the fastest's step time:
    # short of the truth when the baseline is launch-bound (eager seed steps are ~7x longer on a GPU).
    windows = sum(window) * s.repeats + window[0] * s.baseline_runs
    return windows / max(1, ctx.hw.gpus) + max((r.warmup_s or 0.0) / 2 for r in finalists)


def after_screen(ctx: SearchContext, screen: list[TrialRow]) -> None:
    ok = sorted((r for r in screen if r.status == "ok" and r.tokens_per_s), key=lambda r: -r.tokens_per_s)
    if not ok:
        return
    loss, again = loss_check_s(ctx, screen), remeasure_s(ctx, ok)
    log(
        f"[search] screen done; estimated: loss check ~{_fmt(loss)}, re-measure ~{_fmt(again)} "
        f"(ETA ~{_fmt(loss + again)})"
    )
