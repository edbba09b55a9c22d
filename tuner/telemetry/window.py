"""Window maths over GPU samples: statistics, energy and plot points of a [t0, t1] time window.

Pure functions on `GpuSample` lists (a field is None where NVML could not read it; in the arrays here that
is NaN), so they are tested on hand-made samples and run inside the telemetry actor alike.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# numpy 2 renamed trapz to trapezoid; the declared floor (1.24) has only trapz.
# (the installed numpy 2's typing has no trapz: the one ignore, which numpy 1 would find unused)
_trapezoid = getattr(np, "trapezoid", None) or np.trapz  # type: ignore[attr-defined, unused-ignore]

# NVML clock-event reason bits (stable across the Throttle/ClocksEvent renames).
SW_POWER_CAP = 0x04
HW_SLOWDOWN = 0x08
SW_THERMAL_SLOWDOWN = 0x20
HW_THERMAL_SLOWDOWN = 0x40
HW_POWER_BRAKE_SLOWDOWN = 0x80
THERMAL_REASONS = SW_THERMAL_SLOWDOWN | HW_THERMAL_SLOWDOWN
POWER_REASONS = SW_POWER_CAP | HW_POWER_BRAKE_SLOWDOWN


@dataclass(slots=True, kw_only=True)
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

_TIMELINE_FIELDS = (
    "util_gpu",
    "util_mem",
    "mem_used_mb",
    "power_w",
    "temp_c",
    "sm_clock_mhz",
    "mem_clock_mhz",
)


def _column(samples: Sequence[GpuSample], name: str) -> np.ndarray:
    """One field of every sample as floats, NaN where it is None."""
    return np.array([getattr(s, name) for s in samples], dtype=float)


def _flags(samples: Sequence[GpuSample], bits: int) -> np.ndarray:
    """1.0 where a sample's throttle reasons include any of `bits`, 0.0 where not, NaN where unknown."""
    return np.array(
        [math.nan if s.throttle_reasons is None else float(bool(s.throttle_reasons & bits)) for s in samples]
    )


def _bucket_means(values: np.ndarray, starts: np.ndarray) -> list[float | None]:
    """Mean of the non-NaN values of each bucket values[starts[k]:starts[k+1]]; None for an all-NaN one."""
    present = ~np.isnan(values)
    sums = np.add.reduceat(np.where(present, values, 0.0), starts)
    counts = np.add.reduceat(present.astype(int), starts)
    return [float(s / c) if c else None for s, c in zip(sums, counts)]


def _mean(values: np.ndarray) -> float | None:
    return _bucket_means(values, np.array([0]))[0] if values.size else None


def _peak(values: np.ndarray) -> float | None:
    present = values[~np.isnan(values)]
    return float(present.max()) if present.size else None


def _inside(samples: Sequence[GpuSample], t0: float, t1: float) -> list[GpuSample]:
    return [s for s in samples if t0 <= s.t <= t1]


def _integrate(ts: np.ndarray, ys: np.ndarray, a: float, b: float) -> float:
    """Trapezoid integral over [a, b] of the piecewise-linear curve (ts, ys), flat beyond its ends."""
    knots = np.concatenate(([a], ts[(ts > a) & (ts < b)], [b]))
    return float(_trapezoid(np.interp(knots, ts, ys), knots))


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
    ts, watts, mj = np.array([s.t for s in near]), _column(near, "power_w"), _column(near, "energy_mj")
    a, b = max(t0, ts[0]), min(t1, ts[-1])
    powered = ~np.isnan(watts)
    read = ~np.isnan(mj) & (ts >= a) & (ts <= b)
    read_t, read_mj = ts[read], mj[read]
    if read_t.size >= 2 and read_mj[-1] >= read_mj[0]:
        joules = (read_mj[-1] - read_mj[0]) / 1000.0
        if powered.any():
            edges = [(a, read_t[0]), (read_t[-1], b)]
            joules += sum(_integrate(ts[powered], watts[powered], x, y) for x, y in edges)
        elif read_t[-1] > read_t[0]:  # no power readings: the counter's mean power covers the edges
            joules *= (b - a) / (read_t[-1] - read_t[0])
        return float(joules), "counter"
    if powered.any():
        return _integrate(ts[powered], watts[powered], a, b), "integrated"
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


def _processes(inside: Sequence[GpuSample], caller_pids: Iterable[int]) -> dict:
    """Who else used the GPU. NVML pids from another PID namespace (containers) cannot be matched to the
    caller, so `shared` then falls back to "more than one process used the GPU in the window"."""
    caller = {int(p) for p in caller_pids}
    seen: set[int] = set()
    for s in inside:
        seen.update(s.pids or ())
    comparable = not any(s.foreign_pids for s in inside)
    other = sorted(seen - caller) if comparable else sorted(seen)
    shared = bool(other) if comparable and caller else len(seen) > 1
    return {"other_pids": other, "shared": shared, "pids_comparable": comparable, "processes_seen": len(seen)}


# statistic -> (the GpuSample field it is of, how the window's readings are reduced)
_READINGS = {
    "util_mean": ("util_gpu", _mean),
    "util_peak": ("util_gpu", _peak),
    "mem_util_mean": ("util_mem", _mean),
    "power_mean_w": ("power_w", _mean),
    "power_peak_w": ("power_w", _peak),
    "mem_peak_mb": ("mem_used_mb", _peak),
    "temp_max_c": ("temp_c", _peak),
    "sm_clock_mean_mhz": ("sm_clock_mhz", _mean),
}

# statistic -> the clock-event reasons whose share of the readings it is
_SHARES = {
    "throttled_share": THERMAL_REASONS | POWER_REASONS,
    "thermal_share": THERMAL_REASONS,
    "power_share": POWER_REASONS,
    # What distrusts a speed figure: thermal slowdowns and the hardware power brake. A loaded GPU sits
    # at its software power cap most of the time (96% of samples on an H200 under bf16 matmuls): that
    # is its normal operating point, reported as power_share, not a distortion.
    "slowdown_share": THERMAL_REASONS | HW_POWER_BRAKE_SLOWDOWN,
}


def summarize_window(
    samples: Sequence[GpuSample], t0: float, t1: float, caller_pids: Iterable[int] = ()
) -> dict:
    """Statistics of the samples with t0 <= t <= t1 (samples in time order); `other_pids` are the compute
    processes seen on the GPU that are not `caller_pids`."""
    inside = _inside(samples, t0, t1)
    if not inside:
        return empty_window("no samples in the window", available=True)
    stats: dict[str, Any] = {
        name: reduce(_column(inside, field)) for name, (field, reduce) in _READINGS.items()
    }
    stats.update((name, _mean(_flags(inside, bits))) for name, bits in _SHARES.items())
    stats["energy_j"], stats["energy_source"] = _energy(samples, t0, t1)
    stats["covered_s"] = inside[-1].t - inside[0].t
    return {
        "samples": len(inside),
        "available": True,
        "reason": None,
        **{name: stats[name] for name in _WINDOW_STATS},
        **_processes(inside, caller_pids),
    }


def _median(values: np.ndarray) -> float | None:
    present = values[~np.isnan(values)]
    return float(np.median(present)) if present.size else None


# statistic -> (the GpuSample field it is of, how a span's readings are reduced): tuner.state.gpu_records.UsageStats
_USAGE = {
    "util_mean": ("util_gpu", _mean),
    "util_median": ("util_gpu", _median),
    "mem_util_mean": ("util_mem", _mean),
    "mem_used_mean_mb": ("mem_used_mb", _mean),
    "mem_used_median_mb": ("mem_used_mb", _median),
    "mem_used_peak_mb": ("mem_used_mb", _peak),
}


def summarize_usage(samples: Sequence[GpuSample], t0: float, t1: float) -> dict:
    """How busy a GPU was over [t0, t1] (a phase of the search, idle stretches included): utilisation and
    memory used, mean and median of its readings, and how much of the span the readings cover."""
    inside = _inside(samples, t0, t1)
    stats = {name: reduce(_column(inside, field)) for name, (field, reduce) in _USAGE.items()}
    covered = inside[-1].t - inside[0].t if inside else None
    return {"span_s": t1 - t0, "samples": len(inside), "covered_s": covered, **stats}


def downsample(samples: Sequence[GpuSample], t0: float, t1: float, max_points: int = 200) -> list[dict]:
    """The window's samples as plot points, averaged in equal-count buckets down to max_points."""
    inside = _inside(samples, t0, t1)
    if not inside:
        return []
    per_bucket = max(1, math.ceil(len(inside) / max(1, max_points)))
    starts = np.arange(0, len(inside), per_bucket)
    columns = {"t": np.array([s.t for s in inside])}
    columns.update((name, _column(inside, name)) for name in _TIMELINE_FIELDS)
    columns["throttled"] = _flags(inside, THERMAL_REASONS | POWER_REASONS)
    means = {name: _bucket_means(values, starts) for name, values in columns.items()}
    processes = np.maximum.reduceat(np.array([len(s.pids or ()) for s in inside]), starts)
    return [
        {**{name: values[k] for name, values in means.items()}, "processes": int(processes[k])}
        for k in range(len(starts))
    ]
