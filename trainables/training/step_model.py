"""What the steps of a run call: the optimizer over the model's parameter groups, and the module the steps
run, compiled as `compile` and `compile_scope` say, with every k-th of the workload's blocks checkpointed
(`activation_checkpointing`). The training loop (trainables/training/loop.py) builds both here, once per run, and
takes its optimizer steps through `OptimizerStep`."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from typing import Any, cast

import torch
import torch.utils.checkpoint

from trainables.config import TrainConfig
from trainables.config_fields import CUDA_GRAPH_MODES
from trainables.micro_batches import micro_batches
from trainables.workloads.workload_job import Job, as_job, check_checkpointing
from trainables.workloads.workload_protocol import Batch

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def param_groups(model: torch.nn.Module, workload: Any, cfg: TrainConfig) -> list[dict[str, Any]]:
    """Weight decay on matrices only; per-parameter lr multipliers (e.g. Mamba 2x) as separate groups."""
    workload = as_job(workload, cfg)
    no_decay = set(getattr(model, "no_weight_decay", lambda: set())())
    groups: dict[tuple[float, bool], list[torch.nn.Parameter]] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        decay = p.ndim >= 2 and name not in no_decay
        groups.setdefault((workload.lr_multiplier(name), decay), []).append(p)
    return [
        {"params": ps, "lr_mult": mult, "weight_decay": cfg.weight_decay if decay else 0.0}
        for (mult, decay), ps in sorted(groups.items())
    ]


def build_step(cfg: TrainConfig, workload: Job, model: torch.nn.Module):
    """The module the steps call (compiled or not) and the optimizer."""
    optimizer = torch.optim.AdamW(
        param_groups(model, workload, cfg),
        lr=cfg.peak_lr(),
        betas=(cfg.beta1, cfg.beta2),
        fused=True if cfg.fused_adamw else None,
    )
    return step_module(cfg, workload, model), optimizer


def step_module(cfg: TrainConfig, workload: Job, model: torch.nn.Module) -> torch.nn.Module:
    """The module the steps call: `model` compiled as compile and compile_scope say, and every k-th of the
    workload's blocks checkpointed (activation_checkpointing). The one place both are applied."""
    step_model = model if cfg.compile == "none" else _compiled(cfg, workload, model)
    if cfg.activation_checkpointing:
        # around a block's compiled call, unless that call replays CUDA graphs: a checkpoint around those
        # fails in their recording (pytorch#154306), so there the checkpoint is traced into the block's graph
        outside = cfg.compile_scope == "blocks" and cfg.compile not in ("none", *CUDA_GRAPH_MODES)
        _checkpoint_blocks(workload.compile_regions(model), cfg.activation_checkpointing, outside)
    return step_model


def _compiled(cfg: TrainConfig, workload: Job, model: torch.nn.Module) -> torch.nn.Module:
    """The model under torch.compile: whole (`compile_scope: model`), or each of the workload's blocks
    compiled in place (`blocks`: regional compilation; equal blocks share one graph, so a cold compile costs
    a fraction of the whole model's, for a few % of speed). `evaluate` runs either eagerly."""
    # A fresh, static-shape compile per run: Ray reuses worker processes across trials, and guards
    # left by an earlier trial's model would otherwise turn shapes dynamic (slower, and fragile).
    torch._dynamo.reset()
    mode = None if cfg.compile == "default" else cfg.compile
    if cfg.compile_scope == "model":
        # an OptimizedModule (torch types what torch.compile returns as a bare callable)
        return cast(torch.nn.Module, torch.compile(model, mode=mode, dynamic=False))
    for region in workload.compile_regions(model):
        region.compile(mode=mode, dynamic=False)
    return model


def _checkpoint_blocks(regions: list[torch.nn.Module], every: int, around_compiled: bool) -> None:
    """Every `every`-th block (the k-th, 2k-th, ...) recomputed in backward instead of keeping its
    activations (non-reentrant torch.utils.checkpoint). `around_compiled`: around the call of a block
    compiled in place (compile_scope: blocks), so it keeps the one graph the other blocks share and saves
    only its input (traced into the block's graph, it kept ~2.6x the bytes on a CPU toy, and k > 1 made
    a second graph). Otherwise its forward is checkpointed, which an eager call and torch.compile's
    tracing (a whole model, or a block) both go through: the checkpoint becomes part of the graph."""
    check_checkpointing(every, len(regions))
    for region in regions[every - 1 :: every]:
        if around_compiled:  # what Module.compile set: the call Module.__call__ makes of a compiled block
            assert region._compiled_call_impl is not None, "a block of compile_scope: blocks not compiled"
            region._compiled_call_impl = _recomputed(region._compiled_call_impl)
        else:
            region.forward = _recomputed(region.forward)


def _recomputed(call: Callable) -> Callable:
    """`call` under a checkpoint where there is a backward to recompute it for (not in evals, no_grad)."""

    @functools.wraps(call)
    def run(*args, **kwargs):
        if not torch.is_grad_enabled():
            return call(*args, **kwargs)
        return torch.utils.checkpoint.checkpoint(call, *args, use_reentrant=False, **kwargs)

    return run


class OptimizerStep:
    """A run's optimizer steps: `step(batches)` is one, over grad_accum batches each cut into micro-batches
    (micro_batch), under autocast (precision), with fp16's loss scaling and grad_clip. The losses are summed
    on the device; `mean_loss()` reads them, the one host-device sync of a log point."""

    def __init__(self, cfg: TrainConfig, workload: Job, model: torch.nn.Module, device: torch.device):
        self.cfg, self.workload, self.model = cfg, workload, model
        self.step_model, self.optimizer = build_step(cfg, workload, model)
        amp_dtype = AMP_DTYPES.get(cfg.precision)
        self.autocast = (lambda: torch.autocast(device.type, dtype=amp_dtype)) if amp_dtype else nullcontext
        self.scaler = torch.amp.GradScaler(device.type, enabled=cfg.precision == "fp16")
        self.loss_sum, self.loss_count = torch.zeros((), device=device), 0

    def set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr * group["lr_mult"]

    def step(self, batches: Iterator[Batch]) -> None:
        cfg = self.cfg
        for _ in range(cfg.grad_accum):
            for piece, share in micro_batches(next(batches), cfg.micro_batch):
                with self.autocast():
                    loss = self.workload.loss(self.step_model, piece)
                if share != 1.0:
                    loss = loss * share  # the piece's part of its batch's mean loss
                self.scaler.scale(loss / cfg.grad_accum).backward()
                self.loss_sum += loss.detach().float()
            self.loss_count += 1
        if cfg.grad_clip > 0:
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)

    def mean_loss(self) -> float:
        """The mean loss since the last call; its .item() syncs with the device."""
        loss = (self.loss_sum / max(self.loss_count, 1)).item()
        self.loss_sum.zero_()
        self.loss_count = 0
        return loss
