"""The timing gate: concurrent trials on one (fake) GPU never hold their timed windows at the same time, and
no trial that died (holding the gate or while compiling) blocks the others."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import ray

from tests.user_env import user_env
from trainables.training import gate as gate_module
from trainables.training.gate import (
    BESIDE_CHECK_S,
    NAMESPACE,
    BesideClient,
    GateClient,
    TimingGate,
    gate_name,
    open_gates,
    retire_idle_gates,
)

make_gate = gate_module._gate


@pytest.fixture(scope="module")
def fake_gpu_cluster():
    ray.init(address="local", num_cpus=4, num_gpus=1, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@ray.remote(num_cpus=0.5, num_gpus=0.25)
def timed_window(hold_s: float) -> tuple[float, float, float]:
    node, gpu = ray.get_runtime_context().get_node_id(), int(ray.get_gpu_ids()[0])
    with GateClient(node, gpu, who=f"task-{time.time_ns()}") as gate:
        start = time.time()
        time.sleep(hold_s)
        end = time.time()
    gate.close()  # as a trial does (trainables/trainable.py), or the gate counts it as still there
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


@ray.remote(num_cpus=0.5, num_gpus=0.25)
def beside_run(
    done: str, step_s: float, max_steps: int = 3000
) -> tuple[list[tuple[float, float]], float, int]:
    """A loss run trained beside timed ones: its steps' (start, end), the seconds it parked, its syncs. It
    trains until the file `done` exists (the windows are over), then 10 steps more: a run that goes on."""
    node, gpu = ray.get_runtime_context().get_node_id(), int(ray.get_gpu_ids()[0])
    syncs = []
    hook = BesideClient(node, gpu, who=f"beside-{time.time_ns()}", sync=lambda: syncs.append(1))
    spans: list[tuple[float, float]] = []
    after = 0
    while after < 10 and len(spans) < max_steps:
        after += os.path.exists(done)
        start = time.time()
        time.sleep(step_s)  # its GPU work
        spans.append((start, time.time()))
        hook()
    hook.close()
    return spans, hook.waited_s, len(syncs)


def test_a_run_beside_timed_ones_never_trains_during_a_window(fake_gpu_cluster, tmp_path):
    """The baseline's loss run fills the screen's idle GPU time: it parks for every window, and goes on."""
    gate = open_gates()[0]
    # the windows' workers started first: on a busy 2-core machine a worker's start (~1 s) outlasted the
    # whole beside run, which then never met a window (parked 0 s)
    ray.get([timed_window.remote(0.0) for _ in range(3)])
    done = tmp_path / "windows-over"
    # it trains until the windows are over (30 s at most), however long they take to come on a loaded machine
    beside = beside_run.remote(str(done), 0.01)
    # it is training (past its first step, which compiles beside windows as any run's does) when they come
    while not ray.get(gate.stats.remote())["beside"]:
        time.sleep(0.01)
    windows = ray.get([timed_window.remote(0.3) for _ in range(3)])
    done.touch()
    spans, parked, syncs = ray.get(beside)
    assert len(spans) < 3000, "it trained on till its cap: the windows never ended"
    last_window = max(w_end for _, w_end, _ in windows)
    assert sum(start > last_window for start, _ in spans) >= 10  # it went on after the windows
    for w_start, w_end, _ in windows:
        overlapping = [(s, e) for s, e in spans if s < w_end and w_start < e]
        assert not overlapping, (w_start, w_end, overlapping)
    assert parked > 0.3 and syncs >= 1  # it finished its GPU work before it parked
    waits = [w for *_, w in windows]
    assert min(waits) < BESIDE_CHECK_S + 0.5  # a window waits at most one check for it


def test_a_beside_run_that_died_or_went_silent_does_not_hold_windows(fake_gpu_cluster):
    gate = TimingGate.remote(silent_s=0.5)
    ray.get(gate.window_wanted.remote("killed", dead_pid()))
    assert ray.get(gate.acquire.remote("next", os.getpid()), timeout=10) < 5
    ray.get(gate.release.remote("next"))
    ray.get(gate.window_wanted.remote("stuck", os.getpid()))  # alive, never asks again
    waited = ray.get(gate.acquire.remote("after", os.getpid()), timeout=10)
    assert 0.3 < waited < 5


# A search on GPU 1 of a host (CUDA_VISIBLE_DEVICES=1): Ray numbers that GPU 1 and the driver's gates are for
def gate_alive(node: str, gpu: int) -> bool:
    try:
        ray.get_actor(gate_name(node, gpu), namespace=NAMESPACE)
    except ValueError:
        return False
    return True


@ray.remote(num_cpus=0.5, num_gpus=0.25)
def arrived_then_wait(marker: str, release: str) -> int:
    """Arrives at its GPU's gate (a trial between its start and its window) and stays until `release` exists."""
    node, gpu = ray.get_runtime_context().get_node_id(), int(ray.get_gpu_ids()[0])
    client = GateClient(node, gpu, who="waiting")
    open(marker, "w").close()
    while not os.path.exists(release):
        time.sleep(0.05)
    with client:  # the gate it arrived at still stands: its window is granted
        pass
    client.close()
    return os.getpid()


def test_a_search_end_retires_the_gates_no_live_run_uses_and_a_later_run_makes_a_new_one(
    fake_gpu_cluster, tmp_path
):
    """Gates are detached (they outlive whoever made them), so a search's end retires them; one a run of
    another search has arrived at stays until that run has left."""
    node = ray.get_runtime_context().get_node_id()
    open_gates()
    assert gate_alive(node, 0)
    marker, release = tmp_path / "arrived", tmp_path / "release"
    run = arrived_then_wait.remote(str(marker), str(release))
    while not marker.exists():
        time.sleep(0.05)
    assert retire_idle_gates() == 0 and gate_alive(node, 0), "a gate a live run arrived at was retired"
    release.touch()
    ray.get(run, timeout=60)
    assert retire_idle_gates() == 1
    assert not gate_alive(node, 0), "the idle gate stayed"
    # a run after the retirement makes the gate anew, and gets its window
    assert ray.get(timed_window.remote(0.1), timeout=60)[2] >= 0
    assert gate_alive(node, 0)
    retire_idle_gates()


def test_a_run_handed_a_gate_that_ended_as_it_arrived_gets_a_new_one(fake_gpu_cluster, monkeypatch):
    """The race `_arrived` guards: the name still found the gate a search's end was retiring."""
    node = ray.get_runtime_context().get_node_id()
    ended = open_gates()[0]
    assert retire_idle_gates() == 1
    handed = iter([ended])
    monkeypatch.setattr(gate_module, "_gate", lambda *where: next(handed, None) or make_gate(*where))
    client = GateClient(node, 0, who="late")
    with client:
        pass
    client.close()
    assert client.actor is not ended
    assert ray.get(client.actor.stats.remote())["windows"] == 1, "the new gate granted the window"
    retire_idle_gates()


# index 0, so the first trial made GPU 1's gate. The others, already queued at it, must keep it after that
# trial's worker exits (runs Z and AA: ActorDiedError in 7 of 9 re-measure runs).
GPU_ONE = """
import os, sys, time
import ray
from trainables.training.gate import NAMESPACE, GateClient, gate_name, open_gates
ray.init(address="local", num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False)
gates = open_gates()
handed = sys.argv[1]

def gpu_and_node():
    return int(ray.get_gpu_ids()[0]), ray.get_runtime_context().get_node_id()

@ray.remote(num_cpus=0.5, num_gpus=0.5, max_calls=1)  # its worker exits after the call, as a trial's does
def first():
    gpu, node = gpu_and_node()
    with GateClient(node, gpu, "first"):
        pass
    while not os.path.exists(handed):  # the second run has its handle to the gate
        time.sleep(0.1)
    return os.getpid()

@ray.remote(num_cpus=0.5, num_gpus=0.5)
def second(first_pid_ref):
    gpu, node = gpu_and_node()
    while True:
        try:
            ray.get_actor(gate_name(node, gpu), namespace=NAMESPACE)
            break
        except ValueError:
            time.sleep(0.1)
    client = GateClient(node, gpu, "second")
    open(handed, "w").close()
    pid = ray.get(first_pid_ref[0])
    while True:  # until the first run's worker is gone
        try:
            os.kill(pid, 0)
            time.sleep(0.1)
        except ProcessLookupError:
            break
    time.sleep(1)
    with client:
        pass
    return gpu

one = first.remote()
print("GPU", ray.get(second.remote([one]), timeout=120))
"""


def test_a_gpu_ray_numbers_other_than_its_index_keeps_its_gate_after_the_first_trial_ends(tmp_path):
    env = {**user_env(), "CUDA_VISIBLE_DEVICES": "1", "RAY_ADDRESS": ""}
    done = subprocess.run([sys.executable, "-c", GPU_ONE, str(tmp_path / "handed")], env=env,
                          capture_output=True, text=True, timeout=240)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "GPU 1" in done.stdout, done.stdout
