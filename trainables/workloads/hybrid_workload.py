"""The built-in workload: the hybrid RWKV6+Mamba2 character LM on a char corpus (`train.workload: hybrid`).

A workload like any other (trainables/workloads/workload_protocol.py), not a special case of the loop: it makes its
own batches of char windows and implements every workload knob (WORKLOAD_KNOBS)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from typing import cast

import torch
from torch import nn

from model import HybridLM
from trainables.config import ConfigError, TrainConfig
from trainables.data import load_char_data
from trainables.data.char_batches import val_window_batches, window_batches
from trainables.workloads.workload_protocol import WORKLOAD_KNOBS, Batch


class HybridLMWorkload:
    """The hybrid RWKV6+Mamba2 character LM on a char corpus."""

    supports = frozenset(WORKLOAD_KNOBS)
    reads_corpus = True

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
        return window_batches(
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
        return val_window_batches(
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

    def compile_regions(self, model: nn.Module) -> list[nn.Module]:
        # The repeated blocks: compiled one by one they share one graph (HybridLM.blocks are all alike).
        return list(cast(HybridLM, model).block_list())

    def flops_per_token(self, model: nn.Module) -> float:
        # its matmuls and the mixers' state updates, counted from its config (model/hybrid.py)
        return cast(HybridLM, model).config.flops_per_token()

    def lr_multiplier(self, param_name: str) -> float:
        # The seed trains Mamba parameters at twice the base learning rate.
        return self.cfg.mamba_lr_mult if ".mamba." in param_name else 1.0

    def save(self, out_dir: str) -> None:
        self.data.tokenizer.save(f"{out_dir}/tokenizer.json")
