"""The NVML sampler: a thread that reads every GPU at `hz` into a ring buffer per GPU, and answers window
queries on them. Plain Python, so it is tested with a fake NVML module; the Ray actor wraps it."""

from __future__ import annotations

import collections
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from tuner.telemetry.devices import GpuReader, PidCache, error_text, open_nvml, shutdown_nvml
from tuner.telemetry.window import (
    GpuSample,
    downsample,
    empty_window,
    summarize_usage,
    summarize_window,
)


class _Ticker:
    """Calls `tick` every 1/hz s on a daemon thread until stopped; it can be started again."""

    def __init__(self, tick: Callable[[], None], hz: float):
        self.tick, self.period = tick, 1.0 / hz if hz > 0 else math.inf
        self.overruns = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None and math.isfinite(self.period):
            self._thread = threading.Thread(target=self._run, name="gpu-telemetry", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None
        self._stop.clear()

    def _run(self) -> None:
        deadline = time.monotonic()
        while not self._stop.is_set():
            self.tick()
            deadline += self.period
            now = time.monotonic()
            if now > deadline:  # fell behind: skip the missed ticks rather than burst
                self.overruns += 1
                deadline = now
            self._stop.wait(deadline - now)


class _Export:
    """Hands a sweep's samples to the exporter at most every 1/hz s; its failures are kept, not raised."""

    def __init__(self, exporter: Any, hz: float):
        self.exporter, self.period_s = exporter, 1.0 / hz if hz > 0 else math.inf
        self.count = 0
        self.error: str | None = None
        self._last = -math.inf

    def __call__(self, node_id: str | None, readings: list[tuple[GpuReader, GpuSample]]) -> None:
        now = time.monotonic()
        if self.exporter is None or now - self._last < self.period_s:
            return
        self._last = now
        try:
            for gpu, sample in readings:
                self.exporter.export(node_id, gpu.index, sample)
            self.count += 1
        except Exception as err:
            self.error = error_text(err)


class _Rings:
    """A ring buffer of samples per GPU: the sampling thread appends a sweep, queries copy (under one lock)."""

    def __init__(self, gpus: Sequence[GpuReader], maxlen: int):
        self.gpus = gpus
        self._lock = threading.Lock()
        self._buffers: dict[int, collections.deque[GpuSample]] = {
            g.index: collections.deque(maxlen=maxlen) for g in gpus
        }

    def append(self, readings: list[tuple[GpuReader, GpuSample]]) -> None:
        with self._lock:
            for gpu, sample in readings:
                self._buffers[gpu.index].append(sample)

    def find(self, gpu: int | str) -> GpuReader | None:
        return next((g for g in self.gpus if g.matches(gpu)), None)

    def samples(self, gpu: int | str) -> list[GpuSample]:
        found = self.find(gpu)
        if found is None:
            return []
        with self._lock:
            return list(self._buffers[found.index])


class _Sweeps:
    """A sweep reads every GPU once into its ring buffer, the energy counter only every `energy_every`
    sweeps, and marks samples with pids this process cannot see. Keeps what sweeping costs: the sweeps
    taken, their wall time in NVML (much of it waiting on the driver), the sampling thread's CPU time."""

    def __init__(self, rings: _Rings, clock: Callable[[], float], energy_every: int):
        self.rings, self.clock, self.energy_every = rings, clock, energy_every
        self.pids = PidCache()
        self.count, self.wall_s, self.cpu_s = 0, 0.0, 0.0

    def _read(self, gpu: GpuReader) -> GpuSample:
        sample = gpu.read(self.clock(), with_energy=self.count % self.energy_every == 0)
        if sample.pids:
            sample.foreign_pids = not all(self.pids.visible(pid) for pid in sample.pids)
        return sample

    def sweep(self) -> list[tuple[GpuReader, GpuSample]]:
        started, started_cpu = time.perf_counter(), time.thread_time()
        readings = [(gpu, self._read(gpu)) for gpu in self.rings.gpus]
        self.rings.append(readings)
        self.count += 1
        self.wall_s += time.perf_counter() - started
        self.cpu_s += time.thread_time() - started_cpu
        return readings

    def describe(self, hz: float) -> dict:
        sweeps = max(self.count, 1)
        return {
            "sweeps": self.count,
            "sweep_ms_mean": 1000.0 * self.wall_s / sweeps,
            "sweep_cpu_ms_mean": 1000.0 * self.cpu_s / sweeps,
            "cpu_duty": self.cpu_s / sweeps * hz,  # share of one CPU core the thread keeps busy
        }


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
        self.hz, self.node_id, self.clock = float(hz), node_id, clock
        self.export = _Export(exporter, export_hz)
        self.maxlen = max(2, int(math.ceil(history_s * self.hz)))
        # the energy counter costs ~3 ms of CPU a read (H200), ~100x the other calls together: read it
        # every few sweeps; window energy tops it up with power at the edges
        self.energy_every = max(1, round(self.hz / energy_hz)) if energy_hz > 0 else 1
        self._ticker = _Ticker(self._tick, self.hz)
        self.nvml, self.gpus, self.reason = open_nvml(nvml)
        self.available = bool(self.gpus)
        self._rings = _Rings(self.gpus, self.maxlen)
        self._sweeps = _Sweeps(self._rings, self.clock, self.energy_every)

    # -- sampling ------------------------------------------------------------------------------------------

    def sample_once(self) -> None:
        """Reads every GPU once into its buffer (the thread calls this; tests may call it directly)."""
        if not self.available:
            return
        self.export(self.node_id, self._sweeps.sweep())

    def _tick(self) -> None:
        try:
            self.sample_once()
        except Exception as err:  # keep sampling whatever one sweep hit
            self.reason = f"sampling error ({error_text(err)})"

    def start(self) -> GpuSampler:
        if self.available:
            self._ticker.start()
        return self

    def pause(self) -> None:
        """Stops the sampling thread and keeps NVML open and the samples; `start` resumes."""
        self._ticker.stop()

    def stop(self) -> None:
        self.pause()
        if self.available:
            shutdown_nvml(self.nvml)
            self.available, self.reason = False, "stopped"

    # -- queries -------------------------------------------------------------------------------------------

    def samples(self, gpu: int | str) -> list[GpuSample]:
        return self._rings.samples(gpu)

    def _query(self, gpu: int | str, answer: Callable[[list[GpuSample]], dict]) -> dict:
        where: dict[str, Any] = {"node": self.node_id, "gpu": gpu}
        if not self.available and not self._sweeps.count:
            return empty_window(self.reason or "telemetry unavailable", **where)
        try:
            found = self._rings.find(gpu)
        except (TypeError, ValueError):
            found = None
        if found is None:
            return empty_window(f"no GPU {gpu!r} on this node", available=self.available, **where)
        try:
            return {**answer(self.samples(found.index)), **where}
        except Exception as err:
            return empty_window(f"query failed ({error_text(err)})", available=self.available, **where)

    def window(self, gpu: int | str, t0: float, t1: float, caller_pids: Iterable[int] = ()) -> dict:
        """Statistics of GPU `gpu` (NVML index or UUID) over [t0, t1] in time.time(); never raises."""
        pids = tuple(caller_pids or ())
        return self._query(gpu, lambda samples: summarize_window(samples, t0, t1, pids))

    def timeline(self, gpu: int | str, t0: float, t1: float, max_points: int = 200) -> dict:
        """Downsampled samples of [t0, t1] for plots: {"points": [{"t", "util_gpu", ...}], ...}."""

        result = self._query(gpu, lambda samples: _timeline(samples, t0, t1, max_points))
        result.setdefault("points", [])
        return result

    def usage(self, spans: Mapping[str, Sequence[float]]) -> dict:
        """Every GPU's use over each named [t0, t1] span (phases of the search); never raises."""
        if not self.available and not self._sweeps.count:
            return {"available": False, "reason": self.reason or "telemetry unavailable", "gpus": []}
        gpus = [_usage(gpu, self.samples(gpu.index), spans) for gpu in self.gpus]
        return {"available": True, "reason": None, "node_id": self.node_id, "gpus": gpus}

    def info(self) -> dict:
        return {
            "available": self.available,
            "reason": self.reason,
            "node_id": self.node_id,
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "hz": self.hz,
            "energy_every_sweeps": self.energy_every,
            "history_samples": self.maxlen,
            "gpus": [g.describe() for g in self.gpus],
            "unsupported": {g.index: dict(g.unsupported) for g in self.gpus if g.unsupported},
            "errors": {g.index: {**g.errors, "last": g.last_error} for g in self.gpus if g.errors},
            **self._sweeps.describe(self.hz),
            "overruns": self._ticker.overruns,
            "exports": self.export.count,
            "export_error": self.export.error,
            # False when NVML reports pids from another PID namespace (containers): no per-caller match
            "pids_comparable": self._sweeps.pids.all_visible(),
        }


def _timeline(samples: list[GpuSample], t0: float, t1: float, max_points: int) -> dict:
    inside = sum(1 for s in samples if t0 <= s.t <= t1)
    points = downsample(samples, t0, t1, max_points)
    return {"available": True, "samples": inside, "t0": t0, "t1": t1, "points": points}


def _usage(gpu: Any, samples: list[GpuSample], spans: Mapping[str, Sequence[float]]) -> dict:
    """One GPU's use over each named span."""
    stats = {name: summarize_usage(samples, t0, t1) for name, (t0, t1) in spans.items()}
    return {"gpu": gpu.index, "name": gpu.name, "uuid": gpu.uuid, "spans": stats}
