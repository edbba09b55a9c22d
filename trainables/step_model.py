"""What the steps of a run call: the optimizer over the model's parameter groups, and the module the steps
run, compiled as `compile` and `compile_scope` say, with every k-th of the workload's blocks checkpointed
(`activation_checkpointing`). The training loop (trainables/loop.py) builds both here, once per run."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
import torch.utils.checkpoint

from trainables.config import TrainConfig
from trainables.config_fields import CUDA_GRAPH_MODES
from trainables.workload_job import Job, as_job, check_checkpointing


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
        return torch.compile(model, mode=mode, dynamic=False)
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
