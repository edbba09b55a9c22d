"""The search space: knobs from the YAML, trimmed to what applies on this hardware (the screen's sampler
reads them as Optuna distributions: tuner/space/sampler.py)."""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from typing import Any

import torch

from model.ops import available_backends, tuning
from trainables.config import TrainConfig, is_file_spec
from trainables.workloads.workload import WorkloadInfo
from tuner.config import Knob, Range, SearchConfig
from tuner.space.batch_fit import normalized
from tuner.space.knobs import HARDWARE_KNOBS


def probe_hardware() -> dict[str, Any]:
    """What a trial's machine can do; run as a Ray task on a GPU node so it describes the trials' hardware."""
    info: dict[str, Any] = {
        "node": platform.node(),
        "cpus": os.cpu_count(),
        "cuda": torch.cuda.is_available(),
        "torch": torch.__version__,
        "backends": {k: (v if v is True else str(v)) for k, v in available_backends().items()},
    }
    if info["cuda"]:
        props = torch.cuda.get_device_properties(0)
        info.update(
            gpu_name=props.name,
            gpu_mem_mb=props.total_memory // 2**20,
            gpus=torch.cuda.device_count(),
            bf16=torch.cuda.is_bf16_supported(),
            cuda_version=torch.version.cuda,
        )
        found = tuning.matching_set(torch.cuda.get_device_capability(0), tuning.installed_versions())
        info["autotune_set"] = found.name if found else None
    else:
        flags = ""
        if os.path.exists("/proc/cpuinfo"):
            with open("/proc/cpuinfo") as f:
                flags = next((line for line in f if line.startswith("flags")), "")
        # Without native bf16 (AVX512-BF16 / AMX) bf16 autocast on CPU is emulated and only slower.
        info["bf16"] = "avx512_bf16" in flags or "amx_bf16" in flags
        info["gpus"] = 0
    return info


def fit_to_workload(cfg: SearchConfig, info: WorkloadInfo) -> SearchConfig:
    """The search config with the knobs its workload does not implement out of the space and the start
    points (one line in search.left_out says so, which the report shows), and, for a module workload, the
    folder it is imported from in train.workload_path (so best.yaml runs from anywhere)."""
    off = info.unsupported
    if info.code_root and not is_file_spec(info.spec) and "workload_path" not in cfg.train.model_fields_set:
        cfg = cfg.with_train(workload_path=info.code_root)
    if not off:
        return cfg
    space = {k: v for k, v in cfg.search.space.items() if k not in off}
    points = [p for p in ({k: v for k, v in p.items() if k not in off} for p in cfg.search.start_points) if p]
    why = f"the workload ({info.spec}) does not implement them; best.yaml and the report leave them out too"
    left_out = {**cfg.search.left_out, ", ".join(off): why}
    recipe = {k: v for k, v in cfg.search.recipe.items() if k not in off} if cfg.search.recipe else None
    update = {"space": space, "start_points": points, "left_out": left_out, "recipe": recipe}
    search = cfg.search.model_copy(update=update)
    return cfg.model_copy(update={"search": search})


def applicable(
    space: dict[str, Knob], hw: dict[str, Any]
) -> tuple[dict[str, Knob], dict[str, Any], list[str]]:
    """Drop choices that do not apply here. Returns (searchable knobs, knobs fixed to one value, notices)."""
    drop = _hardware_drops(hw)
    out: dict[str, Knob] = {}
    fixed: dict[str, Any] = {}
    notices: list[str] = []
    for name, knob in space.items():
        if isinstance(knob, Range):
            out[name] = knob
            continue
        choices = list(knob)
        if name == "num_workers" and hw.get("cpus"):
            choices = [c for c in choices if c <= hw["cpus"]] or [0]
        removed = [c for c in choices if c in drop.get(name, set())]
        kept = [c for c in choices if c not in removed]
        if removed:
            notices.append(f"dropped {name}={removed}: {HARDWARE_KNOBS[name].why}")
        if not kept:
            continue
        if len(kept) == 1:
            fixed[name] = kept[0]
        else:
            out[name] = kept
    return out, fixed, notices


def capabilities(hw: dict[str, Any]) -> dict[str, bool]:
    """What a knob value can need of the trials' hardware (trainables.config.KnobClass.needs)."""
    cuda, backends = bool(hw.get("cuda", False)), hw.get("backends", {})
    return {
        "cuda": cuda,  # tf32 is fp32 off NVIDIA tensor cores; pinned memory and CUDA graphs need a GPU
        "bf16": bool(hw.get("bf16")),
        "fused": cuda and backends.get("fla") is True and backends.get("mamba_ssm") is True,
    }


def _hardware_drops(hw: dict[str, Any]) -> dict[str, set[Any]]:
    """Per hardware-dependent knob, the values whose capability this hardware lacks."""
    has = capabilities(hw)
    return {name: {v for v, need in c.needs if not has[need]} for name, c in HARDWARE_KNOBS.items()}


def bound_batch(
    space: dict[str, Knob], largest: int, base_micro: int | None = None
) -> tuple[dict[str, Knob], list[str]]:
    """Keep what can fit, `largest` being the largest forward batch the OOM probe fit at any precision and
    setting (tuner/space/batch_fit.py): micro_batch choices up to it (None, the whole batch, stays), and batch
    sizes up to it or above it where a micro_batch that fits divides it (`base_micro` where micro_batch is
    not searched). A knob left without any keeps its smallest. Which configs fit is the screen's to refuse."""
    kept: dict[str, list[Any]] = {}  # each list knob's choices left
    micro = space.get("micro_batch")
    if isinstance(micro, list):
        kept["micro_batch"] = _kept(micro, lambda m: m is None or m <= largest)
        splitters = [m for m in kept["micro_batch"] if m is not None and m <= largest]
    else:
        splitters = [base_micro] if base_micro and base_micro <= largest else []
    batch = space.get("batch_size")
    if isinstance(batch, list):
        can_split = lambda b: any(m < b and b % m == 0 for m in splitters)
        kept["batch_size"] = _kept(batch, lambda b: b <= largest or can_split(b))
    notices = [
        f"{name} bounded by the memory probe (largest forward batch {largest}): {kept[name]}"
        for name, knob in (("micro_batch", micro), ("batch_size", batch))
        if isinstance(knob, list) and len(kept[name]) < len(knob)
    ]
    return {**space, **kept}, notices


def _kept(choices: list[Any], fits: Callable[[Any], bool]) -> list[Any]:
    """The choices that fit, or the smallest one when none does."""
    return [c for c in choices if fits(c)] or [min(c for c in choices if c is not None)]


def autotune_notice(space: dict[str, Knob], hw: dict[str, Any]) -> str | None:
    """What the fused kernels' Triton autotuning will cost this search, when they are in its space."""
    if "fused" not in space.get("kernels", []):
        return None
    if hw.get("autotune_set"):
        return (
            f"fused kernels: autotune results shipped for this GPU ({hw['autotune_set']}): a cold process "
            "compiles only the chosen configs (63 s for bf16 on an H100 against 295 s tuning them all, "
            "docs/benchmarks.md)"
        )
    return (
        "fused kernels: no shipped autotune results for this GPU and software: the first fused process per "
        "precision and shape autotunes every kernel (~5 min on an H100; its first step gets that much past "
        "search.compile_deadline) and keeps the results in the compile cache, so later processes and later "
        "searches on this machine read them"
    )


def start_point(
    point: dict[str, Any], space: dict[str, Knob], base: TrainConfig, notice: Callable[[str], None]
) -> dict[str, Any] | None:
    """A full point of the space: named knobs as given, the rest the baseline's value (or the first choice)."""
    full = {}
    for name, knob in space.items():
        value = point.get(name, getattr(base, name))
        ok = knob.low <= value <= knob.high if isinstance(knob, Range) else value in knob
        if not ok and name in point:
            notice(f"start point {point} skipped: {name}={value!r} does not apply here")
            return None
        full[name] = value if ok else (knob.low if isinstance(knob, Range) else knob[0])
    # one spelling of the whole batch in one pass, where the space offers it: the screen proposes that one
    offered = space.get("micro_batch")
    return normalized(full, base) if isinstance(offered, list) and None in offered else full
