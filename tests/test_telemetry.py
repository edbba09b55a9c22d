"""GPU telemetry: window math, the sampler against a fake NVML, the join, and the Ray actor."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest
import ray
from tensorboardX import SummaryWriter
from tensorboardX.proto.event_pb2 import Event

from tests.factories import make_row
from tests.fake_nvml import POWER_CAP, THERMAL, FakeNvml, NVMLError_LibraryNotFound
from tests.user_env import user_env
from trainables.spec import TrialSpec
from tuner.runs import observe
from tuner.runs.observe import Telemetry
from tuner.runs.request import Role
from tuner.state.trial_rows import trial_row
from tuner.telemetry import (
    HW_POWER_BRAKE_SLOWDOWN,
    HW_THERMAL_SLOWDOWN,
    GpuSample,
    GpuSampler,
    annotate_trial,
    describe_unavailable,
    downsample,
    fetch_usage,
    fetch_window,
    start_telemetry,
    summarize_usage,
    summarize_window,
    telemetry_nodes,
    write_tensorboard,
)
from tuner.telemetry.gpus import gpu_usage

REPO = Path(__file__).resolve().parents[1]
NO_SUCH_PID = 2**22 + 17  # above Linux's largest pid_max: never a process we can see


class FakeClock:
    def __init__(self, start: float = 1_000.0):
        self.now = start

    def __call__(self) -> float:
        return self.now


def ramp(n: int = 11, **overrides) -> list[GpuSample]:
    """Samples at t = 0..n-1 s: util 10*t %, power 100 W, energy counter 100 J/s."""
    samples = []
    for t in range(n):
        fields = dict(util_gpu=10.0 * t, util_mem=5.0, mem_used_mb=1000.0 + t, power_w=100.0)
        fields.update(energy_mj=1e6 + 100_000.0 * t, temp_c=50.0 + t, sm_clock_mhz=1800.0)
        fields.update(throttle_reasons=0, pids={})
        for name, values in overrides.items():
            fields[name] = values[t]
        samples.append(GpuSample(t=float(t), **fields))
    return samples


# ---------------------------------------------------------------------------------------------------------
# window math on hand-made samples


def test_window_means_peaks_and_counter_energy():
    window = summarize_window(ramp(), 2.0, 8.0)
    assert window["samples"] == 7
    assert window["util_mean"] == pytest.approx(50.0)
    assert window["util_peak"] == 80.0
    assert window["mem_util_mean"] == 5.0
    assert window["power_mean_w"] == 100.0 and window["power_peak_w"] == 100.0
    assert window["mem_peak_mb"] == 1008.0 and window["temp_max_c"] == 58.0
    assert window["sm_clock_mean_mhz"] == 1800.0
    assert window["energy_source"] == "counter"
    assert window["energy_j"] == pytest.approx(600.0)
    assert window["covered_s"] == 6.0
    assert window["throttled_share"] == 0.0 and window["shared"] is False


def test_energy_counter_with_power_at_the_edges_or_integrated_power():
    # the counter says 100 J/s while power reads 300 W: the counter wins between its reads...
    counted = summarize_window(ramp(power_w=[300.0] * 11), 2.0, 8.0)
    assert counted["energy_source"] == "counter" and counted["energy_j"] == pytest.approx(600.0)
    # ...and power covers the edges before the first and after the last read inside the window
    edged = summarize_window(ramp(power_w=[300.0] * 11), 2.5, 7.5)
    assert edged["energy_source"] == "counter" and edged["energy_j"] == pytest.approx(400.0 + 300.0)
    # without power readings the counter's own mean power covers the edges
    alone = summarize_window(ramp(power_w=[None] * 11), 2.5, 7.5)
    assert alone["energy_source"] == "counter" and alone["energy_j"] == pytest.approx(500.0)
    # the counter read only every 4th sample gives the same energy
    sparse = [1e6 + 100_000.0 * t if t % 4 == 0 else None for t in range(11)]
    assert summarize_window(ramp(energy_mj=sparse), 1.0, 9.5)["energy_j"] == pytest.approx(850.0)
    # without a counter, power 100 W for the first 5 s then 200 W, integrated over [2.5, 7.5]
    watts = [100.0] * 5 + [200.0] * 6
    integrated = summarize_window(ramp(energy_mj=[None] * 11, power_w=watts), 2.5, 7.5)
    assert integrated["energy_source"] == "integrated"
    # 2.5..4: 150 J; 4..5 ramps 100->200: 150 J; 5..7.5: 500 J
    assert integrated["energy_j"] == pytest.approx(800.0)


def test_counter_reset_falls_back_to_integrated_power():
    energy = [1e6 + 100_000.0 * t for t in range(11)]
    energy[6:] = [50_000.0 * t for t in range(5)]  # driver reloaded: counter restarts low
    window = summarize_window(ramp(energy_mj=energy), 2.0, 8.0)
    assert window["energy_source"] == "integrated"
    assert window["energy_j"] == pytest.approx(600.0)


def test_throttle_shares_classify_thermal_and_power():
    reasons = [0, 0, THERMAL, HW_THERMAL_SLOWDOWN, POWER_CAP, HW_POWER_BRAKE_SLOWDOWN, 0x01, 0, 0, 0x08, None]
    window = summarize_window(ramp(throttle_reasons=reasons), 0.0, 10.0)
    # 10 readable samples; idle (0x01) and the ambiguous hw slowdown (0x08) are not counted
    assert window["thermal_share"] == pytest.approx(0.2)
    assert window["power_share"] == pytest.approx(0.2)
    assert window["throttled_share"] == pytest.approx(0.4)


def test_other_pids_mark_the_window_shared():
    me, other = os.getpid(), os.getppid()
    pids = [{me: 500.0}] * 5 + [{me: 500.0, other: 200.0}] + [{me: 500.0}] * 5
    alone = summarize_window(ramp(pids=pids), 0.0, 4.0, caller_pids=[me])
    assert alone["other_pids"] == [] and alone["shared"] is False and alone["pids_comparable"] is True
    shared = summarize_window(ramp(pids=pids), 0.0, 10.0, caller_pids=[me])
    assert shared["other_pids"] == [other] and shared["shared"] is True


def test_pids_from_another_namespace_fall_back_to_process_count():
    # a container sees host pids: the caller's own pid is not among them
    single = [{NO_SUCH_PID: 500.0}] * 11
    samples = ramp(pids=single)
    for s in samples:
        s.foreign_pids = True
    window = summarize_window(samples, 0.0, 10.0, caller_pids=[os.getpid()])
    assert window["pids_comparable"] is False and window["shared"] is False
    samples[3].pids = {NO_SUCH_PID: 500.0, NO_SUCH_PID + 1: 10.0}
    assert summarize_window(samples, 0.0, 10.0, caller_pids=[os.getpid()])["shared"] is True


def test_empty_window_has_no_statistics():
    window = summarize_window(ramp(), 20.0, 30.0)
    assert window["samples"] == 0 and window["available"] is True
    assert window["energy_j"] is None and window["util_mean"] is None and window["shared"] is False


def test_downsample_averages_buckets():
    points = downsample(ramp(), 0.0, 10.0, max_points=4)
    assert len(points) == 4  # 11 samples in buckets of 3
    assert points[0]["t"] == pytest.approx(1.0) and points[0]["util_gpu"] == pytest.approx(10.0)
    assert points[-1]["t"] == pytest.approx(9.5) and points[-1]["util_gpu"] == pytest.approx(95.0)
    assert len(downsample(ramp(), 0.0, 10.0, max_points=500)) == 11


def test_usage_over_a_span_counts_idle_readings_and_says_how_much_it_covers():
    usage = summarize_usage(ramp(), 2.0, 12.0)  # readings at t = 2..10 of a span reaching to 12
    assert usage["samples"] == 9 and usage["span_s"] == 10.0 and usage["covered_s"] == 8.0
    assert usage["util_mean"] == 60.0 and usage["util_median"] == 60.0  # 20..100 %, idle ones included
    assert usage["mem_used_mean_mb"] == 1006.0 and usage["mem_used_median_mb"] == 1006.0
    assert usage["mem_used_peak_mb"] == 1010.0 and usage["mem_util_mean"] == 5.0
    gaps = summarize_usage(ramp(util_gpu=[None] * 5 + [90.0] * 6), 0.0, 10.0)
    assert gaps["util_median"] == 90.0 and gaps["util_mean"] == 90.0  # unread values are no zeros
    empty = summarize_usage(ramp(), 20.0, 30.0)
    assert empty["samples"] == 0 and empty["covered_s"] is None and empty["util_mean"] is None


# ---------------------------------------------------------------------------------------------------------
# the sampler against the fake NVML


def sampled(fake: FakeNvml, clock: FakeClock, steps: int, dt: float = 0.125, **kwargs) -> GpuSampler:
    """A sampler that took `steps` sweeps dt apart (dt exact in binary, so windows have exact edges)."""
    sampler = GpuSampler(fake, clock=clock, **kwargs)
    for _ in range(steps):
        sampler.sample_once()
        clock.now += dt
    return sampler


def test_sampler_reads_every_field_and_energy_matches_power():
    clock = FakeClock()
    fake = FakeNvml(gpus=2, unsupported={1: {"nvmlDeviceGetTotalEnergyConsumption"}}, clock=clock)
    sampler = sampled(fake, clock, steps=21)
    t0, t1 = 1_000.5, 1_001.5
    counted, integrated = sampler.window(0, t0, t1), sampler.window(1, t0, t1)
    assert counted["samples"] == 9 and counted["energy_source"] == "counter"
    assert counted["energy_j"] == pytest.approx(FakeNvml.power_w(0) * 1.0, rel=1e-6)
    assert integrated["energy_source"] == "integrated"
    assert integrated["energy_j"] == pytest.approx(FakeNvml.power_w(1) * 1.0, rel=1e-6)
    assert counted["util_mean"] == FakeNvml.util(0) and integrated["util_mean"] == FakeNvml.util(1)
    assert counted["mem_peak_mb"] == 1000.0 and counted["temp_max_c"] == 60.0
    assert counted["sm_clock_mean_mhz"] == 1980.0
    assert integrated["throttled_share"] == 0.0  # GPU 1 is only idle, which is no throttle
    info = sampler.info()
    assert info["available"] is True and info["sweeps"] == 21
    assert [g["uuid"] for g in info["gpus"]][1].endswith("01") and info["gpus"][0]["name"] == "Fake H100"
    assert info["gpus"][0]["memory_total_mb"] == 80 * 1024
    assert info["unsupported"] == {1: {"energy": "NVMLError_NotSupported: Not Supported"}}
    assert "energy (NVMLError_NotSupported: Not Supported) on GPU 1" in describe_unavailable(info)
    # the counter is read every 5th sweep at 5 Hz; GPU 1's is dropped after its first refusal
    assert fake.calls["nvmlDeviceGetTotalEnergyConsumption"] == 5 + 1
    assert [s.energy_mj is not None for s in sampler.samples(0)[:6]] == [True] + [False] * 4 + [True]
    # and a sample stays within ~12 NVML calls
    sample_calls = sum(fake.calls.values()) - fake.calls["nvmlDeviceGetCount"] - 2 * 4  # 4 setup calls a GPU
    assert sample_calls / (21 * 2) <= 12


def test_sampler_finds_gpu_by_uuid_and_answers_unknown_gpus_empty():
    clock = FakeClock()
    sampler = sampled(FakeNvml(gpus=2, clock=clock), clock, steps=5)
    by_uuid = sampler.window("00000000-0000-0000-0000-000000000001", 0, 2_000)
    assert by_uuid["samples"] == 5 and by_uuid["util_mean"] == FakeNvml.util(1)
    assert sampler.window("GPU-00000000-0000-0000-0000-000000000001", 0, 2_000)["samples"] == 5
    assert sampler.window("1", 0, 2_000)["samples"] == 5
    missing = sampler.window(7, 0, 2_000)
    assert missing["samples"] == 0 and "no GPU 7" in missing["reason"]
    assert sampler.window("not-a-gpu", 0, 2_000)["samples"] == 0


def test_sampler_usage_covers_every_gpu_over_each_span():
    clock = FakeClock()
    sampler = sampled(FakeNvml(gpus=2, clock=clock), clock, steps=17)  # 1000.0 .. 1002.0
    usage = sampler.usage({"screen": (1_000.0, 1_001.0), "remeasure": (1_001.5, 1_003.0)})
    assert usage["available"] is True and [g["gpu"] for g in usage["gpus"]] == [0, 1]
    for gpu in usage["gpus"]:
        screen, remeasure = gpu["spans"]["screen"], gpu["spans"]["remeasure"]
        assert screen["util_mean"] == screen["util_median"] == FakeNvml.util(gpu["gpu"])
        assert screen["mem_used_mean_mb"] == 1000 + 100 * gpu["gpu"]
        assert (screen["samples"], remeasure["samples"]) == (9, 5) and remeasure["covered_s"] == 0.5
    without = GpuSampler(FakeNvml(init_error=NVMLError_LibraryNotFound())).usage({"screen": (0, 1)})
    assert without["available"] is False and without["gpus"] == [] and "nvmlInit failed" in without["reason"]


def test_throttle_period_and_fallback_to_the_older_reasons_call():
    clock = FakeClock()
    fake = FakeNvml(gpus=1, throttles=[(0, 0.5, 1.0, THERMAL)], event_reasons="no-driver", clock=clock)
    sampler = sampled(fake, clock, steps=20)
    window = sampler.window(0, 0, 2_000)
    assert window["thermal_share"] == pytest.approx(4 / 20) and window["power_share"] == 0.0
    assert window["sm_clock_mean_mhz"] == pytest.approx((16 * 1980 + 4 * 1200) / 20)
    assert fake.calls["nvmlDeviceGetCurrentClocksEventReasons"] == 1
    assert fake.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 20
    assert sampler.info()["unsupported"] == {}


def test_transient_errors_leave_a_gap_and_sampling_goes_on():
    clock = FakeClock()
    fake = FakeNvml(gpus=1, fail_once={"nvmlDeviceGetPowerUsage": 2}, clock=clock)
    sampler = sampled(fake, clock, steps=6)
    powers = [s.power_w for s in sampler.samples(0)]
    assert powers == [None, None, 100.0, 100.0, 100.0, 100.0]
    info = sampler.info()
    assert info["errors"][0]["power"] == 2 and "Unknown" in info["errors"][0]["last"]
    assert info["unsupported"] == {}


def test_ring_buffer_is_bounded():
    clock = FakeClock()
    sampler = sampled(FakeNvml(gpus=1, clock=clock), clock, steps=50, hz=10.0, history_s=2.0)
    kept = sampler.samples(0)
    assert len(kept) == 20 == sampler.maxlen
    assert kept[0].t == 1_000.0 + 30 * 0.125
    assert sampler.window(0, 1_000.0, 1_003.7)["samples"] == 0  # the oldest were dropped


def test_processes_of_others_are_reported():
    clock = FakeClock()
    me, other = os.getpid(), os.getppid()
    fake = FakeNvml(gpus=1, processes={0: {me: 2048.0}}, clock=clock)
    sampler = sampled(fake, clock, steps=3)
    fake.processes[0][other] = 512.0
    sampler.sample_once()
    assert sampler.samples(0)[-1].pids == {me: 2048.0, other: 512.0}
    assert sampler.window(0, 0, 1_000.3, caller_pids=[me])["shared"] is False
    window = sampler.window(0, 0, 2_000, caller_pids=[me])
    assert window["other_pids"] == [other] and window["shared"] is True
    assert sampler.info()["pids_comparable"] is True


def test_sampling_thread_keeps_its_rate():
    fake = FakeNvml(gpus=2)
    sampler = GpuSampler(fake, hz=50.0).start()
    t0 = time.time()
    time.sleep(0.3)
    sampler.stop()
    t1 = time.time()
    for gpu in (0, 1):
        window = sampler.window(gpu, t0, t1)
        assert 8 <= window["samples"] <= 17, window["samples"]  # ~15; slack for a busy CI
    assert sampler.info()["available"] is False and fake.initialized is False  # nvmlShutdown called
    assert sampler.info()["cpu_duty"] < 0.5


def test_pause_keeps_samples_and_start_resumes():
    sampler = GpuSampler(FakeNvml(gpus=1), hz=50.0).start()
    time.sleep(0.2)
    sampler.pause()
    paused_at, count = time.time(), len(sampler.samples(0))
    time.sleep(0.2)
    assert count >= 4 and len(sampler.samples(0)) == count
    assert sampler.window(0, paused_at, time.time())["samples"] == 0
    sampler.start()
    time.sleep(0.2)
    sampler.stop()
    assert len(sampler.samples(0)) >= count + 4 and sampler.info()["available"] is False


@pytest.mark.parametrize(
    ("nvml", "reason"),
    [
        ("no_such_nvml_module", "cannot import no_such_nvml_module"),
        (FakeNvml(init_error=NVMLError_LibraryNotFound()), "nvmlInit failed"),
        (FakeNvml(gpus=0), "NVML sees no GPUs"),
    ],
)
def test_missing_nvml_reports_unavailable_without_raising(nvml, reason):
    sampler = GpuSampler(nvml, hz=50.0).start()
    sampler.sample_once()
    info = sampler.info()
    assert info["available"] is False and reason in info["reason"]
    for answer in (sampler.window(0, 0, time.time()), sampler.timeline(0, 0, time.time())):
        assert answer["samples"] == 0 and answer["available"] is False and reason in answer["reason"]
    assert sampler.timeline(0, 0, time.time())["points"] == []
    line = describe_unavailable({**info, "node_id": "n1"})
    assert line.startswith("GPU telemetry unavailable on node n1:") and reason in line
    sampler.stop()


def test_real_pynvml_answers_either_way():
    sampler = GpuSampler()  # the real pynvml: on CPU machines nvmlInit fails for want of the driver
    sampler.sample_once()
    info = sampler.info()
    if info["available"]:
        assert info["gpus"] and sampler.window(0, 0, time.time())["samples"] == 1
    else:
        assert "nvmlInit failed" in info["reason"]
        assert sampler.window(0, 0, time.time())["available"] is False
    sampler.stop()


# ---------------------------------------------------------------------------------------------------------
# joining trials to windows, and plots


def test_annotate_trial_energy_per_token_and_trust():
    trial = {"tokens_per_s": 1e5, "tokens": 400_000, "window_t0": 2.0, "window_t1": 8.0, "gpu": 0}
    window = summarize_window(ramp(), 2.0, 8.0)
    row = annotate_trial(trial, window)
    assert row["tokens_per_s"] == 1e5  # the trial's own metrics stay
    assert row["energy_j"] == pytest.approx(600.0)
    assert row["joules_per_token"] == pytest.approx(600.0 / 400_000)
    assert row["gpu_util_mean"] == pytest.approx(50.0) and row["gpu_power_mean_w"] == 100.0
    assert row["gpu_temp_max_c"] == 58.0 and row["throttled_share"] == 0.0
    assert row["telemetry_trusted"] is True and row["shared"] is False

    throttled = summarize_window(ramp(throttle_reasons=[THERMAL] + [0] * 10), 0.0, 10.0)
    assert throttled["throttled_share"] == pytest.approx(1 / 11)
    assert annotate_trial(trial, throttled)["telemetry_trusted"] is False
    assert annotate_trial(trial, throttled, max_throttled_share=0.1)["telemetry_trusted"] is True

    shared = dict(window, shared=True, other_pids=[123])
    row = annotate_trial(trial, shared)
    assert row["telemetry_trusted"] is False and "123" in row["telemetry_note"]
    assert annotate_trial(trial, summarize_window(ramp(), 2.0, 3.0))["telemetry_trusted"] is False


def test_annotate_trial_without_telemetry_or_tokens():
    row = annotate_trial({"tokens": 0}, summarize_window(ramp(), 2.0, 8.0))
    assert row["joules_per_token"] is None and row["energy_j"] == pytest.approx(600.0)
    sampler = GpuSampler("no_such_nvml_module")
    row = annotate_trial({"tokens": 100}, sampler.window(0, 0, 1))
    assert row["telemetry_trusted"] is False and row["energy_j"] is None
    assert "cannot import" in row["telemetry_note"]


def read_scalars(logdir: Path) -> list[tuple[str, int, float, float]]:
    """(tag, step, value, wall time) from tensorboardX event files: TFRecord framing around Event protos."""
    found = []
    for path in sorted(logdir.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        offset = 0
        while offset < len(data):
            (length,) = struct.unpack("<Q", data[offset : offset + 8])
            event = Event.FromString(data[offset + 12 : offset + 12 + length])
            offset += 12 + length + 4
            for value in event.summary.value:
                found.append((value.tag, event.step, value.simple_value, event.wall_time))
    return found


def test_write_tensorboard_writes_the_timeline(tmp_path):
    clock = FakeClock()
    sampler = sampled(FakeNvml(gpus=2, clock=clock), clock, steps=10)
    timeline = sampler.timeline(1, 0, 2_000, max_points=5)
    assert timeline["gpu"] == 1 and len(timeline["points"]) == 5 and timeline["samples"] == 10
    with SummaryWriter(str(tmp_path)) as writer:
        written = write_tensorboard(writer, timeline, tag_prefix="tele")
    scalars = read_scalars(tmp_path)
    assert len(scalars) == written > 0
    power = [(step, value, wall) for tag, step, value, wall in scalars if tag == "tele/gpu1/power_w"]
    assert [step for step, _, _ in power] == [0, 250, 500, 750, 1000]
    assert all(value == FakeNvml.power_w(1) for _, value, _ in power)
    assert power[0][2] == pytest.approx(1_000.0625)


# ---------------------------------------------------------------------------------------------------------
# the Ray actor, with the fake injected by module path


def test_telemetry_goes_to_alive_gpu_nodes_or_all_alive_nodes():
    nodes = [
        {"NodeID": "gpu", "Alive": True, "Resources": {"CPU": 8.0, "GPU": 2.0}},
        {"NodeID": "cpu", "Alive": True, "Resources": {"CPU": 8.0}},
        {"NodeID": "dead-gpu", "Alive": False, "Resources": {"GPU": 1.0}},
    ]
    assert telemetry_nodes(nodes) == ["gpu"]
    assert telemetry_nodes(nodes, all_nodes=True) == ["gpu", "cpu"]


@pytest.fixture(scope="module")
def local_ray():
    """One Ray for the module's two actor tests (a start is most of a test): the one that stops the actor
    runs last, and a second start_telemetry finds the running actor, as a search's does."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
        monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
        monkeypatch.setenv("RAY_metrics_report_interval_ms", "500")  # gauges reach Prometheus quickly
        monkeypatch.chdir(REPO)  # workers get the driver's cwd on sys.path, so `tests.fake_nvml` imports
        # a fake GPU resource: the node looks like a GPU node to the scheduler, here and on GPU machines alike
        ray.init(address="local", num_cpus=1, num_gpus=1, include_dashboard=False, configure_logging=False)
        monkeypatch.undo()  # the cwd back for the module's other tests; Ray keeps what it read
        yield ray
        ray.shutdown()


def test_each_trial_joins_its_own_gpu_and_usage_answers_for_every_gpu(local_ray):
    """Two fake GPUs busy to different degrees (50 % and 60 %): a trial on GPU 1 gets GPU 1's window, not
    GPU 0's, through the join the search runs (tuner/runs/observe.py), and the usage query answers for both."""
    actors = start_telemetry(hz=20.0, nvml_module="tests.fake_nvml", energy_hz=5.0)
    ((node_id, actor),) = actors.items()
    assert ray.get(actor.info.remote(), timeout=60)["available"]
    t0 = time.time()
    time.sleep(1.0)
    t1 = time.time()
    window = {"window_t0": t0, "window_t1": t1, "window_tokens": 1000, "pid": os.getpid()}
    rows = [make_row(f"remeasure-{g}", "remeasure", gpu=g, node_id=node_id, **window) for g in (1, 0)]
    ctx = SimpleNamespace(telemetry=Telemetry(actors=actors), notice=lambda msg: None)
    joined = {row.gpu: row for row in observe.annotate(ctx, rows, Role.REMEASURE)}
    assert joined[1].gpu_util_mean == FakeNvml.util(1) and joined[0].gpu_util_mean == FakeNvml.util(0)
    assert joined[1].gpu_power_mean_w == FakeNvml.power_w(1) and joined[1].telemetry_samples >= 12
    usage = gpu_usage(fetch_usage(actors, {"remeasure": (t0, t1)}))
    assert [(u.node_id, u.gpu) for u in usage] == [(node_id, 0), (node_id, 1)]
    assert [u.spans["remeasure"].util_mean for u in usage] == [FakeNvml.util(0), FakeNvml.util(1)]
    assert fetch_usage({"gone": None}, {"remeasure": (t0, t1)})[0]["available"] is False


def test_actor_samples_through_the_fake_and_answers_windows(local_ray):
    actors = start_telemetry(hz=20.0, nvml_module="tests.fake_nvml", energy_hz=5.0)
    ((node_id, actor),) = actors.items()
    info = ray.get(actor.info.remote(), timeout=60)
    assert info["available"] is True and info["node_id"] == node_id and info["hz"] == 20.0
    assert info["unsupported"] == {1: {"energy": "NVMLError_NotSupported: Not Supported"}}
    assert info["pid"] != os.getpid()
    t0 = time.time()
    time.sleep(1.0)
    t1 = time.time()
    trial = {"node": node_id, "gpu": 0, "window_t0": t0, "window_t1": t1, "tokens": 1000, "pid": os.getpid()}
    window = fetch_window(actors, trial)
    assert 12 <= window["samples"] <= 22 and window["node"] == node_id
    assert window["energy_source"] == "counter"
    assert window["energy_j"] == pytest.approx(FakeNvml.power_w(0) * (t1 - t0), rel=0.1)
    assert window["util_mean"] == FakeNvml.util(0)
    row = annotate_trial(trial, window)
    assert row["joules_per_token"] == pytest.approx(window["energy_j"] / 1000)
    # the default fake throttles GPU 0 from 0.2 s to 0.4 s after the actor imported it
    whole = ray.get(actor.window.remote(0, 0, time.time()), timeout=30)
    assert 0 < whole["thermal_share"] < 0.5
    timeline = ray.get(actor.timeline.remote(1, t0, t1, 5), timeout=30)
    assert len(timeline["points"]) == 5 and timeline["points"][0]["power_w"] == FakeNvml.power_w(1)
    missing = fetch_window(actors, {**trial, "node": "elsewhere"})
    assert missing["samples"] == 0 and "no telemetry actor" in missing["reason"]
    # a second start finds the running actor instead of starting another sampler
    again = start_telemetry(hz=20.0, nvml_module="tests.fake_nvml")
    assert ray.get(again[node_id].info.remote(), timeout=30)["pid"] == info["pid"]
    power_line = scrape_metric(ray.nodes()[0]["MetricsExportPort"], "ray_tuner_gpu_power_watts", 'gpu="1"')
    assert f'node="{node_id}"' in power_line and power_line.endswith(" 150.0")
    ray.get(actor.pause.remote(), timeout=30)
    p0 = time.time()
    time.sleep(0.3)
    assert ray.get(actor.window.remote(0, p0, time.time()), timeout=30)["samples"] == 0
    ray.get(actor.resume.remote(), timeout=30)
    r0 = time.time()
    time.sleep(0.3)
    assert ray.get(actor.window.remote(0, r0, time.time()), timeout=30)["samples"] >= 3
    stopped = ray.get(actor.stop.remote(), timeout=30)
    assert stopped["exports"] >= 1 and stopped["export_error"] is None


def test_a_node_is_named_by_a_short_id():
    line = describe_unavailable({"available": False, "node_id": "7088e154" + "e6" * 24, "reason": "no NVML"})
    assert line.startswith("GPU telemetry unavailable on node 7088e154: no NVML;") and "e6e6" not in line


def scrape_metric(port: int, name: str, label: str, timeout_s: float = 15.0) -> str:
    """The Prometheus line of metric `name` carrying `label`, from the node's metrics agent."""
    deadline = time.time() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
                body = response.read().decode()
        except OSError:
            body = ""
        lines = [line for line in body.splitlines() if line.startswith(name + "{") and label in line]
        if lines or time.time() > deadline:
            assert lines, f"{name} with {label} never reached the metrics agent"
            return lines[0]
        time.sleep(0.5)


def test_a_stopped_trial_keeps_the_window_of_its_last_interim_report():
    interim = {"status": "running", "tokens_per_s": 1e5, "window_t0": 2.0, "window_t1": 8.0}
    interim |= {"window_tokens": 400_000, "gpu": 0, "node_id": "n1", "pid": 7}
    row = trial_row(interim, TrialSpec.of({"batch_size": 16}), None, None)
    assert row["status"] == "stopped" and row["tokens_per_s"] == 1e5
    assert (row["window_t0"], row["window_t1"], row["gpu"], row["node_id"]) == (2.0, 8.0, 0, "n1")
    joined = annotate_trial(row, summarize_window(ramp(), row["window_t0"], row["window_t1"]))
    assert joined["joules_per_token"] == pytest.approx(600.0 / 400_000)


def test_overhead_bench_alternates_paused_and_sampling_segments(tmp_path):
    """bench/telemetry_overhead.py --segments: n off and n on segments of one run, the sampler paused between."""
    config = tmp_path / "toy.yaml"
    config.write_text(
        "workload: toy_workload:make_workload\nseq_len: 16\nbatch_size: 8\ntiming_warmup_steps: 2\n"
    )
    path = os.pathsep.join(p for p in (str(REPO / "tests"), str(REPO), os.environ.get("PYTHONPATH")) if p)
    cmd = [
        sys.executable,
        "bench/telemetry_overhead.py",
        "--config",
        str(config),
        "--segments",
        "3",
        "--steps",
        "2",
    ]
    done = subprocess.run(
        cmd, cwd=REPO, env={**user_env(), "PYTHONPATH": path}, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["segments"] == 6 and len(result["tokens_per_s_off"]) == len(result["tokens_per_s_on"]) == 3
    assert all(r > 0 for r in result["tokens_per_s_off"] + result["tokens_per_s_on"])
    low, high = result["paired_overhead_pct_quartiles"]
    assert low <= result["paired_overhead_pct_median"] <= high
    low, high = result["paired_overhead_pct_median_ci95"]
    assert low <= result["paired_overhead_pct_median"] <= high
    sampler = result["sampler"]
    # sampling only in the "on" segments: ~5 Hz over about half the run where NVML exists, none without it
    assert (sampler["sweeps"] > 0) == sampler["available"]


def test_a_later_phase_whose_runs_compiled_from_scratch_gets_a_notice():
    # Run G: the loss check's runs warmed up 110-115 s although the screen had filled the cache.
    notices: list[str] = []
    ctx = SimpleNamespace(telemetry=Telemetry(actors=[]), notice=notices.append)
    rows = [
        make_row(f"loss_check_0-{i}", "loss_check_0", compile_cache_use=use, warmup_s=warmup)
        for i, (use, warmup) in enumerate([("miss", 110.7), ("miss", 115.3), ("hit", 8.0), (None, 2.0)])
    ]
    observe.annotate(ctx, rows, Role.LOSS)
    assert notices == [
        "loss_check_0: 2 of 4 runs compiled from scratch (Inductor's cache answered none of their graphs), "
        "111-115 s of warm-up each"
    ]
    screen = [make_row("screen-0", "screen", compile_cache_use="miss", warmup_s=120.0)]
    observe.annotate(ctx, screen, Role.SPEED)  # the screen compiles first: its misses are expected
    ahead = [make_row("loss_check_ahead-0", "loss_check_ahead", compile_cache_use="miss", warmup_s=90.0)]
    observe.annotate(ctx, ahead, Role.AHEAD)  # so do the loss runs trained beside it
    assert len(notices) == 1


def test_only_timed_runs_that_shared_the_cpus_get_a_notice():
    # Loss runs share the machine by design and their speed is never used; a timed run's is the answer's.
    notices: list[str] = []
    ctx = SimpleNamespace(telemetry=Telemetry(actors=[]), notice=notices.append)
    busy = {"cpu_own_cores": 1.0, "cpu_others_cores": 3.0, "cpu_count": 4, "window_t0": 1.0, "window_t1": 9.0}
    rows = [make_row(f"p-{i}", "p", **busy) for i in range(2)]
    for role in (Role.LOSS, Role.BESIDE, Role.AHEAD):
        assert all(r.cpu_shared for r in observe.annotate(ctx, rows, role)) and not notices
    assert all(r.cpu_shared for r in observe.annotate(ctx, rows, Role.REMEASURE))
    assert len(notices) == 1 and notices[0].startswith("p: 2 of 2 timed runs shared the CPU"), notices
