"""How busy the host's CPUs were with other processes while a run was being timed (psutil).

On a GPU the telemetry's per-process memory shows when another job shares the card; on a CPU nothing
did, and a second busy process turns 60 ms steps into seconds. A snapshot holds the host's busy CPU time
and this process's own, its reaped children's and its live descendants' (DataLoader workers); between
two snapshots, busy time that is not ours was other processes'.

The kernel counts CPU time in ticks (USER_HZ, 10 ms), so over a window shorter than `MIN_WINDOW_S` a share
is mostly rounding: such a window's shares are None, "too short to judge", and the report says so.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import psutil

# Not busy: idle and waiting on I/O. guest and guest_nice are already inside user and nice (Linux).
_NOT_BUSY = ("idle", "iowait", "guest", "guest_nice")
# 25 ticks: a few ticks of rounding in the host's and our own counts move a share by under 0.2 cores,
# well inside the 0.5 cores of others' load that tuner/telemetry calls contention.
MIN_WINDOW_S = 0.25


@dataclass(frozen=True)
class CpuSnapshot:
    t: float  # time.monotonic()
    host_busy_s: float  # all CPUs' non-idle time since boot
    own_s: float  # this process, its reaped children and its live descendants


def _host_busy_s() -> float:
    times = psutil.cpu_times()
    return sum(getattr(times, name) for name in times._fields if name not in _NOT_BUSY)


def _live_s(process: psutil.Process) -> float:
    try:
        times = process.cpu_times()
    except psutil.Error:  # exited (or turned unreadable) while we looked
        return 0.0
    return times.user + times.system


def _own_s(pid: int) -> float:
    process = psutil.Process(pid)
    times = process.cpu_times()
    reaped = times.children_user + times.children_system
    return times.user + times.system + reaped + sum(_live_s(c) for c in process.children(recursive=True))


def snapshot(pid: int | None = None) -> CpuSnapshot | None:
    """None where psutil cannot read the figures: they are then simply absent."""
    try:
        return CpuSnapshot(time.monotonic(), _host_busy_s(), _own_s(pid or os.getpid()))
    except (psutil.Error, OSError):
        return None


def window_load(start: CpuSnapshot | None, end: CpuSnapshot | None) -> dict[str, float | int | None]:
    """Mean CPU cores this run (with its workers) and other processes kept busy between two snapshots; None
    where a snapshot is missing or the window is too short to judge (under MIN_WINDOW_S)."""
    load: dict[str, float | int | None] = {"cpu_own_cores": None, "cpu_others_cores": None}
    load["cpu_count"] = os.cpu_count()
    if start is None or end is None or end.t - start.t < MIN_WINDOW_S:
        return load
    wall = end.t - start.t
    own = max(0.0, end.own_s - start.own_s)
    others = max(0.0, (end.host_busy_s - start.host_busy_s) - own)
    load["cpu_own_cores"], load["cpu_others_cores"] = round(own / wall, 3), round(others / wall, 3)
    return load
