"""The timing gate: concurrent trials on one (fake) GPU never hold their timed windows at the same time, and
no trial that died (holding the gate or while compiling) blocks the others."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import ray

from trainables.gate import GateClient, TimingGate, open_gates


@pytest.fixture(scope="module")
def fake_gpu_cluster():
    ray.init(num_cpus=4, num_gpus=1, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@ray.remote(num_cpus=0.5, num_gpus=0.25)
def timed_window(hold_s: float) -> tuple[float, float, float]:
    node, gpu = ray.get_runtime_context().get_node_id(), int(ray.get_gpu_ids()[0])
    with GateClient(node, gpu, who=f"task-{time.time_ns()}") as gate:
        start = time.time()
        time.sleep(hold_s)
        end = time.time()
    return start, end, gate.waited_s


def test_windows_on_one_gpu_never_overlap(fake_gpu_cluster):
    gates = open_gates()
    assert len(gates) == 1  # one per fake GPU
    windows = sorted(ray.get([timed_window.remote(0.3) for _ in range(4)]))
    for (_, end, _), (start, _, _) in zip(windows, windows[1:]):
        assert start >= end, windows
    assert sum(w for *_, w in windows) > 0.3  # some waited: they did run concurrently
    assert ray.get(gates[0].stats.remote())["windows"] == 4


def dead_pid() -> int:
    """The pid of a process that has exited (a trial killed by the stopper or the time budget)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_holder_that_never_releases_loses_the_gate_after_its_lease(fake_gpu_cluster):
    gate = TimingGate.remote(lease_s=0.5)
    ray.get(gate.acquire.remote("stuck", os.getpid()))  # alive, but never releases
    started = time.monotonic()
    waited = ray.get(gate.acquire.remote("next", os.getpid()))
    assert 0.3 < waited < 5 and time.monotonic() - started < 5
    ray.get(gate.release.remote("stuck"))  # a late release by the old holder frees nothing
    assert ray.get(gate.stats.remote())["holder"] == "next"


def test_a_holder_whose_process_died_frees_the_gate_at_once(fake_gpu_cluster):
    gate = TimingGate.remote()  # the default lease: minutes
    ray.get(gate.acquire.remote("killed", dead_pid()))
    assert ray.get(gate.acquire.remote("next", os.getpid()), timeout=10) < 5


def test_a_quiet_window_waits_until_no_run_on_its_gpu_is_compiling(fake_gpu_cluster):
    me = os.getpid()
    gate = TimingGate.remote()
    ray.get(gate.arrive.remote("compiling", me))
    ray.get(gate.arrive.remote("timed", me))
    waiting = gate.acquire.remote("timed", me, True)
    ready, _ = ray.wait([waiting], timeout=1.0)
    assert not ready, "a quiet window started while another run was compiling"
    ray.get(gate.acquire.remote("compiling", me))  # done compiling: it queues for its own window first
    ray.get(gate.release.remote("compiling"))
    assert ray.get(waiting, timeout=5) > 0.5
    # a turns-only window does not wait for compiles, and counts them
    ray.get(gate.release.remote("timed"))
    ray.get(gate.arrive.remote("late", me))
    ray.get(gate.acquire.remote("turns", me), timeout=5)
    assert ray.get(gate.release.remote("turns")) == 1


def test_a_run_killed_while_compiling_does_not_hold_quiet_windows_forever(fake_gpu_cluster):
    """What deadlocked a GPU search's re-measure: screen trials stopped while compiling never left."""
    gate = TimingGate.remote()
    ray.get(gate.arrive.remote("stopped-by-the-stopper", dead_pid()))
    assert ray.get(gate.acquire.remote("remeasure", os.getpid(), True), timeout=10) < 5
