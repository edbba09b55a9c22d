"""Batches of a character corpus's token stream, the hybrid LM's: the training batches (`window_batches`:
random seq_len + 1 windows, the same for a step number on every loader and device) and the fixed
validation set (`val_window_batches`). Not trainables/data/datasets.py's batches of a Dataset's examples: a
DataLoader worker here builds a whole batch of windows at once and keeps the tokens compact until they
reach the device; both draw a step's batch from `datasets.step_generator`."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import DataLoader

from trainables.common.errors import DataError
from trainables.data import LOADERS, gather_windows, split_xy
from trainables.data.datasets import step_generator


def batch_offsets(seed: int, step: int, batch_size: int, seq_len: int, n_tokens: int) -> torch.Tensor:
    """Start offsets (int64, CPU) of batch `step`'s seq_len + 1 token windows; a pure function of its args."""
    if n_tokens < seq_len + 1:
        raise DataError(f"training split has {n_tokens} tokens, fewer than seq_len + 1 = {seq_len + 1}")
    generator = step_generator(seed, step)
    return torch.randint(n_tokens - seq_len, (batch_size,), generator=generator, dtype=torch.int64)


class TrainBatches(torch.utils.data.Dataset):
    """Item i is the whole batch start_step + i as compact [B, seq_len + 1] windows (DataLoader workers build
    whole batches; widening to int64 happens on the device, so host-to-device copies stay small)."""

    def __init__(
        self,
        tokens: torch.Tensor,
        *,
        batch_size: int,
        seq_len: int,
        seed: int,
        start_step: int = 0,
        num_steps: int | None = None,
    ):
        self.tokens = tokens.cpu()
        self.batch_size, self.seq_len, self.seed, self.start_step = batch_size, seq_len, seed, start_step
        self.num_steps = num_steps if num_steps is not None else 2**62  # endless, as far as a run goes
        self.window = torch.arange(seq_len + 1)
        self.offsets(0)  # fail here, not in a worker, when the split is too short

    def __len__(self) -> int:
        return self.num_steps

    def offsets(self, i: int) -> torch.Tensor:
        return batch_offsets(self.seed, self.start_step + i, self.batch_size, self.seq_len, len(self.tokens))

    def __getitem__(self, i: int) -> torch.Tensor:
        return gather_windows(self.tokens, self.offsets(i), self.window)


def window_batches(
    tokens: torch.Tensor,
    *,
    loader: str,
    batch_size: int,
    seq_len: int,
    seed: int,
    device: str | torch.device,
    num_workers: int = 0,
    pin_memory: bool = False,
    start_step: int = 0,
    num_steps: int | None = None,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(x, y) int64 [B, T] batches on `device`, y = x shifted by one; batch k is batch number start_step + k.

    loader="dataloader": a DataLoader builds batches on the host (num_workers, pin_memory apply);
    loader="device": the token tensor moves to the device once and windows are gathered there.
    Both yield identical batches. Endless unless num_steps is given.
    """
    if loader not in LOADERS:
        raise ValueError(f"loader must be one of {LOADERS}, got {loader!r}")
    plan = TrainBatches(
        tokens, batch_size=batch_size, seq_len=seq_len, seed=seed, start_step=start_step, num_steps=num_steps
    )
    device = torch.device(device)
    if loader == "device":
        return _device_batches(plan, device)
    return _dataloader_batches(plan, device, num_workers, pin_memory)


def _device_batches(plan: TrainBatches, device: torch.device) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    tokens = plan.tokens.to(device)  # once; afterwards only B offsets cross per batch
    window = plan.window.to(device)
    for i in range(len(plan)):
        yield split_xy(gather_windows(tokens, plan.offsets(i), window))


def _dataloader_batches(
    plan: TrainBatches, device: torch.device, num_workers: int, pin_memory: bool
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    data_loader = DataLoader(
        plan,
        batch_size=None,  # items are whole batches already
        shuffle=False,  # batch order is the step order
        num_workers=num_workers,
        pin_memory=pin_memory and device.type == "cuda",  # pinning without CUDA only warns
        persistent_workers=num_workers > 0,
    )
    for windows in data_loader:
        yield split_xy(windows.to(device, non_blocking=True))


def val_window_batches(
    tokens: torch.Tensor,
    *,
    seq_len: int,
    batch_size: int,
    max_tokens: int | None,
    device: str | torch.device,
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The fixed validation set: non-overlapping seq_len windows from the start of `tokens`, at most
    max_tokens input tokens (None: all), in batches of batch_size (the last may be smaller, so weight
    per-batch mean losses by x.numel()). The windows depend only on (tokens, seq_len, max_tokens)."""
    n_windows = (len(tokens) - 1) // seq_len
    if max_tokens is not None:
        n_windows = min(n_windows, max_tokens // seq_len)
    if n_windows < 1:
        raise DataError(
            f"validation split of {len(tokens)} tokens (max_tokens={max_tokens}) holds no window of "
            f"seq_len + 1 = {seq_len + 1} tokens"
        )
    starts = torch.arange(n_windows) * seq_len
    windows = gather_windows(tokens.cpu(), starts, torch.arange(seq_len + 1)).to(device)
    return [split_xy(chunk) for chunk in windows.split(batch_size)]
