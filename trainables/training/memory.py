"""What a run may use of memory and what it used: the hard cap (`memory_cap_mb`, `gpu_memory_fraction`),
the run's own peak (reset at its start, read at its end, so a reused worker never reports an earlier run's)
and the heap handed back to the OS between runs of one process. The loop (trainables/training/loop.py) calls it."""

from __future__ import annotations

import ctypes
import gc
import resource
from pathlib import Path

import torch

from trainables.config import TrainConfig


def is_oom(err: BaseException, cpu_capped: bool = False) -> bool:
    """Whether a run failed for memory: torch's or Python's OOM, or an allocation refused under the cap."""
    if isinstance(err, torch.OutOfMemoryError | MemoryError):
        return True
    text = str(err)
    if cpu_capped and "could not create a primitive" in text:
        return True  # oneDNN's allocation failing under the CPU address-space cap
    return isinstance(err, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


def trim_heap() -> None:
    """Hands freed heap back to the OS (glibc's malloc_trim): what an earlier, bigger run in this process
    freed but the allocator kept would otherwise stay in the RSS, and in this run's peak."""
    try:
        trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    except OSError:
        return
    if trim is not None:
        trim(0)


def reset_peak(device: torch.device) -> None:
    """Starts this run's memory peak now: a reused worker process (Ray) must not report an earlier run's."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    trim_heap()
    try:
        Path("/proc/self/clear_refs").write_text("5")  # Linux: resets VmHWM to the current RSS
    except OSError:
        pass  # elsewhere the peak stays the process's lifetime one


def peak_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    try:
        with open("/proc/self/status") as f:  # VmHWM: peak RSS since reset_peak
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # lifetime peak (KiB on Linux)


class MemoryCap:
    """`memory_cap_mb`: a hard cap that turns over-use into an OOM (CUDA: allocator fraction; CPU: rlimit)."""

    def __init__(self, cfg: TrainConfig, device: torch.device):
        self.cfg, self.device = cfg, device
        self.saved: tuple[int, int] | None = None  # the address-space rlimit it replaced (CPU)

    def __enter__(self):
        cap, frac = self.cfg.memory_cap_mb, self.cfg.gpu_memory_fraction
        if self.device.type == "cuda":
            total = torch.cuda.get_device_properties(self.device).total_memory
            fractions = [f for f in (frac, cap and cap * 2**20 / total) if f]
            if fractions:
                torch.cuda.set_per_process_memory_fraction(min(1.0, min(fractions)), self.device)
        elif cap:
            # Address-space limit above what the process already maps, so only new allocations count.
            with open("/proc/self/status") as f:
                vm_kb = next(int(line.split()[1]) for line in f if line.startswith("VmSize:"))
            self.saved = resource.getrlimit(resource.RLIMIT_AS)
            resource.setrlimit(resource.RLIMIT_AS, (vm_kb * 1024 + cap * 2**20, self.saved[1]))
        return self

    def __exit__(self, *exc):
        if self.saved is not None:
            resource.setrlimit(resource.RLIMIT_AS, self.saved)
        elif self.device.type == "cuda" and (self.cfg.memory_cap_mb or self.cfg.gpu_memory_fraction):
            torch.cuda.set_per_process_memory_fraction(1.0, self.device)


def release(device: torch.device) -> float:
    """Frees what the run left, so the next run in this process starts clean; returns the run's peak MB."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    peak = round(peak_mb(device), 1)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return peak
