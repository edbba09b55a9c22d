"""Host CPU contention: psutil's figures summed for a made-up process tree, the real host with a busy
process beside us (not our child) and one under us (our child, as DataLoader workers are), and the
search's verdict."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from trainables.training.cpu_load import CpuSnapshot, snapshot, window_load
from tuner.telemetry import cpu_contention, flag_cpu_contention

BUSY = [sys.executable, "-c", "while True: pass"]


# psutil's Linux field names; guest time is inside user, and idle and iowait are not busy
HostTimes = collections.namedtuple(
    "HostTimes", "user nice system idle iowait irq softirq steal guest guest_nice"
)
ProcTimes = collections.namedtuple("ProcTimes", "user system children_user children_system")


class FakeProcess:
    """A psutil.Process of a made-up tree: pid -> (its times, its children's pids)."""

    tree: dict = {}

    def __init__(self, pid: int):
        if pid not in self.tree:
            raise psutil.NoSuchProcess(pid)
        self.pid = pid

    def cpu_times(self) -> ProcTimes:
        times = self.tree[self.pid][0]
        if times is None:
            raise psutil.NoSuchProcess(self.pid)  # exited while we looked
        return times

    def children(self, recursive: bool = False) -> list[FakeProcess]:
        kids = [FakeProcess(pid) for pid in self.tree[self.pid][1]]
        return kids + [g for kid in kids for g in kid.children(True)] if recursive else kids


def test_snapshot_adds_host_busy_time_and_our_process_tree(monkeypatch):
    monkeypatch.setattr(psutil, "cpu_times", lambda: HostTimes(400, 20, 180, 9000, 300, 10, 5, 5, 7, 1))
    monkeypatch.setattr(psutil, "Process", FakeProcess)
    monkeypatch.setattr(
        FakeProcess,
        "tree",
        {
            4242: (ProcTimes(50, 10, 7, 3), [4300, 4302]),  # us, with our reaped children's time
            4300: (ProcTimes(20, 5, 99, 99), [4301]),  # a live child (a DataLoader worker)
            4301: (ProcTimes(2, 1, 0, 0), []),  # its child: also this run's work
            4302: (None, []),  # a child that exits while we look
            17: (ProcTimes(500, 500, 0, 0), []),  # someone else
        },
    )
    snap = snapshot(pid=4242)
    assert snap.host_busy_s == pytest.approx(620)
    assert snap.own_s == pytest.approx(50 + 10 + 7 + 3 + 20 + 5 + 2 + 1)
    assert snapshot(pid=4243) is None  # no such process: the figures are absent


def test_window_load_divides_by_wall_time():
    start = CpuSnapshot(t=10.0, host_busy_s=100.0, own_s=40.0)
    end = CpuSnapshot(t=14.0, host_busy_s=108.0, own_s=46.0)
    load = window_load(start, end)
    assert (load["cpu_own_cores"], load["cpu_others_cores"]) == (1.5, 0.5)
    assert load["cpu_count"] == os.cpu_count()
    assert window_load(None, end)["cpu_others_cores"] is None
    assert window_load(end, end)["cpu_own_cores"] is None
    short = CpuSnapshot(t=end.t - 0.2, host_busy_s=end.host_busy_s - 0.4, own_s=end.own_s - 0.2)
    assert window_load(short, end)["cpu_others_cores"] is None  # 20 ticks: too short to judge


def busy_for(seconds: float, busy_pid: int) -> tuple[dict, float]:
    """The load over a window, and how many cores the busy process really got in it (a loaded 2-core
    machine may give it well under one)."""
    time.sleep(0.3)  # let the busy process start spinning
    busy = psutil.Process(busy_pid)
    busy_before, start = sum(busy.cpu_times()[:2]), snapshot()
    time.sleep(seconds)
    busy_after, end = sum(busy.cpu_times()[:2]), snapshot()
    return window_load(start, end), (busy_after - busy_before) / (end.t - start.t)


def test_a_busy_process_beside_us_counts_as_others():
    # started through a shell that exits at once, so the busy process is not our child
    spawn = f"{sys.executable} -c 'while True: pass' >/dev/null 2>&1 & echo $!"
    out = subprocess.run(["sh", "-c", spawn], capture_output=True, text=True, check=True).stdout
    pid = int(out.strip())
    try:
        load, cores = busy_for(1.5, pid)
    finally:
        os.kill(pid, signal.SIGKILL)
    assert cores > 0.2, cores  # it ran
    assert load["cpu_others_cores"] >= 0.8 * cores and load["cpu_own_cores"] < 0.3, (load, cores)


def test_a_busy_child_counts_as_our_own():
    child = subprocess.Popen(BUSY)
    try:
        load, cores = busy_for(1.5, child.pid)
    finally:
        child.kill()
        child.wait()
    assert cores > 0.2, cores  # it ran
    assert load["cpu_own_cores"] >= 0.8 * cores, (load, cores)


@pytest.mark.parametrize(
    ("own", "others", "count", "contended"),
    [
        (1.9, 0.1, 2, False),  # Ray's daemons beside a run that uses both cores
        (1.0, 1.0, 2, True),  # another run on the other core
        (0.9, 0.4, 2, False),  # the machine had room
        (
            0.03,
            1.75,
            2,
            True,
        ),  # two busy loops starving the run (seen under tests/test_remeasure.py's burner)
        (4.0, 50.0, 128, False),  # a big node's unrelated load, with idle cores to spare
        (4.0, 120.0, 128, True),
        (None, None, 2, False),  # no /proc
    ],
)
def test_cpu_contention_threshold(own, others, count, contended):
    row = {"cpu_own_cores": own, "cpu_others_cores": others, "cpu_count": count}
    assert (cpu_contention(row) is not None) == contended


def test_flag_cpu_contention_keeps_a_gpu_note():
    row = {"cpu_own_cores": 1.0, "cpu_others_cores": 1.0, "cpu_count": 2, "telemetry_trusted": False}
    row["telemetry_note"] = "only 2 samples in the window"
    flagged = flag_cpu_contention(row)
    assert flagged["cpu_shared"] is True and flagged["telemetry_trusted"] is False
    assert flagged["telemetry_note"].startswith("only 2 samples in the window; CPU shared: other processes")
    calm = flag_cpu_contention({"cpu_own_cores": 1.9, "cpu_others_cores": 0.1, "cpu_count": 2})
    assert "cpu_shared" not in calm and "telemetry_trusted" not in calm
