"""The batch probe: the largest batch that trains a step at each precision, so the screen wastes no trial on
batches that cannot fit. One fresh worker per precision: an OOM must not leave state behind for the next."""

from __future__ import annotations

from tuner.config import Knob
from tuner.context import SearchContext, log
from tuner.records import ProbedBatch
from tuner.runs.tasks import probe_batches
from tuner.space import bound_batch

# Precisions whose runs hold the same tensors: tf32 is fp32 storage, fp16 is bf16's size; one probe each.
SAME_MEMORY = {"tf32": "fp32", "fp16": "bf16"}


def run(ctx: SearchContext, space: dict[str, Knob]) -> dict[str, ProbedBatch]:
    """{precision: largest batch and its peak memory}; empty when the probe does not apply."""
    if not ctx.cfg.search.probe_batch or not isinstance(space.get("batch_size"), list):
        return {}
    if not ctx.on_gpu and not ctx.base.get("memory_cap_mb"):
        ctx.notice("batch probe skipped on CPU without memory_cap_mb (the OS swaps rather than OOMs)")
        return {}
    precisions = space.get("precision", [ctx.base["precision"]])
    probed = sorted({SAME_MEMORY.get(p, p) for p in precisions})
    limit = min(ctx.cfg.search.max_batch, max(space["batch_size"]))
    found = probe_batches(ctx.base, probed, limit, ctx.inputs.corpus, ctx.on_gpu)
    bounds = {p: found[SAME_MEMORY.get(p, p)] for p in precisions}
    log(f"[probe] largest batch per precision: { {p: b.batch for p, b in bounds.items()} }")
    return bounds


def bounded(ctx: SearchContext, space: dict[str, Knob], bounds: dict[str, ProbedBatch]) -> dict[str, Knob]:
    if not bounds:
        return space
    space, notices = bound_batch(space, max(b.batch for b in bounds.values()))
    for n in notices:
        ctx.notice(n)
    return space
