"""How busy the host's CPUs were with other processes while a run was being timed (Linux /proc).

On a GPU the telemetry's per-process memory shows when another job shares the card; on a CPU nothing
did, and a second busy process turns 60 ms steps into seconds. A snapshot holds the host's busy CPU time
(/proc/stat) and this process's own, its reaped children's and its live children's (DataLoader workers);
between two snapshots, busy time that is not ours was other processes'.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class CpuSnapshot:
    t: float  # time.monotonic()
    host_busy_s: float  # all CPUs' non-idle time since boot
    own_s: float  # this process, its reaped children and its live children


def _ticks() -> int:
    return os.sysconf("SC_CLK_TCK")


def _host_busy_s(proc: Path) -> float:
    # "cpu user nice system idle iowait irq softirq steal guest guest_nice"; guest time is inside user
    fields = [int(x) for x in (proc / "stat").read_text().split("\n", 1)[0].split()[1:]]
    busy = sum(fields[:8]) - fields[3] - fields[4]  # minus idle and iowait
    return busy / _ticks()


def _stat_fields(path: Path) -> list[str]:
    text = path.read_text()
    return text[text.rindex(")") + 2 :].split()  # after "pid (comm) ": state is field 0 here


def _own_s(proc: Path, pid: int) -> float:
    mine = _stat_fields(proc / str(pid) / "stat")
    total = sum(int(x) for x in mine[11:15])  # utime stime cutime cstime
    for entry in proc.iterdir():
        if not entry.name.isdigit() or entry.name == str(pid):
            continue
        try:
            child = _stat_fields(entry / "stat")
        except (OSError, ValueError):  # exited while we looked
            continue
        if child[1] == str(pid):  # ppid
            total += int(child[11]) + int(child[12])
    return total / _ticks()


def snapshot(proc: Path = PROC, pid: int | None = None) -> CpuSnapshot | None:
    """None where /proc is missing or unreadable (not Linux): the figure is then simply absent."""
    try:
        return CpuSnapshot(time.monotonic(), _host_busy_s(proc), _own_s(proc, pid or os.getpid()))
    except (OSError, ValueError, IndexError):
        return None


def window_load(start: CpuSnapshot | None, end: CpuSnapshot | None) -> dict[str, float | int | None]:
    """Mean CPU cores this run (with its workers) and other processes kept busy between two snapshots."""
    load: dict[str, float | int | None] = {"cpu_own_cores": None, "cpu_others_cores": None}
    load["cpu_count"] = os.cpu_count()
    if start is None or end is None or end.t <= start.t:
        return load
    wall = end.t - start.t
    own = max(0.0, end.own_s - start.own_s)
    others = max(0.0, (end.host_busy_s - start.host_busy_s) - own)
    load["cpu_own_cores"], load["cpu_others_cores"] = round(own / wall, 3), round(others / wall, 3)
    return load
