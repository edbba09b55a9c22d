"""Why a phase's progress has stalled, where the driver can see it: its trials starved of CPU by other
processes at a higher priority (Ray runs task and actor workers at nice 15, so any ordinary process, at
nice 0, takes the CPUs first), or a trial still in its first step (a compile).

The driver samples every process's CPU time on its own host at each progress line; a trial's worker is
watched only where it is the driver's descendant (a local Ray), never by a pid from another node.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import psutil

from trainables.common.progress import fmt_seconds

STALL_S = 60.0  # no trial result for this long, with trials running: the progress line says why
BUSY_CORES = 0.5  # what counts as keeping a CPU busy over a sampling interval


@dataclass(frozen=True)
class ProcCpu:
    created: float
    cpu_s: float
    nice: int


def sample() -> dict[int, ProcCpu]:
    """Every readable process's CPU time and niceness now."""
    found = {}
    for proc in psutil.process_iter(["create_time", "cpu_times", "nice"]):
        info = proc.info
        if info["cpu_times"] is None or info["nice"] is None:
            continue  # gone, or not ours to read
        times = info["cpu_times"]
        found[proc.pid] = ProcCpu(info["create_time"], times.user + times.system, info["nice"])
    return found


def _tree(pids: set[int]) -> set[int]:
    tree = set(pids)
    for pid in pids:
        try:
            tree |= {c.pid for c in psutil.Process(pid).children(recursive=True)}
        except psutil.Error:
            continue
    return tree


class StallWatch:
    """`advanced()` at each trial result; `explain(...)` at each progress line: a line saying why no trial
    has advanced for STALL_S, when the samples show why, else None."""

    def __init__(self, phase: str):
        self.phase = phase
        self.advanced_at = time.time()
        self.last: tuple[float, dict[int, ProcCpu]] | None = None

    def advanced(self) -> None:
        self.advanced_at = time.time()

    def explain(self, running: int, trial_pids: list[int], warming: list[str], now: float) -> str | None:
        """`running` trials (or starting: Tune's PENDING), of which those that reported gave their worker's
        pid; `warming`: the labels of those that have not reported a speed yet."""
        before, self.last = self.last, (time.monotonic(), sample())
        if before is None or not running or now - self.advanced_at < STALL_S:
            return None
        cores = _cores(before, self.last)
        ours = _tree({os.getpid()})
        # the local trials' workers (and theirs); before a trial's first report, Ray's workers (niced)
        trials = _tree({p for p in trial_pids if p in ours}) or {
            p for p in ours if p in self.last[1] and self.last[1][p].nice > os.nice(0)
        }
        if not trials:
            return None
        trial_nice = min((self.last[1][p].nice for p in trials if p in self.last[1]), default=0)
        higher = {
            p: c
            for p, c in cores.items()
            if p not in ours and c >= 0.05 and p in self.last[1] and self.last[1][p].nice < trial_nice
        }
        got = sum(cores.get(p, 0.0) for p in trials)
        stalled = f"[{self.phase}] no trial has advanced for {fmt_seconds(now - self.advanced_at)}"
        if sum(higher.values()) >= BUSY_CORES:
            pids = ", ".join(str(p) for p, _ in sorted(higher.items(), key=lambda kv: -kv[1])[:6])
            return (
                f"{stalled}: other processes kept the CPUs busy at a higher priority than the trials (nice "
                f"{trial_nice}): {sum(higher.values()):.1f} of {os.cpu_count()} cores (pids {pids}); the trials "
                f"got {got:.2f} cores"
            )
        if warming and got >= BUSY_CORES:
            return f"{stalled}: {', '.join(warming[:3])} still in its first step (a compile), {got:.1f} cores busy"
        return None


def _cores(
    before: tuple[float, dict[int, ProcCpu]], after: tuple[float, dict[int, ProcCpu]]
) -> dict[int, float]:
    """Mean cores each process kept busy between two samples (only processes alive at both)."""
    wall = after[0] - before[0]
    if wall <= 0:
        return {}
    return {
        pid: max(0.0, (now.cpu_s - then.cpu_s) / wall)
        for pid, now in after[1].items()
        if (then := before[1].get(pid)) is not None and then.created == now.created
    }
