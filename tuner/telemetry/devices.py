"""What is read from NVML, and one GPU's reader: its handle, the calls that still work on it, its errors."""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tuner.telemetry.window import GpuSample

MB = 1024 * 1024

# NVML error codes after which a call will never succeed on this GPU, so it is dropped for good.
_NOT_SUPPORTED, _NO_PERMISSION, _FUNCTION_NOT_FOUND = 3, 4, 13
_PERMANENT_ERRORS = {_NOT_SUPPORTED, _NO_PERMISSION, _FUNCTION_NOT_FOUND}
_NVML_VALUE_NOT_AVAILABLE = 2**63  # pynvml passes 2**64-1 through on some versions


def text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def error_text(err: BaseException) -> str:
    """An NVML or Ray error as a telemetry notice words it: its type, then its message if it has one."""
    return f"{type(err).__name__}: {text(err)}" if str(err) else type(err).__name__


def normalize_uuid(uuid: str) -> str:
    uuid = uuid.strip().lower()
    return uuid.split("-", 1)[1] if uuid.startswith(("gpu-", "mig-")) else uuid


def pid_visible(pid: int) -> bool:
    """Whether pid is a live process in our PID namespace (signal 0 checks without signalling)."""
    if pid <= 0 or os.name != "posix":
        return False
    try:
        os.kill(pid, 0)
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def _read_utilization(nvml, fn, handle) -> dict:
    rates = fn(handle)
    return {"util_gpu": float(rates.gpu), "util_mem": float(rates.memory)}


def _read_processes(nvml, fn, handle) -> dict:
    def used_mb(proc) -> float | None:
        used = getattr(proc, "usedGpuMemory", None)
        return None if used is None or used >= _NVML_VALUE_NOT_AVAILABLE else used / MB

    return {"pids": {int(p.pid): used_mb(p) for p in fn(handle)}}


def _with_constant(nvml, fn, handle, constant: str, default: int) -> float:
    """fn(handle, nvml.<constant>): which temperature sensor or clock to read; fakes may lack the name."""
    return float(fn(handle, getattr(nvml, constant, default)))


@dataclass(frozen=True)
class Field:
    name: str  # as reported in info()["unsupported"]
    calls: tuple[str, ...]  # NVML functions to try, newest API first
    read: Callable[[Any, Callable, Any], dict]  # (nvml, function, handle) -> GpuSample attributes


FIELDS = (
    Field("utilization", ("nvmlDeviceGetUtilizationRates",), _read_utilization),
    Field("memory", ("nvmlDeviceGetMemoryInfo",), lambda nvml, fn, h: {"mem_used_mb": fn(h).used / MB}),
    Field("power", ("nvmlDeviceGetPowerUsage",), lambda nvml, fn, h: {"power_w": fn(h) / 1000.0}),
    Field(
        "energy",
        ("nvmlDeviceGetTotalEnergyConsumption",),
        lambda nvml, fn, h: {"energy_mj": float(fn(h))},
    ),
    Field(
        "temperature",
        ("nvmlDeviceGetTemperature",),
        lambda nvml, fn, h: {"temp_c": _with_constant(nvml, fn, h, "NVML_TEMPERATURE_GPU", 0)},
    ),
    Field(
        "sm_clock",
        ("nvmlDeviceGetClockInfo",),
        lambda nvml, fn, h: {"sm_clock_mhz": _with_constant(nvml, fn, h, "NVML_CLOCK_SM", 1)},
    ),
    Field(
        "mem_clock",
        ("nvmlDeviceGetClockInfo",),
        lambda nvml, fn, h: {"mem_clock_mhz": _with_constant(nvml, fn, h, "NVML_CLOCK_MEM", 2)},
    ),
    Field(
        "throttle_reasons",
        ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"),
        lambda nvml, fn, h: {"throttle_reasons": int(fn(h))},
    ),
    Field("processes", ("nvmlDeviceGetComputeRunningProcesses",), _read_processes),
)


def _optional(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except Exception:
        return None


@dataclass(kw_only=True)
class GpuReader:
    """One GPU as NVML sees it. A field whose calls all fail for good is dropped (`unsupported`); other
    failures leave a gap in that sample and are counted (`errors`)."""

    nvml: Any
    index: int
    handle: Any
    name: str
    uuid: str
    memory_total_mb: float | None
    calls: dict[str, list[Callable]]  # field -> remaining candidate functions
    unsupported: dict[str, str] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    last_error: str | None = None

    @classmethod
    def open(cls, nvml: Any, index: int) -> GpuReader:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        gpu = cls(
            nvml=nvml,
            index=index,
            handle=handle,
            name=text(_optional(lambda: nvml.nvmlDeviceGetName(handle)) or "unknown"),
            uuid=text(_optional(lambda: nvml.nvmlDeviceGetUUID(handle)) or ""),
            memory_total_mb=_optional(lambda: nvml.nvmlDeviceGetMemoryInfo(handle).total / MB),
            calls={},
        )
        for fld in FIELDS:
            found = [getattr(nvml, name) for name in fld.calls if callable(getattr(nvml, name, None))]
            gpu.calls[fld.name] = found
            if not found:
                gpu.unsupported[fld.name] = f"the NVML module lacks {' / '.join(fld.calls)}"
        return gpu

    def matches(self, wanted: int | str) -> bool:
        """Whether `wanted` (an NVML index, or a UUID with or without its GPU-/MIG- prefix) names this GPU."""
        if isinstance(wanted, str) and not wanted.strip().isdigit():
            return normalize_uuid(self.uuid) == normalize_uuid(wanted)
        return self.index == int(wanted)

    def describe(self) -> dict:
        return {
            "index": self.index,
            "name": self.name,
            "uuid": self.uuid,
            "memory_total_mb": self.memory_total_mb,
        }

    def read(self, t: float, with_energy: bool) -> GpuSample:
        sample = GpuSample(t=t)
        for fld in FIELDS:
            if fld.name != "energy" or with_energy:
                for attr, value in self._read_field(fld).items():
                    setattr(sample, attr, value)
        return sample

    def _read_field(self, fld: Field) -> dict:
        candidates = self.calls[fld.name]
        while candidates:
            try:
                return fld.read(self.nvml, candidates[0], self.handle)
            except Exception as err:
                if getattr(err, "value", None) not in _PERMANENT_ERRORS:
                    self.errors[fld.name] = self.errors.get(fld.name, 0) + 1
                    self.last_error = f"{fld.name}: {error_text(err)}"
                    return {}
                candidates.pop(0)  # try the older API, if any
                if not candidates:
                    self.unsupported[fld.name] = error_text(err)
        return {}


def shutdown_nvml(nvml: Any) -> None:
    with contextlib.suppress(Exception):
        nvml.nvmlShutdown()


def open_nvml(nvml: Any) -> tuple[Any, list[GpuReader], str | None]:
    """NVML (a module, or its import path; default pynvml) initialised and its GPUs opened.

    Never raises: where there is no GPU to read, the list is empty and the reason says why.
    """
    if nvml is None or isinstance(nvml, str):
        name = nvml or "pynvml"
        try:
            nvml = importlib.import_module(name)
        except Exception as err:  # ImportError, or a broken install
            return None, [], f"cannot import {name} ({error_text(err)})"
    try:
        nvml.nvmlInit()
    except Exception as err:
        return nvml, [], f"nvmlInit failed ({error_text(err)})"
    try:
        gpus = [GpuReader.open(nvml, index) for index in range(int(nvml.nvmlDeviceGetCount()))]
        reason = None if gpus else "NVML sees no GPUs"
    except Exception as err:
        gpus, reason = [], f"cannot enumerate GPUs ({error_text(err)})"
    if not gpus:
        shutdown_nvml(nvml)
    return nvml, gpus, reason


class PidCache:
    """Whether each pid NVML reports is a process we can see, remembered (pids are few and long-lived)."""

    def __init__(self, limit: int = 4096):
        self.limit = limit
        self.seen: dict[int, bool] = {}

    def visible(self, pid: int) -> bool:
        if pid not in self.seen:
            if len(self.seen) > self.limit:
                self.seen.clear()
            self.seen[pid] = pid_visible(pid)
        return self.seen[pid]

    def all_visible(self) -> bool:
        return all(self.seen.values())
