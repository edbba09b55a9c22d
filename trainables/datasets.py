"""Batches of a workload that gives a torch Dataset: the loop, not the workload, applies the loader knobs.

Batch `step` is `batch_size` examples drawn with replacement by a generator seeded from (seed, step), as the
hybrid draws its windows: a pure function of its arguments, the same for both loaders, so `loader`,
`num_workers` and `pin_memory` change how fast batches come, never which. `loader: device` moves a
TensorDataset's tensors to the device once and gathers there (other datasets have no whole-tensor form).
Without `val_dataset`, the last tenth of the train dataset is held out and the val set is evenly spaced
examples from it; train draws from the rest.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, Sampler, TensorDataset
from torch.utils.data._utils.collate import default_collate

HOLDOUT_FRAC = 0.1


def to_device(batch: Any, device: torch.device) -> Any:
    """Every tensor of a (nested) batch on `device`."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, list | tuple):
        return type(batch)(to_device(v, device) for v in batch)
    return batch


def step_indices(seed: int, step: int, batch_size: int, n: int) -> torch.Tensor:
    # A stable hash (not Python's salted hash()) so every process and machine draws the same examples.
    digest = hashlib.blake2b(f"examples:{seed}:{step}".encode(), digest_size=8).digest()
    generator = torch.Generator().manual_seed(int.from_bytes(digest, "little") & (2**63 - 1))
    return torch.randint(n, (batch_size,), generator=generator)


class StepSampler(Sampler[list[int]]):
    """The example indices of batch start_step, start_step + 1, ... (endless)."""

    def __init__(self, seed: int, batch_size: int, n: int, start_step: int = 0):
        self.seed, self.batch_size, self.n, self.start_step = seed, batch_size, n, start_step

    def __iter__(self) -> Iterator[list[int]]:
        step = self.start_step
        while True:
            yield step_indices(self.seed, step, self.batch_size, self.n).tolist()
            step += 1


def train_size(dataset: Dataset, held_out: bool) -> int:
    """How many examples (the first ones) training draws from."""
    n = len(dataset)
    return n - max(1, int(n * HOLDOUT_FRAC)) if held_out else n


def train_batches(
    dataset: Dataset, cfg, device: torch.device, start_step: int = 0, held_out: bool = False
) -> Iterator[Any]:
    n = train_size(dataset, held_out)
    if cfg.loader == "device":
        return _device_batches(dataset, cfg, device, n, start_step)
    loader = DataLoader(
        dataset,
        batch_sampler=StepSampler(cfg.seed, cfg.batch_size, n, start_step),
        num_workers=cfg.num_workers,
        pin_memory=cfg.pin_memory and device.type == "cuda",  # pinning without CUDA only warns
        persistent_workers=cfg.num_workers > 0,
    )
    return (to_device(batch, device) for batch in loader)


def _device_batches(dataset: Dataset, cfg, device: torch.device, n: int, start_step: int) -> Iterator[Any]:
    if not isinstance(dataset, TensorDataset):
        raise ValueError("loader 'device' needs a TensorDataset")
    tensors = [t.to(device) for t in dataset.tensors]  # once; afterwards only the indices cross
    step = start_step
    while True:
        idx = step_indices(cfg.seed, step, cfg.batch_size, n).to(device)
        yield tuple(t[idx] for t in tensors)
        step += 1


def val_batches(dataset: Dataset, cfg, device: torch.device, held_out: bool = False) -> list[Any]:
    """The fixed val set: at most eval_tokens // seq_len examples, in batches of eval_batch_size."""
    want = max(1, cfg.eval_tokens // cfg.seq_len)
    if held_out:
        start = train_size(dataset, True)
        idx = torch.linspace(start, len(dataset) - 1, min(want, len(dataset) - start)).round().long().unique()
    else:
        idx = torch.arange(min(want, len(dataset)))
    chunks = idx.split(cfg.eval_batch_size)
    return [to_device(default_collate([dataset[int(i)] for i in chunk]), device) for chunk in chunks]
