"""Triton autotune results for the fused kernels: kept on disk across processes, and shipped for the GPUs
we measured, so a fresh machine does not pay the kernels' autotuning.

fla's and mamba_ssm's Triton kernels pick a config per shape class by benchmarking every candidate, and
compile each candidate first: cold, that took over 5 minutes of a fused training process on an H200
(hundreds of configs). Triton can keep the winners on disk in its cache dir (`TRITON_CACHE_AUTOTUNING=1`,
read when a kernel is defined, so set by model/library_env.py before the kernels are imported; fla asks
for it itself, mamba_ssm does not), keyed by Triton's version, the GPU target, the kernel's source, the
shape key and the candidate configs. So every process of a search
after the first finds them there. And because the key holds nothing of the machine but its GPU target and
software, results tuned once on one H100 are hits on any sm_90 GPU with the same Triton, fla and
mamba-ssm: `tuning_results/<set>/` holds such sets (as vLLM ships tuned fused-MoE configs per GPU), each
with a manifest of what it was tuned on, and `install_tuned` copies the matching set into Triton's cache
dir. Elsewhere nothing is copied and the first process autotunes, once per cache dir.
"""

from __future__ import annotations

import json
import os
import shutil
from importlib import metadata
from pathlib import Path

RESULTS = Path(__file__).with_name("tuning_results")
# The distributions whose versions decide the cache keys (the kernels' sources and Triton's own).
KEYED_ON = ("triton", "fla-core", "mamba-ssm")
# What autotuning every fused kernel costs a cold process: 295 s for bf16, 326 s for fp32 on an H100
# (docs/benchmarks.md). A first step that must pay it gets this much more than its compile deadline.
COLD_AUTOTUNE_S = 330.0


def installed_versions(dists: tuple[str, ...] = KEYED_ON) -> dict[str, str | None]:
    """Each distribution's installed version (None: not installed)."""
    versions: dict[str, str | None] = {}
    for dist in dists:
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    return versions


def matching_set(capability: tuple[int, int], versions: dict[str, str | None]) -> Path | None:
    """The shipped results folder tuned for this GPU target and these versions, if any."""
    for manifest in sorted(RESULTS.glob("*/manifest.json")):
        meta = json.loads(manifest.read_text())
        if tuple(meta["capability"]) == tuple(capability) and meta["versions"] == versions:
            return manifest.parent
    return None


def install_tuned(
    cache_dir: Path, capability: tuple[int, int], versions: dict[str, str | None]
) -> str | None:
    """Copies the matching shipped set into `cache_dir` (files already there are kept); a line saying
    what was installed, or None when no set matches."""
    found = matching_set(capability, versions)
    if found is None:
        return None
    files = sorted((found / "cache").rglob("*.autotune.json"))
    for src in files:
        dst = cache_dir / src.relative_to(found / "cache")
        if not dst.exists():
            dst.parent.mkdir(parents=True, exist_ok=True)
            tmp = dst.with_suffix(f".{os.getpid()}.tmp")  # a concurrent process never reads half a file
            shutil.copyfile(src, tmp)
            os.replace(tmp, dst)
    meta = json.loads((found / "manifest.json").read_text())
    return f"shipped autotune results for {len(files)} kernel shapes ({found.name}, tuned on {meta['gpu']})"


# Triton cache dir -> what `install_for_this_gpu` put there (None: no set matched): once per dir and process.
installed: dict[str, str | None] = {}


def install_for_this_gpu() -> str | None:
    """`install_tuned` into Triton's cache dir (TRITON_CACHE_DIR as set now) for the current CUDA device."""
    import torch
    from triton import knobs

    if not torch.cuda.is_available():
        return None
    cache_dir = knobs.cache.dir
    if cache_dir not in installed:
        capability = torch.cuda.get_device_capability()
        installed[cache_dir] = install_tuned(Path(cache_dir), capability, installed_versions())
    return installed[cache_dir]
