"""Batches of a workload that gives a torch Dataset of examples (`example_batches`, `val_example_batches`):
the loop, not the workload, applies the loader knobs. The hybrid LM batches its token stream itself
(trainables/data/char_batches.py: windows at offsets, not examples); both draw a step's batch from
`step_generator`.

Batch `step` is `batch_size` examples drawn with replacement by a generator seeded from (seed, step), as the
hybrid draws its windows: a pure function of its arguments, the same for both loaders, so `loader`,
`num_workers` and `pin_memory` change how fast batches come, never which (and neither loader draws from
torch's global generator, so dropout sees the same stream under both). Without `val_dataset`, the last tenth
of the train dataset is held out and the val set is evenly spaced examples from it; train draws from the rest.

`loader: device` puts the dataset on the device once and gathers each batch there, by one of two routes:
- a dataset that batches itself (`Gatherable`: `to(device)` and `gather(indices)`), as
  `trainables.data.CharWindows` does: its windows overlap, so a copy of every example would be seq_len
  times its tokens, while its token tensor moves as it is;
- any other dataset of tensor examples (a TensorDataset, a list of tensors or of dicts/tuples of them) is
  collated once into whole tensors, when that copy stays under MATERIALISE_MAX_BYTES.
A dataset neither fits (too large, or examples that are not tensors) is not offered `loader: device`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sized
from typing import Any, Protocol, cast, runtime_checkable

import torch
from torch.utils.data import DataLoader, Dataset, Sampler, TensorDataset
from torch.utils.data._utils.collate import default_collate

HOLDOUT_FRAC = 0.1
# The largest copy of a dataset's examples `loader: device` makes (estimated from its first example): above
# it, building the copy would cost more host time and memory than the loader saves.
MATERIALISE_MAX_BYTES = 1 << 30


@runtime_checkable
class Gatherable(Protocol):
    """A dataset that makes its own batches on a device (what `loader: device` uses when it is one)."""

    def to(self, device: torch.device) -> Gatherable:
        """This dataset with its tensors on `device` (moved once, before the first batch)."""
        ...

    def gather(self, indices: torch.Tensor) -> Any:
        """The batch of these examples (int64 indices on the tensors' device): equal to
        default_collate([self[i] for i in indices]), on the device."""
        ...


def to_device(batch: Any, device: torch.device) -> Any:
    """Every tensor of a (nested) batch on `device`."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, list | tuple):
        return type(batch)(to_device(v, device) for v in batch)
    return batch


def step_generator(*key: object) -> torch.Generator:
    """A generator seeded from `key` (its parts joined by ':'), the same in every process and on every
    machine: a stable hash, not Python's salted hash(). Batch draws key it by (seed, step)."""
    digest = hashlib.blake2b(":".join(map(str, key)).encode(), digest_size=8).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest, "little") & (2**63 - 1))


def step_indices(seed: int, step: int, batch_size: int, n: int) -> torch.Tensor:
    """The example indices of batch `step` (with replacement, of the first n examples)."""
    return torch.randint(n, (batch_size,), generator=step_generator("examples", seed, step))


class StepSampler(Sampler[list[int]]):
    """The example indices of batch start_step, start_step + 1, ... (endless)."""

    def __init__(self, seed: int, batch_size: int, n: int, start_step: int = 0):
        self.seed, self.batch_size, self.n, self.start_step = seed, batch_size, n, start_step

    def __iter__(self) -> Iterator[list[int]]:
        step = self.start_step
        while True:
            yield step_indices(self.seed, step, self.batch_size, self.n).tolist()
            step += 1


def example_count(dataset: Dataset) -> int:
    """How many examples a map-style dataset holds (torch's Dataset declares no __len__; a workload's
    datasets are checked for one when it is loaded: trainables/workloads/workload.py)."""
    return len(cast(Sized, dataset))


def train_size(dataset: Dataset, held_out: bool) -> int:
    """How many examples (the first ones) training draws from."""
    n = example_count(dataset)
    return n - max(1, int(n * HOLDOUT_FRAC)) if held_out else n


def example_batches(
    dataset: Dataset, cfg, device: torch.device, start_step: int = 0, held_out: bool = False
) -> Iterator[Any]:
    """Batch start_step, start_step + 1, ... of `dataset`'s examples on `device`, endless (held_out: of
    the examples before the held-out tenth)."""
    n = train_size(dataset, held_out)
    if cfg.loader == "device":
        return _device_batches(dataset, cfg, device, n, start_step)
    loader = DataLoader(
        dataset,
        batch_sampler=StepSampler(cfg.seed, cfg.batch_size, n, start_step),
        num_workers=cfg.num_workers,
        pin_memory=cfg.pin_memory and device.type == "cuda",  # pinning without CUDA only warns
        persistent_workers=cfg.num_workers > 0,
        generator=torch.Generator().manual_seed(cfg.seed),  # its per-iteration base seed: not the global one
    )
    return (to_device(batch, device) for batch in loader)


def _device_batches(dataset: Dataset, cfg, device: torch.device, n: int, start_step: int) -> Iterator[Any]:
    on_device = on_the_device(dataset, device)  # once; afterwards only the indices cross
    step = start_step
    while True:
        yield on_device.gather(step_indices(cfg.seed, step, cfg.batch_size, n).to(device))
        step += 1


class Collated:
    """A dataset's examples collated into whole tensors (a tensor, or a tuple/list/dict of them)."""

    def __init__(self, batch: Any):
        self.batch = batch

    def to(self, device: torch.device) -> Collated:
        return Collated(to_device(self.batch, device))

    def gather(self, indices: torch.Tensor) -> Any:
        return _index(self.batch, indices)


def _index(batch: Any, indices: torch.Tensor) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch[indices]
    if isinstance(batch, dict):
        return {k: _index(v, indices) for k, v in batch.items()}
    return type(batch)(_index(v, indices) for v in batch)


def device_loadable(dataset: Dataset) -> str | None:
    """None when `loader: device` can batch `dataset`; else one line saying why not."""
    if isinstance(dataset, Gatherable | TensorDataset):
        return None
    example_bytes = _example_bytes(dataset[0])
    if example_bytes is None:
        kind = type(dataset[0]).__name__
        return f"its examples ({kind}) are not tensors, numbers or tuples/lists/dicts of them"
    n = example_count(dataset)
    size = n * example_bytes
    if size > MATERIALISE_MAX_BYTES:
        return (
            f"a copy of its {n:,} examples would take {_size(size)}, over "
            f"{_size(MATERIALISE_MAX_BYTES)} (give the dataset to(device) and gather(indices), as "
            "trainables.data.CharWindows does)"
        )
    return None


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:,.1f} {unit}"
    return f"{nbytes} bytes"


def _example_bytes(example: Any) -> int | None:
    """What one example takes once collated (numbers become 8-byte tensors); None when a part of it is
    neither a tensor nor a number."""
    if isinstance(example, torch.Tensor):
        return example.numel() * example.element_size()
    if isinstance(example, int | float | bool):
        return 8
    if not isinstance(example, dict | list | tuple) or not example:
        return None
    sizes = [_example_bytes(part) for part in (example.values() if isinstance(example, dict) else example)]
    known = [size for size in sizes if size is not None]
    return sum(known) if len(known) == len(sizes) else None


def on_the_device(dataset: Dataset, device: torch.device) -> Gatherable:
    """`dataset` as a Gatherable on `device`: its own, or its examples collated once (ValueError: one line)."""
    why = device_loadable(dataset)
    if why:
        raise ValueError(f"loader 'device': {why}")
    if isinstance(dataset, Gatherable):
        return dataset.to(device)
    if isinstance(dataset, TensorDataset):
        return Collated(list(dataset.tensors)).to(device)  # a list, as default_collate makes of tuples
    try:
        collated = default_collate([dataset[i] for i in range(example_count(dataset))])
    except RuntimeError as err:  # examples of different shapes do not stack
        line = str(err).splitlines()[0]
        raise ValueError(
            f"loader 'device': the dataset's examples do not stack into one tensor ({line})"
        ) from None
    return Collated(collated).to(device)


def val_example_batches(dataset: Dataset, cfg, device: torch.device, held_out: bool = False) -> list[Any]:
    """The fixed val set: at most eval_tokens // example_units examples (eval_tokens counts the workload's
    units), in batches of eval_batch_size."""
    want, n = max(1, cfg.eval_tokens // cfg.example_units), example_count(dataset)
    if held_out:
        start = train_size(dataset, True)
        idx = torch.linspace(start, n - 1, min(want, n - start)).round().long().unique()
    else:
        idx = torch.arange(min(want, n))
    chunks = idx.split(cfg.eval_batch_size)
    return [to_device(default_collate([dataset[int(i)] for i in chunk]), device) for chunk in chunks]
