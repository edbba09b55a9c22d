"""Host CPU contention: /proc parsing against a fake /proc, the real /proc with a busy process beside us
(not our child) and one under us (our child, as DataLoader workers are), and the search's verdict."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainables.cpu_load import CpuSnapshot, snapshot, window_load
from tuner.telemetry import cpu_contention, flag_cpu_contention

BUSY = [sys.executable, "-c", "while True: pass"]


def write_stat(proc: Path, pid: int, ppid: int, utime: int, stime: int, cutime=0, cstime=0, comm="py (x) y"):
    (proc / str(pid)).mkdir(parents=True)
    # after "pid (comm) ": state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime ...
    rest = ["S", ppid, 1, 1, 0, -1, 0, 0, 0, 0, 0, utime, stime, cutime, cstime, 20, 0, 1]
    (proc / str(pid) / "stat").write_text(f"{pid} ({comm}) " + " ".join(map(str, rest)) + "\n")


def test_snapshot_reads_host_busy_time_and_our_process_tree(tmp_path):
    tick = os.sysconf("SC_CLK_TCK")
    # user nice system idle iowait irq softirq steal guest guest_nice: idle and iowait are not busy
    (tmp_path / "stat").write_text("cpu  400 20 180 9000 300 10 5 5 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n")
    write_stat(tmp_path, 4242, 1, utime=50, stime=10, cutime=7, cstime=3)
    write_stat(tmp_path, 4300, 4242, utime=20, stime=5)  # a live child (a DataLoader worker)
    write_stat(tmp_path, 4301, 4300, utime=99, stime=99)  # a grandchild: not counted
    write_stat(tmp_path, 17, 1, utime=500, stime=500)  # someone else
    (tmp_path / "self").mkdir()  # not a pid: skipped
    snap = snapshot(tmp_path, pid=4242)
    assert snap.host_busy_s == pytest.approx(620 / tick)
    assert snap.own_s == pytest.approx(95 / tick)
    assert snapshot(tmp_path / "missing", pid=4242) is None


def test_window_load_divides_by_wall_time():
    start = CpuSnapshot(t=10.0, host_busy_s=100.0, own_s=40.0)
    end = CpuSnapshot(t=14.0, host_busy_s=108.0, own_s=46.0)
    load = window_load(start, end)
    assert (load["cpu_own_cores"], load["cpu_others_cores"]) == (1.5, 0.5)
    assert load["cpu_count"] == os.cpu_count()
    assert window_load(None, end)["cpu_others_cores"] is None
    assert window_load(end, end)["cpu_own_cores"] is None


def busy_for(seconds: float) -> dict:
    time.sleep(0.3)  # let the busy process start spinning
    start = snapshot()
    time.sleep(seconds)
    return window_load(start, snapshot())


def test_a_busy_process_beside_us_counts_as_others():
    # started through a shell that exits at once, so the busy process is not our child
    spawn = f"{sys.executable} -c 'while True: pass' >/dev/null 2>&1 & echo $!"
    out = subprocess.run(["sh", "-c", spawn], capture_output=True, text=True, check=True).stdout
    pid = int(out.strip())
    try:
        load = busy_for(1.5)
    finally:
        os.kill(pid, signal.SIGKILL)
    assert load["cpu_others_cores"] >= 0.7 and load["cpu_own_cores"] < 0.3, load


def test_a_busy_child_counts_as_our_own():
    child = subprocess.Popen(BUSY)
    try:
        load = busy_for(1.5)
    finally:
        child.kill()
        child.wait()
    assert load["cpu_own_cores"] >= 0.7, load


@pytest.mark.parametrize(
    ("own", "others", "count", "contended"),
    [
        (1.9, 0.1, 2, False),  # Ray's daemons beside a run that uses both cores
        (1.0, 1.0, 2, True),  # another run on the other core
        (0.9, 0.4, 2, False),  # the machine had room
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
