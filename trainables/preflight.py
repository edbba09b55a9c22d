"""The checks a training config must pass before any work: one function for both entry points.

`python -m trainables.train` and the search (`tuner.search`, before Ray starts and before OUT is touched)
call `preflight`, so a config one of them refuses the other refuses too, with the same line: the workload
loads, the corpus holds the windows that seq_len and the eval sizes ask for, and (where the run will train
on this machine) the device and the kernels are there. Each failure is a ConfigError: one line, exit 2.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainables.config import ConfigError, TrainConfig
from trainables.data import DataError
from trainables.loop import resolve_device
from trainables.workload import HybridLMWorkload, Workload, WorkloadInfo, check_workload, load_workload


@dataclass(frozen=True)
class Preflight:
    """What the checks found: the workload, ready to train, what it implements, and the device (None: not
    checked here)."""

    workload: Workload
    info: WorkloadInfo
    device: torch.device | None


def preflight(cfg: TrainConfig, *, local: bool = True, section: str = "") -> Preflight:
    """ConfigError (one line) on the first problem. `local`: the run trains on this machine, so its device
    and kernels are checked here; a search joining a cluster leaves those to its hardware probe. `section`:
    where the keys live in the config file (a search's "train"), for the error lines."""
    try:
        workload = load_workload(cfg, section)
    except DataError as err:
        raise ConfigError(str(err)) from None
    # before the device: a knob the workload lacks is refused for that reason, not for the hardware's
    info = check_workload(cfg, section, workload=workload)
    device = resolve_device(cfg) if local else None
    if isinstance(workload, HybridLMWorkload):  # the built-in LM's corpus; a user's workload sizes its own
        check_sizes(cfg, len(workload.data.train), len(workload.data.val))
    return Preflight(workload, info, device)


def check_sizes(cfg: TrainConfig, n_train: int, n_val: int) -> None:
    """seq_len against the corpus's splits, and the eval sizes against the validation split: a run that
    would fail at its first batch or eval, or silently evaluate less than it was told, is refused here."""
    window = cfg.seq_len + 1
    if n_train < window:
        raise ConfigError(
            f"config key 'seq_len': {cfg.seq_len} needs {window} tokens per window, but the corpus's "
            f"training split holds {n_train} (use a larger corpus or a smaller seq_len)"
        )
    if n_val < window:
        raise ConfigError(
            f"config key 'seq_len': {cfg.seq_len} needs {window} tokens per window, but the corpus's "
            f"validation split holds {n_val} (use a larger corpus or a smaller seq_len)"
        )
    if cfg.eval_tokens > n_val:
        raise ConfigError(
            f"config key 'eval_tokens': {cfg.eval_tokens:,} is more than the validation split's "
            f"{n_val:,} tokens (set eval_tokens <= {n_val})"
        )
    windows = (n_val - 1) // cfg.seq_len
    if cfg.eval_batch_size > windows:
        raise ConfigError(
            f"config key 'eval_batch_size': {cfg.eval_batch_size:,} is more than the {windows:,} windows of "
            f"seq_len {cfg.seq_len} the validation split holds (set eval_batch_size <= {windows})"
        )
