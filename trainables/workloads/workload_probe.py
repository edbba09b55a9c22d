"""What the checks before any work ask of a workload's own code (trainables/workloads/workload.py:check_workload):
what it declares of itself (its unit, units per example, whether it reads the corpus), that a workload
counted as a language model has token windows for examples, and its loss and metrics on a batch, each
wrong kind refused in one line (ConfigError) that names the method or attribute and the fix."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from trainables.config import ConfigError
from trainables.data import datasets
from trainables.workloads.workload_job import Job
from trainables.workloads.workload_protocol import TOKENS, Batch


def check_declared(job: Job, name: str, section: str) -> None:
    """What it declares of itself: its unit, units per example, and whether it reads the corpus."""
    w, kind = job.workload, type(job.workload).__name__
    unit = getattr(w, "unit", TOKENS)
    if not isinstance(unit, str) or not unit.strip() or "\n" in unit:
        raise ConfigError(f'workload {name!r}: {kind}.unit is {unit!r}, expected a word such as "images"')
    per = getattr(w, "units_per_example", None)
    if per is not None and (isinstance(per, bool) or not isinstance(per, int) or per < 1):
        raise ConfigError(f"workload {name!r}: {kind}.units_per_example is {per!r}, expected a positive int")
    reads = getattr(w, "reads_corpus", False)
    if not isinstance(reads, bool):
        raise ConfigError(f"workload {name!r}: {kind}.reads_corpus is {reads!r}, expected True or False")
    if not reads and job.cfg.data is not None:
        key = ".".join(filter(None, (section, "data")))
        raise ConfigError(
            f"config key {key!r}: {job.cfg.data!r} names a corpus, but workload {name!r} reads none (one that "
            "trains on the corpus declares reads_corpus = True)"
        )


def check_counted(job: Job, batch: Batch, name: str, section: str) -> None:
    """A workload that declares neither `unit` nor `units_per_example` is counted as a language model:
    seq_len tokens an example. That holds where an example is a window of token ids (an integer tensor of
    seq_len, or seq_len + 1 with its target, ids first); any other example (a classifier's features and
    label) is refused, naming `unit`. Counted as tokens, an MLP's 256 "tokens" an example trained 7 steps of
    its 1,792 and printed 256x its speed (issue 56). `batch`: the first, batch on dim 0."""
    w = job.workload
    if hasattr(w, "unit") or getattr(w, "units_per_example", None) is not None:
        return  # declared: the workload says what it counts
    seq_len, leaves = job.cfg.seq_len, _tensors(batch)
    if any(_is_window(t, seq_len) for t in leaves):
        return
    each = ", ".join(f"{str(t.dtype).removeprefix('torch.')} {tuple(t.shape[1:])}" for t in leaves[:4])
    key = ".".join(filter(None, (section, "seq_len")))
    raise ConfigError(
        f"workload {name!r} declares no unit, so each example would count as {seq_len} tokens ({key!r}), but "
        f"its examples are not windows of {seq_len} token ids (one example: {each or 'no tensor'}); declare "
        f'what it counts, e.g. unit = "examples" (one per example; units_per_example for more), or, for token '
        f"windows of another length, set {key!r} to it"
    )


def _tensors(batch: Batch) -> list[torch.Tensor]:
    """The tensors of a batch (a tensor, or a tuple / list / dict of them), in order."""
    if isinstance(batch, torch.Tensor):
        return [batch]
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, list | tuple):
        return [t for item in batch for t in _tensors(item)]
    return []


def _is_window(t: torch.Tensor, seq_len: int) -> bool:
    """A batch of token windows: integer ids, [batch, seq_len] (or seq_len + 1, inputs and targets)."""
    ids = not (t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool)
    return ids and t.dim() >= 2 and t.shape[1] in (seq_len, seq_len + 1)


def checked_forward(job: Job, model: nn.Module, batch: Batch, device: torch.device, name: str) -> bool:
    """loss and metrics of `model` on `batch` moved to `device`, refused (ConfigError) when of the wrong
    kind; False where they cannot run there."""
    try:
        batch = datasets.to_device(batch, device)
        loss = job.loss(model, batch)
        found = job.metrics(model, batch)
    except Exception:  # noqa: BLE001 - a forward that cannot run here
        return False
    trains = any(p.requires_grad for p in model.parameters())
    fix = None
    if isinstance(loss, float | int) and not isinstance(loss, bool):
        fix = "a Python number: return the tensor itself, not loss.item() or float(loss)"
    elif not isinstance(loss, torch.Tensor):
        fix = f"{type(loss).__name__}: return the loss tensor, e.g. F.cross_entropy(logits, y)"
    elif loss.numel() != 1:
        fix = f"a tensor of shape {tuple(loss.shape)}: reduce it to the batch's mean, e.g. loss.mean()"
    elif trains and torch.is_grad_enabled() and not loss.requires_grad:
        fix = (
            "a tensor cut from the model (no grad): return it as computed, not torch.tensor(...) or .detach()"
        )
    if fix:
        raise ConfigError(
            f"workload {name!r}: loss(model, batch) returned {fix}; expected a scalar tensor, the batch's "
            "mean loss"
        )
    _check_metrics(found, name)
    return True


def _check_metrics(found: Any, name: str) -> None:
    if not isinstance(found, dict):
        raise ConfigError(
            f"workload {name!r}: metrics(model, batch) returned {type(found).__name__}, expected a dict of "
            "names to numbers, e.g. {'accuracy': 0.93}"
        )
    for key, value in found.items():
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not isinstance(key, str) or not (
            number or (isinstance(value, torch.Tensor) and value.numel() == 1)
        ):
            raise ConfigError(
                f"workload {name!r}: metrics(model, batch)[{key!r}] is {type(value).__name__}, expected a "
                "number or a one-element tensor (the batch's mean), under a name"
            )


def first_examples(batch: Batch, n: int) -> Batch:
    """The first `n` examples of a batch (batch on dim 0)."""
    if isinstance(batch, torch.Tensor):
        return batch[:n]
    if isinstance(batch, dict):
        return {k: first_examples(v, n) for k, v in batch.items()}
    if isinstance(batch, list | tuple):
        return type(batch)(first_examples(v, n) for v in batch)
    return batch
