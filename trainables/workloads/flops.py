"""Model FLOPs utilisation (MFU): the training FLOPs a run's tokens stand for, over what its GPU could do.

    MFU = tokens/s x training FLOPs per token / the GPU's dense peak FLOP/s at the run's precision

FLOPs per token are the workload's own count where it declares one (`flops_per_token(model)`, the hybrid
LM's: model/hybrid.py), else 6 x trainable parameters, the usual estimate (forward 2 FLOPs per parameter
per token, backward twice that) for a model whose work is its matmuls. Either counts the model's FLOPs, not
the hardware's: activation checkpointing's recomputation is not counted (PaLM's definition of MFU), so
checkpointing lowers MFU for the same tok/s, as it should. The peak is the one table below, by GPU name;
a CPU, or a GPU not in it, has no MFU, and `no_peak_reason` says why.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, TypeGuard

import torch

FROM_WORKLOAD = "workload"  # flops_source: the workload's own flops_per_token(model)
FROM_PARAMETERS = "6 x parameters"  # flops_source: 6 x trainable parameters, the workload declared none


@dataclass(frozen=True)
class Peak:
    """A GPU's dense peak, TFLOP/s (no structured sparsity): fp32 on the CUDA cores, tf32 and bf16 on the
    tensor cores (fp16's dense peak is bf16's on every GPU here)."""

    fp32: float
    tf32: float
    bf16: float


# NVIDIA's datasheets; where a datasheet gives the tensor-core figure "with sparsity" only, half of it
# (the dense rate). First match wins, so a variant comes before its family's pattern.
#   H100 SXM / PCIe / NVL: H100 datasheet (FP32 67 / 51 / 60; TF32 989* / 756* / 835*; BF16 1,979* /
#     1,513* / 1,671*, * with sparsity). H200 SXM / NVL: H200 datasheet, the same figures as H100 SXM / NVL
#     (GH200 matches H200: its Hopper GPU has the H100 SXM's). A100 (SXM and PCIe, 40 and 80 GB): A100
#     datasheet (FP32 19.5, TF32 156, BF16 312). A10: A10 datasheet (31.2, 62.5, 125). L4: L4 datasheet
#     (30.3, 120*, 242*). L40S: L40S datasheet (91.6, 183, 362.05). L40: L40 datasheet (90.5, 90.5, 181.05).
#   AWS's A10G has no NVIDIA datasheet: left out rather than guessed (its runs get no MFU, said why).
PEAKS: tuple[tuple[str, str, Peak], ...] = (
    ("H100 NVL", r"H100.*NVL", Peak(60.0, 417.5, 835.5)),
    ("H100 PCIe", r"H100.*PCIe", Peak(51.0, 378.0, 756.5)),
    ("H100 SXM", r"H100", Peak(67.0, 494.5, 989.5)),
    ("H200 NVL", r"H200.*NVL", Peak(60.0, 417.5, 835.5)),
    ("H200 SXM", r"H200", Peak(67.0, 494.5, 989.5)),
    ("A100", r"A100", Peak(19.5, 156.0, 312.0)),
    ("A10", r"\bA10\b", Peak(31.2, 62.5, 125.0)),  # \b: not A100, not A10G
    ("L40S", r"L40S", Peak(91.6, 183.0, 362.05)),
    ("L40", r"\bL40\b", Peak(90.5, 90.5, 181.05)),
    ("L4", r"\bL4\b", Peak(30.3, 60.0, 121.0)),
)
# The run's precision (TrainConfig.precision) -> the units its matmuls run on: fp32 means fp32 (the loop
# turns TF32 off unless asked), fp16 autocast runs on the tensor cores at bf16's rate.
PRECISION_UNITS = {"fp32": "fp32", "tf32": "tf32", "bf16": "bf16", "fp16": "bf16"}


def gpu_peak(gpu_name: str | None) -> tuple[str, Peak] | None:
    """The table's entry for a GPU by its name as torch reports it ('NVIDIA H100 80GB HBM3' -> H100 SXM)."""
    for model, pattern, peak in PEAKS:
        if gpu_name and re.search(pattern, gpu_name, re.IGNORECASE):
            return model, peak
    return None


def peak_flops(gpu_name: str | None, precision: str) -> float | None:
    """The dense peak FLOP/s of `gpu_name` at `precision`; None for a GPU not in the table (or no GPU)."""
    if precision not in PRECISION_UNITS:
        raise ValueError(f"precision must be one of {', '.join(PRECISION_UNITS)}, got {precision!r}")
    found = gpu_peak(gpu_name)
    return getattr(found[1], PRECISION_UNITS[precision]) * 1e12 if found else None


def device_name(device: torch.device) -> str | None:
    """The GPU's name as torch reports it; None on a CPU."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else None


def no_peak_reason(gpu_name: str | None) -> str:
    """Why a run has no MFU: no GPU, or a GPU the table does not know."""
    if gpu_name is None:
        return "it ran on a CPU (MFU is against a GPU's peak)"
    return f"no dense peak is known for {gpu_name!r} (trainables/workloads/flops.py's table)"


def counted(per_token: tuple[float, str], device: torch.device, precision: str, log) -> dict[str, Any]:
    """A run's flops_per_token and flops_source (the workload's count: `Job.flops_per_token`) and its
    device's peak_flops at `precision`, as RunResult fields; logs why a GPU the table lacks gets no MFU."""
    gpu = device_name(device)
    peak = peak_flops(gpu, precision)
    if peak is None and gpu:
        log(f"MFU: not given: {no_peak_reason(gpu)}")
    return {"flops_per_token": per_token[0], "flops_source": per_token[1], "peak_flops": peak}


def mfu(tokens_per_s: float | None, flops_per_token: float | None, peak: float | None) -> float | None:
    """tokens/s x FLOPs per token / peak FLOP/s (0..1 on a sound count); None where any figure is missing."""
    if positive(tokens_per_s) and positive(flops_per_token) and positive(peak):
        return tokens_per_s * flops_per_token / peak
    return None


def positive(x: object) -> TypeGuard[float]:
    """A finite number above 0 (a bool is no count)."""
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def six_times_parameters(model: torch.nn.Module) -> float:
    """The fallback: 6 x the trainable parameters (forward 2, backward 4 FLOPs per parameter per token)."""
    return 6.0 * sum(p.numel() for p in model.parameters() if p.requires_grad)
