"""A user's own workload, plugged in by name (`workload: "toy_workload:make_workload"`): the seam the training
loop offers to any PyTorch model. It needs no corpus, so the CLI tests that use it run in any clone.

The task is a fixed rule, next token = (3 * token + 1) mod 16, so a two-layer model learns it in a few
steps and a falling loss proves the loop really trains what the workload hands it.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

VOCAB = 16
HEAD_LR_MULT = 3.0


def _sequences(seed: int, step: int, batch_size: int, seq_len: int) -> torch.Tensor:
    """[B, seq_len + 1] sequences that follow the rule from random start tokens; a pure function of its args."""
    digest = hashlib.blake2b(f"toy:{seed}:{step}".encode(), digest_size=8).digest()
    generator = torch.Generator().manual_seed(int.from_bytes(digest, "little") & (2**63 - 1))
    tokens = [torch.randint(VOCAB, (batch_size,), generator=generator)]
    for _ in range(seq_len):
        tokens.append((3 * tokens[-1] + 1) % VOCAB)
    return torch.stack(tokens, dim=1)


class ToyWorkload:
    def __init__(self, cfg):
        self.cfg = cfg

    def describe(self) -> str:
        return f"toy next-token rule, vocab {VOCAB}"

    def build_model(self) -> nn.Module:
        return nn.Sequential(nn.Embedding(VOCAB, 32), nn.Linear(32, VOCAB))

    def train_batches(self, device: torch.device, start_step: int = 0) -> Iterator[tuple]:
        for step in itertools.count(start_step):
            seqs = _sequences(self.cfg.seed, step, self.cfg.batch_size, self.cfg.seq_len).to(device)
            yield seqs[:, :-1], seqs[:, 1:]

    def val_batches(self, device: torch.device) -> list[tuple]:
        seqs = _sequences(-1, 0, self.cfg.eval_batch_size, self.cfg.seq_len).to(device)
        return [(seqs[:, :-1], seqs[:, 1:])]

    def loss(self, model: nn.Module, batch: tuple) -> torch.Tensor:
        x, y = batch
        return F.cross_entropy(model(x).float().flatten(0, 1), y.flatten())

    def lr_multiplier(self, param_name: str) -> float:
        return HEAD_LR_MULT if param_name.startswith("1.") else 1.0  # "1." is the output layer

    def save(self, out_dir: str) -> None:
        Path(out_dir, "toy.json").write_text(json.dumps({"vocab": VOCAB}))


class SlowStartWorkload(ToyWorkload):
    """Every loss call of the first `timing_warmup_steps` steps sleeps: a stand-in for compilation/autotuning,
    which the steady-state speed must not include."""

    SLEEP_S = 1.0

    def __init__(self, cfg):
        super().__init__(cfg)
        self.slow_calls_left = cfg.timing_warmup_steps * cfg.grad_accum

    def loss(self, model: nn.Module, batch: tuple) -> torch.Tensor:
        if self.slow_calls_left > 0 and model.training:
            self.slow_calls_left -= 1
            time.sleep(self.SLEEP_S)
        return super().loss(model, batch)


class PacedWorkload(ToyWorkload):
    """Every training step sleeps STEP_S: a steady window long enough for the kernel's CPU-time ticks."""

    STEP_S = 0.04

    def loss(self, model: nn.Module, batch: tuple) -> torch.Tensor:
        if model.training:
            time.sleep(self.STEP_S)
        return super().loss(model, batch)


def make_paced_workload(cfg) -> PacedWorkload:
    return PacedWorkload(cfg)


class SlowCompileWorkload(ToyWorkload):
    """The first training loss call spins in Python for SPIN_S, as torch.compile's first step does (Python
    for minutes, never back in the loop): what a compile deadline has to interrupt."""

    SPIN_S = 3.0

    def __init__(self, cfg):
        super().__init__(cfg)
        self.compiled = False

    def loss(self, model: nn.Module, batch: tuple) -> torch.Tensor:
        if not self.compiled and model.training:
            end = time.monotonic() + self.SPIN_S
            while time.monotonic() < end:
                pass
            self.compiled = True
        return super().loss(model, batch)


class BrokenWorkload(ToyWorkload):
    """Passes every check before a run, and fails in its first step: a baseline that cannot train."""

    def loss(self, model: nn.Module, batch: tuple) -> torch.Tensor:
        raise RuntimeError("broken on purpose")


class _Block(nn.Module):
    """A residual MLP block: the toy's repeated region."""

    def __init__(self, width: int):
        super().__init__()
        self.norm, self.fc = nn.LayerNorm(width), nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.fc(self.norm(x)))


class BlocksWorkload(ToyWorkload):
    """The toy with BLOCKS equal blocks that it names for regional compilation (`compile_scope: blocks`)."""

    BLOCKS = 3

    def build_model(self) -> nn.Module:
        return nn.Sequential(
            nn.Embedding(VOCAB, 32), *(_Block(32) for _ in range(self.BLOCKS)), nn.Linear(32, VOCAB)
        )

    def compile_regions(self, model: nn.Module) -> list[nn.Module]:
        return [m for m in model if isinstance(m, _Block)]

    def lr_multiplier(self, param_name: str) -> float:
        return 1.0


def make_blocks_workload(cfg) -> BlocksWorkload:
    return BlocksWorkload(cfg)


def make_broken_workload(cfg) -> BrokenWorkload:
    return BrokenWorkload(cfg)


def make_workload(cfg) -> ToyWorkload:
    return ToyWorkload(cfg)


def make_slow_start_workload(cfg) -> SlowStartWorkload:
    return SlowStartWorkload(cfg)


def make_slow_compile_workload(cfg) -> SlowCompileWorkload:
    return SlowCompileWorkload(cfg)


# A search trial's training config for the toy workload: a few dozen steps, shared by the failure and
# re-measure tests.
TOY = {
    "workload": "toy_workload:make_workload",
    "seq_len": 16,
    "batch_size": 8,
    "tokens": 8 * 16 * 40,
    "eval_interval": 0,
    "eval_tokens": 256,
    "eval_batch_size": 8,
    "timing_warmup_steps": 2,
    "log_interval": 5,
    "progress_s": 0.5,
}
