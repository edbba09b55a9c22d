"""What the training loop trains: a model, its batches and its loss.

The hybrid LM is the built-in default workload, not a special case of the loop. A user's own PyTorch job
plugs in by naming a factory, `workload: "mypkg.jobs:make_workload"`, that takes the TrainConfig and returns
an object with the methods of `Workload`.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from typing import Protocol

import torch
from torch import nn

from model import HybridLM
from trainables.config import ConfigError, TrainConfig
from trainables.data import load_char_data, train_batches, val_batches

Batch = tuple[torch.Tensor, torch.Tensor]


class Workload(Protocol):
    def describe(self) -> str: ...

    def build_model(self) -> nn.Module: ...

    def train_batches(self, device: torch.device, start_step: int = 0) -> Iterator[Batch]: ...

    def val_batches(self, device: torch.device) -> list[Batch]: ...

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor: ...

    def lr_multiplier(self, param_name: str) -> float: ...

    def save(self, out_dir: str) -> None: ...


# Optional: `evaluation(model) -> context manager`, entered around every eval (the hybrid LM evaluates on its
# reference ops); a workload without it evaluates with the model as trained.


class HybridLMWorkload:
    """The hybrid RWKV6+Mamba2 character LM on a char corpus."""

    def __init__(self, cfg: TrainConfig):
        if cfg.eval_tokens < cfg.seq_len:  # refused here, before any work, not when the first eval comes
            raise ConfigError(
                f"config key 'eval_tokens': {cfg.eval_tokens} holds no validation window of seq_len "
                f"{cfg.seq_len} tokens (set eval_tokens >= seq_len)"
            )
        self.cfg = cfg
        self.data = load_char_data(cfg.data, expect_sha256=cfg.data_sha256)

    def describe(self) -> str:
        return f"hybrid LM on {self.data.corpus.source}, vocab {self.data.tokenizer.vocab_size}"

    def build_model(self) -> nn.Module:
        return HybridLM(self.cfg.hybrid_config(self.data.tokenizer.vocab_size))

    def train_batches(self, device: torch.device, start_step: int = 0) -> Iterator[Batch]:
        cfg = self.cfg
        return train_batches(
            self.data.train,
            loader=cfg.loader,
            batch_size=cfg.batch_size,
            seq_len=cfg.seq_len,
            seed=cfg.seed,
            device=device,
            num_workers=cfg.num_workers,
            pin_memory=cfg.pin_memory,
            start_step=start_step,
        )

    def val_batches(self, device: torch.device) -> list[Batch]:
        cfg = self.cfg
        return val_batches(
            self.data.val,
            seq_len=cfg.seq_len,
            batch_size=cfg.eval_batch_size,
            max_tokens=cfg.eval_tokens,
            device=device,
        )

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        x, y = batch
        return model(x, y)[1]

    def evaluation(self, model: nn.Module) -> AbstractContextManager:
        # The val loss through the reference ops, whatever kernels trained the weights (HybridLM.using_kernels).
        return model.using_kernels("torch") if isinstance(model, HybridLM) else nullcontext()

    def lr_multiplier(self, param_name: str) -> float:
        # The seed trains Mamba parameters at twice the base learning rate.
        return self.cfg.mamba_lr_mult if ".mamba." in param_name else 1.0

    def save(self, out_dir: str) -> None:
        self.data.tokenizer.save(f"{out_dir}/tokenizer.json")


def load_workload(cfg: TrainConfig) -> Workload:
    if cfg.workload == "hybrid":
        return HybridLMWorkload(cfg)
    module_name, sep, attr = cfg.workload.partition(":")
    if not sep:
        raise ConfigError(
            f"config key 'workload': expected 'hybrid' or 'module:function', got {cfg.workload!r}"
        )
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as err:
        raise ConfigError(f"config key 'workload': cannot load {cfg.workload!r}: {err}") from None
    return factory(cfg)
