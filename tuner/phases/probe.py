"""The batch probe: the largest forward batch (the micro-batch, or the whole batch) that trains a step at each
precision and, where the space searches activation checkpointing, at its setting that keeps the most
activations and the one that keeps the least, so the screen wastes no trial on configs that cannot fit
(tuner/space/batch_fit.py reads a setting between them). One fresh worker per probe: an OOM must not leave
state behind for the next."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from trainables.common.progress import log
from trainables.config import TrainConfig
from trainables.data import Corpus
from tuner.config import Knob, Range, SearchSection
from tuner.runs.tasks import probe_batches
from tuner.space.batch_fit import largest_anywhere
from tuner.space.domains import bound_batch
from tuner.state.hardware import ProbedBatch

# Precisions whose runs hold the same tensors: tf32 is fp32 storage, fp16 is bf16's size; one probe each.
SAME_MEMORY = {"tf32": "fp32", "fp16": "bf16"}
SIZES = ("batch_size", "micro_batch")  # the knobs that size a forward: the probe bounds them


@dataclass(frozen=True)
class ProbeInputs:
    """What the probe and the space it bounds read of the search (built in tuner/pipeline.py): the search
    section, the baseline, whether the trials have GPUs, the corpus the trials get, and where notices go."""

    search: SearchSection
    base: TrainConfig
    on_gpu: bool
    corpus: Corpus | None
    notice: Callable[[str], None]


def largest_batches(inputs: ProbeInputs, space: dict[str, Knob]) -> dict[str, ProbedBatch]:
    """{precision: largest forward batch and its peak memory, per checkpointing setting probed}; empty when
    the probe does not apply."""
    if not inputs.search.probe_batch or not any(isinstance(space.get(k), list) for k in SIZES):
        return {}
    if not inputs.on_gpu and not inputs.base.memory_cap_mb:
        inputs.notice("batch probe skipped on CPU without memory_cap_mb (the OS swaps rather than OOMs)")
        return {}
    searched = space.get("precision")
    precisions: list[str] = searched if isinstance(searched, list) else [inputs.base.precision]
    classes = sorted({SAME_MEMORY.get(p, p) for p in precisions})
    batches = space.get("batch_size")
    largest = max(batches) if isinstance(batches, list) else inputs.base.batch_size  # no forward is larger
    limit = min(inputs.search.max_batch, largest)
    found = _probe(inputs, classes, limit, checkpointing_settings(space.get("activation_checkpointing")))
    bounds = {p: found[SAME_MEMORY.get(p, p)] for p in precisions}
    log(f"[probe] largest batch per precision: {_said(bounds)}")
    return bounds


def checkpointing_settings(knob: Knob | None) -> tuple[int, int] | None:
    """(the setting that keeps the most activations, the one that keeps the least) of a searched
    activation_checkpointing; None when it is not searched (the probe runs the baseline's)."""
    values = {
        int(v) for v in (range(int(knob.low), int(knob.high) + 1) if isinstance(knob, Range) else knob or [])
    }
    if len(values) < 2:
        return None
    return (0 if 0 in values else max(values)), min(v for v in values if v > 0)


def _probe(
    inputs: ProbeInputs, classes: list[str], limit: int, settings: tuple[int, int] | None
) -> dict[str, ProbedBatch]:
    """Per memory class, the setting that keeps the most first, then, where that fell short of the limit,
    the one that keeps the least: two probes per class at most, whatever the settings between them."""
    base = inputs.base.model_dump()
    most = base if settings is None else {**base, "activation_checkpointing": settings[0]}
    found = probe_batches(most, classes, limit, inputs.corpus, inputs.on_gpu)
    short = [p for p in classes if found[p].batch < limit]
    if settings is None or not short:
        return found
    least = {**base, "activation_checkpointing": settings[1]}
    more = probe_batches(least, short, limit, inputs.corpus, inputs.on_gpu)
    return {
        p: b.model_copy(update={"checkpointed": {settings[1]: more[p]}}) if p in more else b
        for p, b in found.items()
    }


def _said(bounds: dict[str, ProbedBatch]) -> str:
    """{precision: batch}, then the same per other checkpointing setting probed."""
    line = str({p: b.batch for p, b in bounds.items()})
    settings = sorted({k for b in bounds.values() for k in b.checkpointed})
    for k in settings:
        found = {p: b.checkpointed[k].batch for p, b in bounds.items() if k in b.checkpointed}
        line += f"; with activation_checkpointing={k}: {found}"
    return line


def bounded(inputs: ProbeInputs, space: dict[str, Knob], bounds: dict[str, ProbedBatch]) -> dict[str, Knob]:
    if not bounds:
        return space
    space, notices = bound_batch(space, largest_anywhere(bounds), inputs.base.micro_batch)
    for n in notices:
        inputs.notice(n)
    return space
