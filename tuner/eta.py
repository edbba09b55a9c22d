"""The search's estimate of its remaining phases, from what the screen measured.

Rough on purpose (it says "~"): loss runs share GPUs, so the loss check takes about its runs' compile plus
the larger of its longest run and the GPU work of all its runs (the candidates the re-measure could time
and the baseline's twin, at their screened speeds); the re-measure's runs take the GPU in turns (a window
also waits until no run on its GPU is compiling), and each holds it for about its timed window or, when
longer, what a screen run spent outside warm-up and window (data, model, the last report), plus one
warm-up: on runs G to I's screens that gives 87-116 s against the 126-139 s they took (docs/benchmarks.md).
Both phases' runs find their graphs in the search's cache, which the screen filled, so their warm-up is a
cached one (`costs.cached_warmup`).
"""

from __future__ import annotations

import statistics

from tuner.context import SearchContext, log
from tuner.costs import cached_warmup
from tuner.phases import baseline
from tuner.phases.loss_check import LossAhead
from tuner.records import TrialRow
from tuner.select import loss_check_candidates


def _fmt(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s"


def loss_check_s(
    ctx: SearchContext, screen: list[TrialRow], beside_done: bool = False, ahead: LossAhead | None = None
) -> float:
    """With the baseline's loss run trained beside the screen and done, only the candidates' runs count, and
    of those only the ones with no loss run ahead (`ahead`, loss_check.LossAhead), which beside the screen
    have mostly trained by its end."""
    tokens, top = ctx.base["tokens"], ctx.cfg.search.remeasure_top
    picks = [
        c.row
        for c in loss_check_candidates(screen, ctx.base, top)
        if not c.inherits and not (ahead is not None and ahead.started(c))
    ]
    twin = None if beside_done else baseline.twin(ctx, screen)
    runs = [r for r in [*picks, twin] if r is not None and r.tokens_per_s]
    if not runs:
        return 0.0
    compile_s = max(cached_warmup(r, screen, ctx.base) or 0.0 for r in runs)
    gpu_work = sum(tokens / r.tokens_per_s for r in runs) / max(1, ctx.hw.gpus)
    return compile_s + max(max(tokens / r.tokens_per_s for r in runs), gpu_work)


def remeasure_s(ctx: SearchContext, screen: list[TrialRow]) -> float:
    s = ctx.cfg.search
    finalists = _fastest(screen)[: s.remeasure_top]
    if not finalists:
        return 0.0
    window = [s.screen_steps * (r.step_ms_median or 0.0) / 1000 for r in finalists]
    # The baseline is not screened (its twin is), so its windows are counted at the fastest's step time:
    # short of the truth when the baseline is launch-bound (eager seed steps are ~7x longer on a GPU).
    windows = [w for w in window for _ in range(s.repeats)] + [window[0]] * s.baseline_runs
    per_run = _run_overhead_s(screen)
    turns = sum(max(w, per_run) for w in windows)
    return turns / max(1, ctx.hw.gpus) + max(cached_warmup(r, screen, ctx.base) or 0.0 for r in finalists)


def _fastest(screen: list[TrialRow]) -> list[TrialRow]:
    return sorted((r for r in screen if r.status == "ok" and r.tokens_per_s), key=lambda r: -r.tokens_per_s)


def _run_overhead_s(screen: list[TrialRow]) -> float:
    """The median time a screen run spent outside its warm-up, gate wait and timed window."""
    spent = [
        r.wall_s - r.warmup_s - (r.gate_wait_s or 0.0) - (r.window_t1 - r.window_t0)
        for r in screen
        if None not in (r.wall_s, r.warmup_s, r.window_t0, r.window_t1)
    ]
    return statistics.median(spent) if spent else 0.0


def after_screen(
    ctx: SearchContext,
    screen: list[TrialRow],
    beside: baseline.BesideRun | None,
    ahead: LossAhead | None = None,
) -> None:
    if not _fastest(screen):
        return
    done = beside is not None and beside.done()
    if beside is not None:
        log(f"[baseline] its loss run beside the screen: {'done' if done else 'still training'}")
    loss, again = loss_check_s(ctx, screen, done, ahead), remeasure_s(ctx, screen)
    log(
        f"[search] screen done; estimated: loss check ~{_fmt(loss)}, re-measure ~{_fmt(again)} "
        f"(ETA ~{_fmt(loss + again)})"
    )
