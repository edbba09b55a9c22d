"""The batch probe: the largest batch that trains a step at each precision, so the screen wastes no trial on
batches that cannot fit. One fresh worker per precision: an OOM must not leave state behind for the next."""

from __future__ import annotations

import ray

from tuner.batch_finder import max_batch
from tuner.config import Knob
from tuner.context import SearchContext, log
from tuner.records import ProbedBatch
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
    task = ray.remote(max_calls=1)(max_batch).options(num_gpus=1 if ctx.on_gpu else 0, num_cpus=1)
    corpus = ray.put(ctx.inputs.corpus)  # once, for every probe task
    found = dict(zip(probed, ray.get([task.remote(ctx.base, p, limit, corpus=corpus) for p in probed])))
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
