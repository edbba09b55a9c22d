"""The loss check: the fastest config of each set of loss-relevant knobs trains to the full token budget,
several at once on a GPU (fractions, each with a memory cap), since only its val loss is used."""

from __future__ import annotations

from tuner.context import SearchContext
from tuner.observe import annotate
from tuner.records import TrialRow
from tuner.runner import run_cases
from tuner.select import Candidate, loss_check_candidates


def run(ctx: SearchContext, screen: list[TrialRow], limit: float) -> list[TrialRow]:
    """Loss runs for the fastest distinct-loss configs, in rounds that fill the free slots, until
    `loss_check_top` feasible configs are known (a config sharing the baseline's loss counts) or
    `max_loss_checks` runs are spent: a fast config that fails its check makes room for the next."""
    s = ctx.cfg.search
    picks = loss_check_candidates(screen, ctx.base, len(screen))
    queue = [p for p in picks if not p.inherits]  # the baseline's own loss stands for the rest
    feasible = sum(1 for p in picks if p.inherits)
    budget = s.max_loss_checks if s.max_loss_checks is not None else 2 * s.loss_check_top
    rows: list[TrialRow] = []
    round_no = 0
    while queue and feasible < s.loss_check_top and len(rows) < budget:
        take = min(_slots(ctx), s.loss_check_top - feasible, budget - len(rows))
        batch, queue = queue[:take], queue[take:]
        name = f"loss_check_{round_no}"
        new = ctx.phase(name, lambda name=name, batch=batch: _round(ctx, name, batch), list[TrialRow])
        for row in new:
            pick = batch[row.case]
            row.config, row.screen_id = pick.config, pick.id
            row.feasible = row.status == "ok" and row.val_loss is not None and row.val_loss <= limit
            feasible += bool(row.feasible)
        rows += new
        round_no += 1
    return rows


def _round(ctx: SearchContext, name: str, batch: list[Candidate]) -> list[TrialRow]:
    # Full token budget, the baseline's seed and data order; GPU fractions with a memory cap each.
    cases = [
        {**ctx.base, **p.config, "gpu_memory_fraction": _gpu_share(ctx, p.row), "out_dir": None}
        for p in batch
    ]
    return annotate(ctx, run_cases(name, ctx.out, cases, _resources(ctx), reuse_actors=ctx.reuse_actors()))


def _resources(ctx: SearchContext):
    cpus = ctx.cfg.resources.cpus_per_trial
    if ctx.on_gpu:  # per trial: its own GPU share (see _gpu_share)
        return lambda config: {"cpu": cpus, "gpu": config["train"]["gpu_memory_fraction"]}
    return {"cpu": cpus}


def _gpu_share(ctx: SearchContext, screened: TrialRow) -> float | None:
    """GPU fraction for a loss run: the configured share, or more when the config's screen run peaked
    above it (with 25% headroom), rounded up to 1/k so runs pack evenly. Its memory cap is the same."""
    if not ctx.on_gpu:
        return None
    need = (screened.peak_mem_mb or 0) * 1.25 / max(1, ctx.hw.gpu_mem_mb or 1)
    share = max(ctx.cfg.resources.loss_check_gpu_fraction, need)
    return 1.0 if share > 0.5 else 1.0 / int(1.0 / share)


def _slots(ctx: SearchContext) -> int:
    """How many loss-check runs fit at once on the cluster."""
    r = ctx.cfg.resources
    slots = (
        int(ctx.hw.gpus / r.loss_check_gpu_fraction)
        if ctx.on_gpu
        else int(ctx.cluster_cpus / r.cpus_per_trial)
    )
    return max(1, min(slots, r.max_concurrent or slots))
