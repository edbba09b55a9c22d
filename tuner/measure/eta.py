"""The search's estimate of its remaining phases, from what the screen measured.

Rough on purpose (it says "~"): loss runs share GPUs, so the loss check takes about its runs' compile plus
the larger of its longest run and the GPU work of all its runs (the candidates the re-measure could time
and the baseline's twin, at their screened speeds); the re-measure's runs take the GPU in turns (a window
also waits until no run on its GPU is compiling), and each holds it for about its gated steps (the untimed
warm-up steps after the first, then the timed ones) or, when longer, what a screen run spent outside
warm-up and window (data, model, the last report), plus one warm-up: on three cold one-GPU screens that
gives 87-116 s against the 126-139 s they took (docs/benchmarks.md). Not counted: the warm-ups of many runs
on one GPU slow each other (30-34 s each for 15 runs on one H100, 10-12 s with about four per GPU).
Both phases' runs find their graphs in the search's cache, which the screen filled, so their warm-up is a
cached one (`costs.cached_warmup`).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from trainables.common.progress import fmt_seconds, log
from trainables.config import TrainConfig
from tuner.config import SearchSection
from tuner.decide.costs import cached_warmup
from tuner.decide.loss_plan import Limits, LossPlan
from tuner.measure import baseline
from tuner.runs.request import Role
from tuner.runs.shapes import RunShapes
from tuner.runs.tasks import Pending
from tuner.space.knobs import loss_key
from tuner.state.records import TrialRow

NONE_BESIDE = Pending()  # no run beside the screen: on CPUs, or with no place to spare beside it


@dataclass(frozen=True)
class Remaining:
    """What the estimate reads of the search, built by the pipeline once the screen is done: the shape of
    its runs (the baseline, the screen's steady steps, the loss horizon), the search section (how many
    finalists the re-measure times, and how often), the trials' GPUs, whether the search confirms a
    remembered answer, and whether the loss check is done already (resumed, or a remembered answer)."""

    shapes: RunShapes
    search: SearchSection
    gpus: int
    confirming: bool
    loss_checked: bool


def loss_check_s(remaining: Remaining, screen: list[TrialRow], pending: Pending = NONE_BESIDE) -> float:
    """The baseline's loss runs (its seeds: one, or two at a prefix of the planned run) count at its twin's
    speed, less those `pending` says trained beside the screen and are done; of the candidates' runs only
    the ones with no loss run ahead (`pending`'s runs ahead of the loss check, which beside the screen have
    mostly trained by its end). Each run trains the loss horizon's tokens (tuner/rules/horizon.py: the planned
    run, or its prefix)."""
    beside_done = sum(run.done for run in pending.of(Role.BESIDE))
    base = remaining.shapes.base.model_dump()
    ahead = {loss_key(run.knobs, base) for run in pending.of(Role.AHEAD)}
    tokens, top = remaining.shapes.horizon.tokens, remaining.search.remeasure_top
    order = LossPlan.of(screen, base, Limits(runs=top, time_s=0.0, tokens=tokens, remeasure_top=top)).queue
    picks = [c.row for c in order[:top] if loss_key(c.config, base) not in ahead]  # in the loss check's order
    twin = baseline.twin(remaining.shapes.base, screen)
    left = max(0, len(baseline.loss_seeds(remaining.shapes)) - beside_done)
    runs = [(r, r.tokens_per_s) for r in [*picks, *[twin] * left] if r is not None and r.tokens_per_s]
    if not runs:
        return 0.0
    compile_s = max(cached_warmup(r, screen, base) or 0.0 for r, _ in runs)
    gpu_work = sum(tokens / speed for _, speed in runs) / max(1, remaining.gpus)
    return compile_s + max(max(tokens / speed for _, speed in runs), gpu_work)


def remeasure_s(remaining: Remaining, screen: list[TrialRow]) -> float:
    shapes = remaining.shapes
    finalists = _fastest(screen)[: remaining.search.remeasure_top]
    if not finalists:
        return 0.0
    # the gate: from its second step to its last timed
    held = shapes.screen_steps + shapes.base.timing_warmup_steps - 1
    window = [held * (r.step_ms_median or 0.0) / 1000 for r in finalists]
    step = _baseline_step_s(shapes.base, screen)
    baseline_window = held * step if step else window[0]
    base_runs, runs = remaining.search.remeasure_runs(confirming=remaining.confirming)
    windows = [w for w in window for _ in range(runs)] + [baseline_window] * base_runs
    per_run = _run_overhead_s(screen)
    turns = sum(max(w, per_run) for w in windows)
    base = shapes.base.model_dump()
    return turns / max(1, remaining.gpus) + max(cached_warmup(r, screen, base) or 0.0 for r in finalists)


def _baseline_step_s(base: TrainConfig, screen: list[TrialRow]) -> float | None:
    """The baseline's step, from the screen's runs at its batch, precision and compile mode (their kernels
    or loader may differ; stopped ones count, by their speed so far); None when the screen ran none. The
    baseline itself is not screened, and launch-bound its eager steps are ~5x the winner's (96-142 ms against
    24 ms on H100s), six windows the estimate would otherwise count at the winner's step."""
    same = {k: getattr(base, k) for k in ("batch_size", "precision", "compile")}
    speeds = [
        r.tokens_per_s
        for r in screen
        if r.tokens_per_s and all(r.config.get(k, v) == v for k, v in same.items())
    ]
    return base.tokens_per_step / statistics.median(speeds) if speeds else None


def _fastest(screen: list[TrialRow]) -> list[TrialRow]:
    return sorted(
        (r for r in screen if r.status == "ok" and r.tokens_per_s), key=lambda r: -(r.tokens_per_s or 0.0)
    )


def _run_overhead_s(screen: list[TrialRow]) -> float:
    """The median time a screen run spent outside its warm-up, gate wait and timed window."""
    spent = [
        r.wall_s - r.warmup_s - (r.gate_wait_s or 0.0) - (r.window_t1 - r.window_t0)
        for r in screen
        if r.wall_s is not None
        and r.warmup_s is not None
        and r.window_t0 is not None
        and r.window_t1 is not None
    ]
    return statistics.median(spent) if spent else 0.0


def after_screen(
    remaining: Remaining, screen: list[TrialRow], pending: Pending = NONE_BESIDE
) -> float | None:
    """Says what the loss check and the re-measure will take; returns the re-measure's estimate, which
    bounds its progress lines' ETA (tuner/runs/ledger.py:LedgerCallback). None when the screen has no
    config to time. `pending`: the runs beside the screen, as the scheduler says they stand
    (tuner/runs/ahead.py:pending): the baseline's (baseline.start_beside, then start_seeds_beside) and the
    candidates' ahead of the loss check."""
    if not _fastest(screen):
        return None
    besides = pending.of(Role.BESIDE)
    done = sum(run.done for run in besides)
    if besides:
        what = "its loss run" if len(besides) == 1 else f"its loss runs at {len(besides)} seeds"
        state = {0: "still training", len(besides): "done"}.get(done, f"{done} of {len(besides)} done")
        log(f"[baseline] {what} beside the screen: {state}")
    again = remeasure_s(remaining, screen)
    if remaining.loss_checked:  # resumed, or a remembered answer: nothing to train
        log(f"[search] screen done; loss check done; estimated: re-measure ~{fmt_seconds(again)}")
        return again
    loss = loss_check_s(remaining, screen, pending)
    log(
        f"[search] screen done; estimated: loss check ~{fmt_seconds(loss)}, re-measure ~{fmt_seconds(again)} "
        f"(ETA ~{fmt_seconds(loss + again)})"
    )
    return again
