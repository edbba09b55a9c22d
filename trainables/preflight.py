"""The checks a training config must pass before any work: one function for both entry points.

`python -m trainables.train` and the search (`tuner.search`, before Ray starts and before OUT is touched)
call `preflight`, so a config one of them refuses the other refuses too, with the same line: the workload
loads, the corpus holds the windows that seq_len and the eval sizes ask for, and (where the run will train
on this machine) the device and the kernels are there. A bad config is a ConfigError (one line, exit 2); a
fine config this machine cannot run, for want of CUDA, is an EnvironmentFault (one line, exit 5).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from model import library_env
from trainables.common.errors import DataError, EnvironmentFault
from trainables.config import ConfigError, TrainConfig
from trainables.data import CharData, load_char_data
from trainables.training.loop import resolve_device
from trainables.workloads.workload import (
    HybridLMWorkload,
    Workload,
    WorkloadInfo,
    check_workload,
    load_workload,
)


@dataclass(frozen=True)
class Preflight:
    """What the checks found: the workload, ready to train, what it implements, the device (None: not
    checked here), and the config as it trains it (counting the workload's units per example)."""

    workload: Workload
    info: WorkloadInfo
    device: torch.device | None
    cfg: TrainConfig


def preflight(cfg: TrainConfig, *, local: bool = True, section: str = "") -> Preflight:
    """ConfigError (one line) on the first problem, EnvironmentFault where this machine lacks the CUDA the
    config needs. `local`: the run trains on this machine, so its device and kernels are checked here; a
    search joining a cluster leaves those to its hardware probe (its workers may have the GPUs). `section`:
    where the keys live in the config file (a search's "train"), for the error lines. The compile cache
    variables are left as found (building the model on meta makes torch set Inductor's: library_env)."""
    with library_env.unchanged_compile_caches():
        return _preflight(cfg, local, section)


def _preflight(cfg: TrainConfig, local: bool, section: str) -> Preflight:
    try:
        workload = _load_workload(cfg, section)
    except DataError as err:
        raise ConfigError(str(err)) from None
    # before the device: a knob the workload lacks is refused for that reason, not for the hardware's
    info = check_workload(cfg, section, workload=workload)
    device = None
    if local:
        check_cuda(cfg, section, torch.cuda.is_available())
        device = resolve_device(cfg)
    if isinstance(workload, HybridLMWorkload):  # the built-in LM's corpus; a user's workload sizes its own
        check_sizes(cfg, workload.data, section)
    return Preflight(workload, info, device, info.fit(cfg, section))


def _load_workload(cfg: TrainConfig, section: str) -> Workload:
    if cfg.workload == "hybrid" and cfg.eval_tokens < cfg.seq_len:
        # The hybrid refuses this as eval_tokens' fault; a seq_len longer than the corpus is the cause to name.
        check_seq_len(cfg, load_char_data(cfg.data, expect_sha256=cfg.data_sha256), section)
    return load_workload(cfg, section)


def cuda_only_values(cfg: TrainConfig) -> list[tuple[str, Any, Any]]:
    """(key, value, what to use instead) for each of the config's values that cannot run without CUDA
    (declared on the field: KnobClass.cuda_only)."""
    return [
        (name, value, instead)
        for name, knob in TrainConfig.knob_classes().items()
        if knob is not None
        for value, instead in knob.cuda_only
        if getattr(cfg, name) == value
    ]


def check_cuda(cfg: TrainConfig, section: str, has_cuda: bool) -> None:
    """A config that asks for CUDA: refused with device 'cpu' (bad input), and on a machine without CUDA
    (EnvironmentFault: the config is fine, the machine is not), before any work, naming what to use here."""
    wants = cuda_only_values(cfg)
    if cfg.device == "cpu" and wants:
        name, value, instead = wants[0]
        raise ConfigError(
            f"config key {_key(section, name)!r}: {value!r} needs a CUDA device but "
            f"{_key(section, 'device')!r} is 'cpu' (use {instead!r} with it)"
        )
    if has_cuda:
        return
    if cfg.device.startswith("cuda"):
        raise EnvironmentFault(
            f"config key {_key(section, 'device')!r}: {cfg.device!r} asked for but this machine has no CUDA "
            "(use 'cpu' or 'auto' here, or run it on a GPU machine)"
        )
    if wants:
        name, value, instead = wants[0]
        knob = TrainConfig.knob_classes()[name]
        assert knob is not None  # cuda_only_values names only declared knobs
        why = knob.why
        raise EnvironmentFault(
            f"config key {_key(section, name)!r}: {value!r} needs CUDA ({why}) and this machine has none "
            f"(use {instead!r} here, or run it on a GPU machine)"
        )


def check_seq_len(cfg: TrainConfig, data: CharData, section: str) -> None:
    """seq_len against the corpus's splits: each must hold one window of seq_len + 1 tokens."""
    split, held = min((("training", len(data.train)), ("validation", len(data.val))), key=lambda s: s[1])
    if cfg.seq_len + 1 <= held:
        return
    fix = f"use at most {held - 1:,}" if held - 1 > 1 else "use a larger corpus"
    raise ConfigError(
        f"config key {_key(section, 'seq_len')!r}: {cfg.seq_len:,} is too long for the corpus's {split} "
        f"split, {held:,} tokens of {data.corpus.source}; {fix}"
    )


def check_sizes(cfg: TrainConfig, data: CharData, section: str = "") -> None:
    """seq_len against the corpus's splits, and the eval sizes against the validation split: a run that
    would fail at its first batch or eval, or silently evaluate less than it was told, is refused here."""
    check_seq_len(cfg, data, section)
    n_val = len(data.val)
    if cfg.eval_tokens > n_val:
        raise ConfigError(
            f"config key {_key(section, 'eval_tokens')!r}: {cfg.eval_tokens:,} is more than the validation "
            f"split's {n_val:,} tokens (set eval_tokens <= {n_val})"
        )
    windows = (n_val - 1) // cfg.seq_len
    if cfg.eval_batch_size > windows:
        raise ConfigError(
            f"config key {_key(section, 'eval_batch_size')!r}: {cfg.eval_batch_size:,} is more than the "
            f"{windows:,} windows of seq_len {cfg.seq_len} the validation split holds "
            f"(set eval_batch_size <= {windows})"
        )


def _key(section: str, name: str) -> str:
    """A key as its user writes it: 'train.seq_len' in a search config, 'seq_len' in a training one."""
    return ".".join(filter(None, (section, name)))
