"""The search's estimate of its remaining phases, from what the screen measured.

Rough on purpose (it says "~"): loss runs share GPUs, so the loss check takes about the larger of its
longest run and the GPU work of all its runs; the re-measure's timed windows take turns, so it takes about
their sum plus one warm-up. Warm-ups after the screen hit warm caches: about half the screen's, as measured.
"""

from __future__ import annotations

from tuner.context import SearchContext, log
from tuner.records import TrialRow


def _fmt(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s"


def loss_check_s(ctx: SearchContext, fastest: list[TrialRow]) -> float:
    tokens = ctx.base["tokens"]
    runs = [(r.warmup_s or 0.0) / 2 + tokens / r.tokens_per_s for r in fastest]
    gpu_work = sum(tokens / r.tokens_per_s for r in fastest) / max(1, ctx.hw.gpus)
    return max(max(runs), gpu_work)


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
    fastest = ok[: ctx.cfg.search.loss_check_top + 1]  # + the baseline's twin, about as fast
    loss, again = loss_check_s(ctx, fastest), remeasure_s(ctx, ok)
    log(
        f"[search] screen done; estimated: loss check ~{_fmt(loss)}, re-measure ~{_fmt(again)} "
        f"(ETA ~{_fmt(loss + again)})"
    )
