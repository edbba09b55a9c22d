"""GPU telemetry: one NVML sampler per GPU node, joined to the time windows trials report.

`GpuSampler` is plain Python (a sampling thread, a ring buffer per GPU and the window math) so it can be
tested with a fake NVML module; `TelemetryActor` is the thin Ray actor around it that `start_telemetry`
pins to each node. Trials report `window_t0`/`window_t1` in time.time(), plus `gpu` (NVML index or UUID),
`node`, `tokens` and `pid`; `fetch_window` + `annotate_trial` turn that into energy, J/token and a
`telemetry_trusted` flag. Nothing here raises into the search: a node without NVML answers
`available: False` with a reason, and `describe_unavailable` words it once.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import importlib
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

MB = 1024 * 1024

# NVML clock-event reason bits (stable across the Throttle/ClocksEvent renames).
SW_POWER_CAP = 0x04
HW_SLOWDOWN = 0x08
SW_THERMAL_SLOWDOWN = 0x20
HW_THERMAL_SLOWDOWN = 0x40
HW_POWER_BRAKE_SLOWDOWN = 0x80
THERMAL_REASONS = SW_THERMAL_SLOWDOWN | HW_THERMAL_SLOWDOWN
POWER_REASONS = SW_POWER_CAP | HW_POWER_BRAKE_SLOWDOWN

# NVML error codes after which a call will never succeed on this GPU, so it is dropped for good.
_NOT_SUPPORTED, _NO_PERMISSION, _FUNCTION_NOT_FOUND = 3, 4, 13
_PERMANENT_ERRORS = {_NOT_SUPPORTED, _NO_PERMISSION, _FUNCTION_NOT_FOUND}
_NVML_VALUE_NOT_AVAILABLE = 2**63  # pynvml passes 2**64-1 through on some versions


@dataclass(slots=True)
class GpuSample:
    """One reading of one GPU; a field is None where NVML could not give it."""

    t: float  # time.time()
    util_gpu: float | None = None  # %
    util_mem: float | None = None  # % of time the memory controller was busy
    mem_used_mb: float | None = None
    power_w: float | None = None
    energy_mj: float | None = None  # total energy counter since driver load
    temp_c: float | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    throttle_reasons: int | None = None  # NVML clock-event reason bitmask
    pids: dict[int, float | None] | None = None  # compute processes -> used MB
    foreign_pids: bool = False  # some pid is not a process we can see (other PID namespace)


# --------------------------------------------------------------------------------------------------------
# Window math (pure functions over samples)


def _mean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def _peak(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _share(masks: Iterable[int | None], bits: int) -> float | None:
    present = [m for m in masks if m is not None]
    return sum(1 for m in present if m & bits) / len(present) if present else None


def _interp(ts: Sequence[float], ys: Sequence[float], t: float) -> float:
    """Piecewise-linear value at t, clamped to the ends (ts ascending)."""
    if t <= ts[0]:
        return ys[0]
    if t >= ts[-1]:
        return ys[-1]
    i = bisect.bisect_left(ts, t)
    span = ts[i] - ts[i - 1]
    frac = (t - ts[i - 1]) / span if span > 0 else 1.0
    return ys[i - 1] + frac * (ys[i] - ys[i - 1])


def _integrate(ts: Sequence[float], ys: Sequence[float], a: float, b: float) -> float:
    """Trapezoid integral of the piecewise-linear curve (ts, ys) over [a, b]."""
    knots = [(a, _interp(ts, ys, a)), *((t, y) for t, y in zip(ts, ys) if a < t < b), (b, _interp(ts, ys, b))]
    return sum((t2 - t1) * (y1 + y2) / 2 for (t1, y1), (t2, y2) in zip(knots, knots[1:]))


def _bracket(samples: Sequence[GpuSample], t0: float, t1: float) -> list[GpuSample]:
    """Samples inside [t0, t1] plus the nearest one on either side, so edges can be interpolated."""
    inside = [k for k, s in enumerate(samples) if t0 <= s.t <= t1]
    if not inside:
        return []
    lo, hi = max(inside[0] - 1, 0), min(inside[-1] + 1, len(samples) - 1)
    return list(samples[lo : hi + 1])


def _energy(samples: Sequence[GpuSample], t0: float, t1: float) -> tuple[float | None, str | None]:
    """Energy over [t0, t1], clamped to what was sampled.

    The counter is read less often than power (it is the one slow NVML call), so its difference between
    the first and last reads inside the window is topped up with integrated power at the two edges.
    Without a usable counter (none, or reset by a driver reload) it is all integrated power.
    """
    near = _bracket(samples, t0, t1)
    if not near:
        return None, None
    a, b = max(t0, near[0].t), min(t1, near[-1].t)
    powered = [(s.t, s.power_w) for s in near if s.power_w is not None]

    def integrated(x: float, y: float) -> float:
        ts, watts = zip(*powered)
        return _integrate(ts, watts, x, y)

    reads = [(s.t, s.energy_mj) for s in near if s.energy_mj is not None and a <= s.t <= b]
    if len(reads) >= 2 and reads[-1][1] >= reads[0][1]:
        (first_t, first_mj), (last_t, last_mj) = reads[0], reads[-1]
        joules = (last_mj - first_mj) / 1000.0
        if powered:
            joules += integrated(a, first_t) + integrated(last_t, b)
        elif last_t > first_t:  # no power readings: the counter's mean power covers the edges
            joules *= (b - a) / (last_t - first_t)
        return joules, "counter"
    if powered:
        return integrated(a, b), "integrated"
    return None, None


def empty_window(reason: str | None = None, available: bool = False, **extra: Any) -> dict:
    """The answer for a window with nothing in it; every statistic is None."""
    return {
        "samples": 0,
        "available": available,
        "reason": reason,
        **dict.fromkeys(_WINDOW_STATS),
        "other_pids": [],
        "shared": False,
        **extra,
    }


_WINDOW_STATS = (
    "util_mean",
    "util_peak",
    "mem_util_mean",
    "power_mean_w",
    "power_peak_w",
    "energy_j",
    "energy_source",
    "mem_peak_mb",
    "temp_max_c",
    "sm_clock_mean_mhz",
    "throttled_share",
    "thermal_share",
    "power_share",
    "slowdown_share",
    "covered_s",
)


def summarize_window(
    samples: Sequence[GpuSample], t0: float, t1: float, caller_pids: Iterable[int] = ()
) -> dict:
    """Statistics of the samples with t0 <= t <= t1 (samples in time order).

    `other_pids` are the compute processes seen on the GPU that are not `caller_pids`. When NVML's pids
    live in another PID namespace (containers) they cannot be matched to the caller, so `shared` falls
    back to "more than one process used the GPU in the window".
    """
    inside = [s for s in samples if t0 <= s.t <= t1]
    if not inside:
        return empty_window("no samples in the window", available=True)
    caller = {int(p) for p in caller_pids}
    seen: set[int] = set()
    for s in inside:
        seen.update(s.pids or ())
    pids_comparable = not any(s.foreign_pids for s in inside)
    other = sorted(seen - caller) if pids_comparable else sorted(seen)
    shared = bool(other) if pids_comparable and caller else len(seen) > 1
    energy_j, energy_source = _energy(samples, t0, t1)
    masks = [s.throttle_reasons for s in inside]
    return {
        "samples": len(inside),
        "available": True,
        "reason": None,
        "util_mean": _mean(s.util_gpu for s in inside),
        "util_peak": _peak(s.util_gpu for s in inside),
        "mem_util_mean": _mean(s.util_mem for s in inside),
        "power_mean_w": _mean(s.power_w for s in inside),
        "power_peak_w": _peak(s.power_w for s in inside),
        "energy_j": energy_j,
        "energy_source": energy_source,
        "mem_peak_mb": _peak(s.mem_used_mb for s in inside),
        "temp_max_c": _peak(s.temp_c for s in inside),
        "sm_clock_mean_mhz": _mean(s.sm_clock_mhz for s in inside),
        "throttled_share": _share(masks, THERMAL_REASONS | POWER_REASONS),
        "thermal_share": _share(masks, THERMAL_REASONS),
        "power_share": _share(masks, POWER_REASONS),
        # What distrusts a speed figure: thermal slowdowns and the hardware power brake. A loaded GPU sits
        # at its software power cap most of the time (96% of samples on an H200 under bf16 matmuls): that
        # is its normal operating point, reported as power_share, not a distortion.
        "slowdown_share": _share(masks, THERMAL_REASONS | HW_POWER_BRAKE_SLOWDOWN),
        "covered_s": inside[-1].t - inside[0].t,
        "other_pids": other,
        "shared": shared,
        "pids_comparable": pids_comparable,
        "processes_seen": len(seen),
    }


_TIMELINE_FIELDS = (
    "util_gpu",
    "util_mem",
    "mem_used_mb",
    "power_w",
    "temp_c",
    "sm_clock_mhz",
    "mem_clock_mhz",
)


def downsample(samples: Sequence[GpuSample], t0: float, t1: float, max_points: int = 200) -> list[dict]:
    """The window's samples as plot points, averaged in equal-count buckets down to max_points."""
    inside = [s for s in samples if t0 <= s.t <= t1]
    per_bucket = max(1, math.ceil(len(inside) / max(1, max_points)))
    points = []
    for start in range(0, len(inside), per_bucket):
        bucket = inside[start : start + per_bucket]
        point = {"t": sum(s.t for s in bucket) / len(bucket)}
        for name in _TIMELINE_FIELDS:
            point[name] = _mean(getattr(s, name) for s in bucket)
        point["throttled"] = _share((s.throttle_reasons for s in bucket), THERMAL_REASONS | POWER_REASONS)
        point["processes"] = max(len(s.pids or ()) for s in bucket)
        points.append(point)
    return points


# --------------------------------------------------------------------------------------------------------
# Sampling


def _pid_visible(pid: int) -> bool:
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


@dataclass(frozen=True)
class _Field:
    name: str  # as reported in info()["unsupported"]
    calls: tuple[str, ...]  # NVML functions to try, newest API first
    read: Callable[[Any, Callable, Any], dict]  # (nvml, function, handle) -> GpuSample attributes


_FIELDS = (
    _Field("utilization", ("nvmlDeviceGetUtilizationRates",), _read_utilization),
    _Field("memory", ("nvmlDeviceGetMemoryInfo",), lambda nvml, fn, h: {"mem_used_mb": fn(h).used / MB}),
    _Field("power", ("nvmlDeviceGetPowerUsage",), lambda nvml, fn, h: {"power_w": fn(h) / 1000.0}),
    _Field(
        "energy",
        ("nvmlDeviceGetTotalEnergyConsumption",),
        lambda nvml, fn, h: {"energy_mj": float(fn(h))},
    ),
    _Field(
        "temperature",
        ("nvmlDeviceGetTemperature",),
        lambda nvml, fn, h: {"temp_c": float(fn(h, getattr(nvml, "NVML_TEMPERATURE_GPU", 0)))},
    ),
    _Field(
        "sm_clock",
        ("nvmlDeviceGetClockInfo",),
        lambda nvml, fn, h: {"sm_clock_mhz": float(fn(h, getattr(nvml, "NVML_CLOCK_SM", 1)))},
    ),
    _Field(
        "mem_clock",
        ("nvmlDeviceGetClockInfo",),
        lambda nvml, fn, h: {"mem_clock_mhz": float(fn(h, getattr(nvml, "NVML_CLOCK_MEM", 2)))},
    ),
    _Field(
        "throttle_reasons",
        ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"),
        lambda nvml, fn, h: {"throttle_reasons": int(fn(h))},
    ),
    _Field("processes", ("nvmlDeviceGetComputeRunningProcesses",), _read_processes),
)


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _describe_error(err: BaseException) -> str:
    return f"{type(err).__name__}: {_text(err)}" if str(err) else type(err).__name__


def _normalize_uuid(uuid: str) -> str:
    uuid = uuid.strip().lower()
    return uuid.split("-", 1)[1] if uuid.startswith(("gpu-", "mig-")) else uuid


@dataclass
class _Gpu:
    index: int
    handle: Any
    name: str
    uuid: str
    memory_total_mb: float | None
    calls: dict[str, list[Callable]]  # field -> remaining candidate functions
    unsupported: dict[str, str] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    last_error: str | None = None
    buffer: collections.deque = field(default_factory=collections.deque)


class GpuSampler:
    """Samples every GPU NVML sees at `hz` into a ring buffer per GPU and answers window queries.

    `nvml` is a module (or its import path; default `pynvml`) so tests can pass a fake. Construction never
    raises: without NVML the sampler is `available == False` with a `reason`, and queries answer empty.
    """

    def __init__(
        self,
        nvml: Any = None,
        hz: float = 5.0,
        history_s: float = 3600.0,
        node_id: str | None = None,
        exporter: Any = None,
        export_hz: float = 1.0,
        energy_hz: float = 1.0,
        clock: Callable[[], float] = time.time,
    ):
        self.hz = float(hz)
        self.node_id = node_id
        self.clock = clock
        self.exporter = exporter
        self.export_period_s = 1.0 / export_hz if export_hz > 0 else math.inf
        self.maxlen = max(2, int(math.ceil(history_s * self.hz)))
        # the energy counter costs ~3 ms of CPU a read (H200), ~100x the other calls together: read it
        # every few sweeps; window energy tops it up with power at the edges
        self.energy_every = max(1, round(self.hz / energy_hz)) if energy_hz > 0 else 1
        self.available = False
        self.reason: str | None = None
        self.gpus: list[_Gpu] = []
        self.sweeps = 0
        self.sweep_cost_s = 0.0  # wall time in NVML (much of it waiting on the driver)
        self.sweep_cpu_s = 0.0  # CPU time of the sampling thread
        self.overruns = 0
        self.exports = 0
        self.export_error: str | None = None
        self._last_export = -math.inf
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid_seen: dict[int, bool] = {}
        self.nvml = self._load(nvml)
        if self.nvml is not None:
            self._open()

    # -- setup ---------------------------------------------------------------------------------------------

    def _load(self, nvml: Any) -> Any:
        if nvml is not None and not isinstance(nvml, str):
            return nvml
        name = nvml or "pynvml"
        try:
            return importlib.import_module(name)
        except Exception as err:  # ImportError, or a broken install
            self.reason = f"cannot import {name} ({_describe_error(err)})"
            return None

    def _open(self) -> None:
        nvml = self.nvml
        try:
            nvml.nvmlInit()
        except Exception as err:
            self.reason = f"nvmlInit failed ({_describe_error(err)})"
            return
        try:
            count = int(nvml.nvmlDeviceGetCount())
            for index in range(count):
                self.gpus.append(self._describe_gpu(index))
        except Exception as err:
            self.reason = f"cannot enumerate GPUs ({_describe_error(err)})"
            self.gpus = []
            self._shutdown_nvml()
            return
        if not self.gpus:
            self.reason = "NVML sees no GPUs"
            self._shutdown_nvml()
            return
        self.available = True

    def _describe_gpu(self, index: int) -> _Gpu:
        nvml = self.nvml
        handle = nvml.nvmlDeviceGetHandleByIndex(index)

        def optional(read: Callable[[], Any]) -> Any:
            try:
                return read()
            except Exception:
                return None

        total = optional(lambda: nvml.nvmlDeviceGetMemoryInfo(handle).total / MB)
        gpu = _Gpu(
            index=index,
            handle=handle,
            name=_text(optional(lambda: nvml.nvmlDeviceGetName(handle)) or "unknown"),
            uuid=_text(optional(lambda: nvml.nvmlDeviceGetUUID(handle)) or ""),
            memory_total_mb=total,
            calls={},
        )
        for fld in _FIELDS:
            found = [getattr(nvml, name) for name in fld.calls if callable(getattr(nvml, name, None))]
            gpu.calls[fld.name] = found
            if not found:
                gpu.unsupported[fld.name] = f"the NVML module lacks {' / '.join(fld.calls)}"
        gpu.buffer = collections.deque(maxlen=self.maxlen)
        return gpu

    def _shutdown_nvml(self) -> None:
        with contextlib.suppress(Exception):
            self.nvml.nvmlShutdown()

    # -- sampling ------------------------------------------------------------------------------------------

    def _read(self, gpu: _Gpu) -> GpuSample:
        sample = GpuSample(t=self.clock())
        energy_due = self.sweeps % self.energy_every == 0
        for fld in _FIELDS:
            if fld.name == "energy" and not energy_due:
                continue
            candidates = gpu.calls[fld.name]
            while candidates:
                try:
                    for attr, value in fld.read(self.nvml, candidates[0], gpu.handle).items():
                        setattr(sample, attr, value)
                    break
                except Exception as err:
                    if getattr(err, "value", None) not in _PERMANENT_ERRORS:
                        gpu.errors[fld.name] = gpu.errors.get(fld.name, 0) + 1
                        gpu.last_error = f"{fld.name}: {_describe_error(err)}"
                        break
                    candidates.pop(0)  # try the older API, if any
                    if not candidates:
                        gpu.unsupported[fld.name] = _describe_error(err)
        if sample.pids:
            sample.foreign_pids = not all(self._visible(pid) for pid in sample.pids)
        return sample

    def _visible(self, pid: int) -> bool:
        if pid not in self._pid_seen:
            if len(self._pid_seen) > 4096:
                self._pid_seen.clear()
            self._pid_seen[pid] = _pid_visible(pid)
        return self._pid_seen[pid]

    def sample_once(self) -> None:
        """Reads every GPU once into its buffer (the thread calls this; tests may call it directly)."""
        if not self.available:
            return
        started, started_cpu = time.perf_counter(), time.thread_time()
        readings = [(gpu, self._read(gpu)) for gpu in self.gpus]
        with self._lock:
            for gpu, sample in readings:
                gpu.buffer.append(sample)
        self.sweeps += 1
        self.sweep_cost_s += time.perf_counter() - started
        self.sweep_cpu_s += time.thread_time() - started_cpu
        self._maybe_export(readings)

    def _maybe_export(self, readings: list[tuple[_Gpu, GpuSample]]) -> None:
        now = time.monotonic()
        if self.exporter is None or now - self._last_export < self.export_period_s:
            return
        self._last_export = now
        try:
            for gpu, sample in readings:
                self.exporter.export(self.node_id, gpu.index, sample)
            self.exports += 1
        except Exception as err:
            self.export_error = _describe_error(err)

    def _run(self) -> None:
        period = 1.0 / self.hz
        deadline = time.monotonic()
        while not self._stop.is_set():
            try:
                self.sample_once()
            except Exception as err:  # keep sampling whatever one sweep hit
                self.reason = f"sampling error ({_describe_error(err)})"
            deadline += period
            now = time.monotonic()
            if now > deadline:  # fell behind: skip the missed ticks rather than burst
                self.overruns += 1
                deadline = now
            self._stop.wait(deadline - now)

    def start(self) -> GpuSampler:
        if self.available and self._thread is None and self.hz > 0:
            self._thread = threading.Thread(target=self._run, name="gpu-telemetry", daemon=True)
            self._thread.start()
        return self

    def pause(self) -> None:
        """Stops the sampling thread and keeps NVML open and the samples; `start` resumes."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None
        self._stop.clear()

    def stop(self) -> None:
        self.pause()
        if self.available:
            self._shutdown_nvml()
            self.available = False
            self.reason = "stopped"

    # -- queries -------------------------------------------------------------------------------------------

    def _find(self, gpu: int | str) -> _Gpu | None:
        if isinstance(gpu, str) and not gpu.strip().isdigit():
            wanted = _normalize_uuid(gpu)
            return next((g for g in self.gpus if _normalize_uuid(g.uuid) == wanted), None)
        index = int(gpu)
        return next((g for g in self.gpus if g.index == index), None)

    def samples(self, gpu: int | str) -> list[GpuSample]:
        found = self._find(gpu)
        if found is None:
            return []
        with self._lock:
            return list(found.buffer)

    def _query(self, gpu: int | str, answer: Callable[[_Gpu, list[GpuSample]], dict]) -> dict:
        where = {"node": self.node_id, "gpu": gpu}
        if not self.available and not self.sweeps:
            return empty_window(self.reason or "telemetry unavailable", **where)
        try:
            found = self._find(gpu)
        except (TypeError, ValueError):
            found = None
        if found is None:
            return empty_window(f"no GPU {gpu!r} on this node", available=self.available, **where)
        try:
            with self._lock:
                samples = list(found.buffer)
            return {**answer(found, samples), **where}
        except Exception as err:
            return empty_window(f"query failed ({_describe_error(err)})", available=self.available, **where)

    def window(self, gpu: int | str, t0: float, t1: float, caller_pids: Iterable[int] = ()) -> dict:
        """Statistics of GPU `gpu` (NVML index or UUID) over [t0, t1] in time.time(); never raises."""
        pids = tuple(caller_pids or ())
        return self._query(gpu, lambda g, samples: summarize_window(samples, t0, t1, pids))

    def timeline(self, gpu: int | str, t0: float, t1: float, max_points: int = 200) -> dict:
        """Downsampled samples of [t0, t1] for plots: {"points": [{"t", "util_gpu", ...}], ...}."""

        def answer(g: _Gpu, samples: list[GpuSample]) -> dict:
            points = downsample(samples, t0, t1, max_points)
            inside = sum(1 for s in samples if t0 <= s.t <= t1)
            return {"available": True, "samples": inside, "t0": t0, "t1": t1, "points": points}

        result = self._query(gpu, answer)
        result.setdefault("points", [])
        return result

    def info(self) -> dict:
        sweeps = max(self.sweeps, 1)
        return {
            "available": self.available,
            "reason": self.reason,
            "node_id": self.node_id,
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "hz": self.hz,
            "energy_every_sweeps": self.energy_every,
            "history_samples": self.maxlen,
            "gpus": [
                {"index": g.index, "name": g.name, "uuid": g.uuid, "memory_total_mb": g.memory_total_mb}
                for g in self.gpus
            ],
            "unsupported": {g.index: dict(g.unsupported) for g in self.gpus if g.unsupported},
            "errors": {g.index: {**g.errors, "last": g.last_error} for g in self.gpus if g.errors},
            "sweeps": self.sweeps,
            "sweep_ms_mean": 1000.0 * self.sweep_cost_s / sweeps,
            "sweep_cpu_ms_mean": 1000.0 * self.sweep_cpu_s / sweeps,
            # share of one CPU core the sampling thread keeps busy
            "cpu_duty": self.sweep_cpu_s / sweeps * self.hz,
            "overruns": self.overruns,
            "exports": self.exports,
            "export_error": self.export_error,
            # False when NVML reports pids from another PID namespace (containers): no per-caller match
            "pids_comparable": all(self._pid_seen.values()),
        }


# --------------------------------------------------------------------------------------------------------
# Ray: metrics export, the actor, and starting one per node


class RayMetricsExporter:
    """Publishes the latest sample per GPU as Ray gauges (Prometheus: ray_tuner_gpu_*)."""

    GAUGES = {
        "util_gpu": ("tuner_gpu_utilization_percent", "GPU utilisation (NVML), %"),
        "util_mem": ("tuner_gpu_memory_utilization_percent", "GPU memory-controller utilisation, %"),
        "mem_used_mb": ("tuner_gpu_memory_used_mb", "GPU memory used, MiB"),
        "power_w": ("tuner_gpu_power_watts", "GPU power draw, W"),
        "temp_c": ("tuner_gpu_temperature_celsius", "GPU temperature, C"),
        "sm_clock_mhz": ("tuner_gpu_sm_clock_mhz", "GPU SM clock, MHz"),
        "throttled": ("tuner_gpu_throttled", "1 while a thermal or power clock-throttle reason is active"),
    }

    def __init__(self):
        from ray.util.metrics import Gauge

        self.gauges = {
            key: Gauge(name, description=text, tag_keys=("node", "gpu"))
            for key, (name, text) in self.GAUGES.items()
        }

    def export(self, node_id: str | None, gpu: int, sample: GpuSample) -> None:
        tags = {"node": str(node_id), "gpu": str(gpu)}
        reasons = sample.throttle_reasons
        values = {key: getattr(sample, key, None) for key in self.GAUGES}
        throttled = None if reasons is None else bool(reasons & (THERMAL_REASONS | POWER_REASONS))
        values["throttled"] = throttled
        for key, value in values.items():
            if value is not None:
                self.gauges[key].set(float(value), tags=tags)


@ray.remote(num_cpus=0)
class TelemetryActor:
    """One per node: a GpuSampler running in this actor's background thread."""

    def __init__(
        self,
        hz: float = 5.0,
        history_s: float = 3600.0,
        nvml_module: str | None = None,
        export_metrics: bool = True,
        energy_hz: float = 1.0,
    ):
        node_id = ray.get_runtime_context().get_node_id()
        exporter, export_error = None, None
        if export_metrics:
            try:
                exporter = RayMetricsExporter()
            except Exception as err:
                export_error = f"metrics export off ({_describe_error(err)})"
        self.sampler = GpuSampler(
            nvml_module, hz=hz, history_s=history_s, node_id=node_id, exporter=exporter, energy_hz=energy_hz
        )
        self.sampler.export_error = export_error
        self.sampler.start()

    def info(self) -> dict:
        return self.sampler.info()

    def window(self, gpu: int | str, t0: float, t1: float, caller_pids: Sequence[int] = ()) -> dict:
        return self.sampler.window(gpu, t0, t1, caller_pids)

    def timeline(self, gpu: int | str, t0: float, t1: float, max_points: int = 200) -> dict:
        return self.sampler.timeline(gpu, t0, t1, max_points)

    def pause(self) -> None:
        self.sampler.pause()

    def resume(self) -> None:
        self.sampler.start()

    def stop(self) -> dict:
        self.sampler.stop()
        return self.sampler.info()


def telemetry_actor_name(node_id: str) -> str:
    return f"gpu-telemetry-{node_id}"


def telemetry_nodes(nodes: Iterable[Mapping], all_nodes: bool = False) -> list[str]:
    """Ids of the alive nodes (as ray.nodes() lists them) that get a telemetry actor."""
    return [
        node["NodeID"]
        for node in nodes
        if node.get("Alive") and (all_nodes or node.get("Resources", {}).get("GPU", 0) > 0)
    ]


def start_telemetry(
    hz: float = 5.0,
    all_nodes: bool = False,
    history_s: float = 3600.0,
    nvml_module: str | None = None,
    export_metrics: bool = True,
    energy_hz: float = 1.0,
) -> dict[str, Any]:
    """Starts (or finds) one TelemetryActor per alive node with GPUs (every alive node if all_nodes).

    Each is pinned to its node (hard affinity) and takes no CPU. Named per node, so a second call, or
    another process of the same job, gets the running actor back instead of a second sampler.
    """
    actors = {}
    for node_id in telemetry_nodes(ray.nodes(), all_nodes):
        actors[node_id] = TelemetryActor.options(
            name=telemetry_actor_name(node_id),
            get_if_exists=True,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
        ).remote(
            hz=hz,
            history_s=history_s,
            nvml_module=nvml_module,
            export_metrics=export_metrics,
            energy_hz=energy_hz,
        )
    return actors


def fetch_window(actors: Mapping[str, Any], trial_metrics: Mapping, timeout_s: float = 30.0) -> dict:
    """The window a trial reported (`node`, `gpu`, `window_t0`, `window_t1`, optional `pid`); never raises."""
    node, gpu = trial_metrics.get("node"), trial_metrics.get("gpu")
    t0, t1 = trial_metrics.get("window_t0"), trial_metrics.get("window_t1")
    if None in (gpu, t0, t1):
        return empty_window("trial reported no gpu/window_t0/window_t1", node=node, gpu=gpu)
    actor = actors.get(node) if node is not None else None
    if actor is None and node is None and len(actors) == 1:
        actor = next(iter(actors.values()))
    if actor is None:
        return empty_window(f"no telemetry actor on node {node}", node=node, gpu=gpu)
    pid = trial_metrics.get("pid")
    try:
        ref = actor.window.remote(gpu, float(t0), float(t1), [int(pid)] if pid is not None else [])
        return ray.get(ref, timeout=timeout_s)
    except Exception as err:
        return empty_window(f"telemetry query failed ({_describe_error(err)})", node=node, gpu=gpu)


# --------------------------------------------------------------------------------------------------------
# Joining and reporting (no Ray)


def annotate_trial(
    trial_metrics: Mapping, window: Mapping, max_throttled_share: float = 0.05, min_samples: int = 3
) -> dict:
    """trial_metrics plus the GPU's view of the trial's window.

    joules_per_token = energy over the window / `tokens` the trial processed in it. The numbers are
    `telemetry_trusted` only with at least min_samples samples, no other process on the GPU (energy is
    per GPU, not per process) and clocks throttled for at most max_throttled_share of the samples.
    """
    samples = int(window.get("samples") or 0)
    energy_j = window.get("energy_j")
    # Tokens processed inside the window (the steady phase), not the whole run's.
    tokens = trial_metrics.get("window_tokens") or trial_metrics.get("tokens")
    throttled = window.get("slowdown_share", window.get("throttled_share"))
    shared = bool(window.get("shared"))
    if not window.get("available", False) or samples == 0:
        why = window.get("reason") or "no telemetry samples in the window"
    elif samples < min_samples:
        why = f"only {samples} samples in the window"
    elif shared:
        why = f"GPU shared with pids {list(window.get('other_pids') or [])}"
    elif throttled is not None and throttled > max_throttled_share:
        why = f"clocks slowed (thermal / power brake) in {throttled:.0%} of samples"
    else:
        why = None
    return {
        **trial_metrics,
        "gpu_util_mean": window.get("util_mean"),
        "gpu_power_mean_w": window.get("power_mean_w"),
        "energy_j": energy_j,
        "energy_source": window.get("energy_source"),
        "joules_per_token": energy_j / tokens if energy_j is not None and tokens else None,
        "gpu_temp_max_c": window.get("temp_max_c"),
        "throttled_share": window.get("throttled_share"),
        "slowdown_share": throttled,
        "shared": shared,
        "telemetry_samples": samples,
        "telemetry_trusted": why is None,
        "telemetry_note": why,
    }


def cpu_contention(trial_metrics: Mapping, min_others: float = 0.5, busy_share: float = 0.9) -> str | None:
    """Why the host's CPUs were contended during the trial's timed window, or None.

    Contended: other processes kept more than `min_others` cores busy and, with the trial's own, the host
    was at least `busy_share` busy, so they took time the run could have used. (Ray's own daemons stay
    under half a core; a big node's unrelated load with idle cores to spare does not count.)
    """
    own, others, count = (trial_metrics.get(k) for k in ("cpu_own_cores", "cpu_others_cores", "cpu_count"))
    if others is None or own is None or not count:
        return None
    if others > min_others and own + others >= busy_share * count:
        return f"CPU shared: other processes kept {others:.1f} of {count} cores busy (this run {own:.1f})"
    return None


def flag_cpu_contention(row: dict) -> dict:
    """The trial row, marked `cpu_shared` and not trusted (with the reason in its note) if its CPUs were
    contended; a GPU telemetry note that already made it untrusted is kept."""
    contended = cpu_contention(row)
    if contended:
        note = row.get("telemetry_note") if row.get("telemetry_trusted") is False else None
        row.update(cpu_shared=True, telemetry_trusted=False)
        row["telemetry_note"] = "; ".join(n for n in (note, contended) if n)
    return row


def describe_unavailable(info: Mapping) -> str | None:
    """One line for the search log when a node's telemetry is missing or partial; None when complete."""
    node = info.get("node_id") or "this node"
    if not info.get("available"):
        return (
            f"GPU telemetry unavailable on node {node}: {info.get('reason') or 'unknown reason'}; "
            "carrying on without power, energy and throttle data."
        )
    missing = {}
    for gpu, fields in (info.get("unsupported") or {}).items():
        for name, reason in fields.items():
            missing.setdefault(f"{name} ({reason})", []).append(str(gpu))
    if not missing:
        return None
    parts = [f"{what} on GPU {','.join(gpus)}" for what, gpus in missing.items()]
    return f"GPU telemetry on node {node} lacks " + "; ".join(parts) + "; carrying on without it."


def write_tensorboard(
    writer: Any, timeline: Mapping, step_key: str = "ms", tag_prefix: str = "telemetry"
) -> int:
    """Writes a timeline's points as scalars `{tag_prefix}/gpu{N}/{field}`; returns how many were written.

    step_key: "ms" (milliseconds since the first point), "index" (point number) or a numeric key of the
    points. Each scalar carries the point's wall time, so TensorBoard's relative/wall axes line up too.
    """
    points = list(timeline.get("points") or [])
    if not points:
        return 0
    gpu = timeline.get("gpu", 0)
    first_t = points[0]["t"]
    written = 0
    for index, point in enumerate(points):
        if step_key == "ms":
            step = int(round((point["t"] - first_t) * 1000))
        elif step_key == "index":
            step = index
        else:
            step = int(point[step_key])
        for name, value in point.items():
            if name == "t" or name == step_key or value is None:
                continue
            tag = f"{tag_prefix}/gpu{gpu}/{name}"
            writer.add_scalar(tag, float(value), global_step=step, walltime=point["t"])
            written += 1
    return written
