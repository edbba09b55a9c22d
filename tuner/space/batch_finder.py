"""Largest batch that fits, per precision and setting: doubling until OOM, then bisecting (as Lightning's
finder does). The batch probed is what one forward takes (micro_batch off): with micro-batches, the largest
micro-batch. A setting (activation checkpointing, compile) changes what a forward keeps, so it is probed
with it: a search asks per setting its space holds."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainables.config import TrainConfig, make_config
from trainables.data import Corpus, shipped_corpus
from trainables.training.loop import resolve_device, train
from tuner.space.batch_fit import PROBE_KEYS, probe_case
from tuner.state.hardware import ProbedBatch


def _config(base: dict[str, Any], batch: int, precision: str) -> TrainConfig:
    return make_config(probe_case(base, batch, precision))


def _fits(base: dict[str, Any], batch: int, precision: str) -> float | None:
    """The step's peak memory (MB) when `batch` trains a step at `precision`, None when it runs out."""
    result = train(_config(base, batch, precision), log=None)
    if result.status not in ("ok", "oom"):
        raise RuntimeError(f"batch probe at {batch} ({precision}) failed: {result.error}")
    return (result.peak_mem_mb or 0.0) if result.status == "ok" else None


def max_batch(
    base: dict[str, Any],
    precision: str,
    limit: int,
    margin: float = 0.9,
    bisect_steps: int = 3,
    corpus: Corpus | None = None,
    settings: Mapping[str, Any] | None = None,
) -> ProbedBatch:
    """Largest batch <= limit that trains a step at `precision`, times a safety margin (0 if none fits),
    and its peak memory: when everything up to the limit fits, the limit says nothing of how much of the
    GPU a batch takes (batch 128 of 512 held 15 GB of an H200's 141), the peak does.
    `settings`: training keys the probe runs with, over `base` (e.g. {"activation_checkpointing": 2,
    "compile": "default", "compile_scope": "blocks"}); not the ones it sets itself (PROBE_KEYS).
    `corpus`: the driver's, shipped through Ray, so the probe's node needs no copy of its own."""
    clash = sorted(PROBE_KEYS & set(settings or {}))
    if clash:
        raise ValueError(f"batch probe settings cannot name {clash}: the probe sets them itself")
    run = {**base, **(settings or {})}
    with shipped_corpus(corpus):
        found = _max_batch(run, precision, limit, margin, bisect_steps)
    return found.model_copy(update={"checkpointing": int(run.get("activation_checkpointing") or 0)})


def _max_batch(
    base: dict[str, Any], precision: str, limit: int, margin: float, bisect_steps: int
) -> ProbedBatch:
    # On a GPU the limit first: on a large GPU it usually fits (batch 512 of the default model on an H200),
    # and then one training step answers what doubling from 1 took ten to find. On a CPU (under
    # memory_cap_mb) an OOM can leave the process unable to train again (an allocation refused inside
    # oneDNN: 1 of 4 probes here then failed even batch 1), so there the sizes go up from 1 and the first
    # OOM is the last step: the answer is the largest size seen to fit, never 0 for a process spoiled.
    on_gpu = resolve_device(_config(base, 1, precision)).type == "cuda"
    if on_gpu and (top := _fits(base, limit, precision)) is not None:
        return ProbedBatch(batch=limit, peak_mb=top)  # everything up to the limit fits: no margin needed
    low, peak = 1, _fits(base, 1, precision)
    if peak is None:
        return ProbedBatch(batch=0)
    high = limit if on_gpu else limit + 1  # the smallest size known not to fit (limit + 1: none known)
    while low * 2 < high:
        if (found := _fits(base, low * 2, precision)) is None:
            high = low * 2
            break
        low, peak = low * 2, found
    spoiled = not on_gpu and high <= limit  # a CPU OOM: nothing this process answers after it is trusted
    for _ in range(0 if spoiled else bisect_steps):
        mid = (low + high) // 2
        if mid in (low, high):
            break
        if (found := _fits(base, mid, precision)) is not None:
            low, peak = mid, found
        elif not on_gpu:
            break
        else:
            high = mid
    if low == limit:
        return ProbedBatch(batch=limit, peak_mb=peak)
    batch = max(1, int(low * margin))
    return ProbedBatch(batch=batch, peak_mb=round(peak * batch / low, 1))
