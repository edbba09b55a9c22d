"""Probe the GPU telemetry actor on a real GPU: local Ray, real pynvml, a matmul load, one window.

    python bench/nvml_probe.py [--hz 5] [--load-s 5] [--idle-s 1.5] [--size 8192] [--out probe.json]

Prints {"info", "idle", "load", "timeline", "annotated", "checks", ...} as JSON. Exit status: 0 all checks
passed, 2 NVML unavailable (or no telemetry actor), 3 a check failed, 4 no CUDA device for the load.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere in the checkout

import ray  # noqa: E402

from tuner.telemetry import FIELDS, annotate_trial, describe_unavailable, start_telemetry  # noqa: E402


def matmul_load(seconds: float, size: int) -> dict:
    """Back-to-back bf16 matmuls on cuda:0 for `seconds`; the window is taken after a warm-up."""
    import torch

    while True:
        try:
            a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
            for _ in range(3):
                a @ b
            torch.cuda.synchronize()
            break
        except torch.OutOfMemoryError:
            if size <= 1024:
                raise
            size //= 2
    matmuls = 0
    t0 = time.time()
    while time.time() - t0 < seconds:
        for _ in range(10):
            a @ b
        torch.cuda.synchronize()  # keeps the queue short so t1 is when the work really ended
        matmuls += 10
    t1 = time.time()
    tflops = 2 * size**3 * matmuls / (t1 - t0) / 1e12
    return {"t0": t0, "t1": t1, "size": size, "matmuls": matmuls, "tflops": tflops}


def nvml_call_costs(repeats: int = 50) -> dict:
    """Mean wall and CPU ms of each telemetry field's NVML call on GPU 0, read in this process."""
    import pynvml

    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        costs = {}
        for fld in FIELDS:
            fn = next((getattr(pynvml, name) for name in fld.calls if hasattr(pynvml, name)), None)
            wall, cpu = time.perf_counter(), time.thread_time()
            try:
                for _ in range(repeats):
                    fld.read(pynvml, fn, handle)
            except Exception as err:
                costs[fld.name] = f"{type(err).__name__}: {err}"
                continue
            wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
            costs[fld.name] = {"wall_ms": 1000 * wall / repeats, "cpu_ms": 1000 * cpu / repeats}
        return costs
    finally:
        pynvml.nvmlShutdown()


def cuda_device() -> tuple[str | int, str]:
    """How the telemetry actor should name torch's cuda:0: its UUID (CUDA_VISIBLE_DEVICES-proof)."""
    import torch

    props = torch.cuda.get_device_properties(0)
    uuid = getattr(props, "uuid", None)
    return (str(uuid) if uuid else 0), props.name


def probe(args: argparse.Namespace) -> tuple[int, dict]:
    actors = start_telemetry(hz=args.hz) or start_telemetry(hz=args.hz, all_nodes=True)
    if not actors:
        return 2, {"error": "Ray reports no alive node"}
    node_id, actor = next(iter(actors.items()))
    info = ray.get(actor.info.remote(), timeout=120)
    report: dict = {"node": node_id, "info": info, "note": describe_unavailable(info)}
    if not info["available"]:
        return 2, report

    import torch

    if not torch.cuda.is_available():
        report["error"] = "NVML works but torch sees no CUDA device to load"
        return 4, report
    gpu, name = cuda_device()
    report["gpu"], report["gpu_name"] = gpu, name

    idle0 = time.time()
    time.sleep(args.idle_s)
    idle1 = time.time()
    load = matmul_load(args.load_s, args.size)
    time.sleep(2.5 / args.hz)  # a sample after t1, so the window's end is interpolated, not clamped
    me = [os.getpid()]
    idle = ray.get(actor.window.remote(gpu, idle0, idle1, me), timeout=60)
    window = ray.get(actor.window.remote(gpu, load["t0"], load["t1"], me), timeout=60)
    timeline = ray.get(actor.timeline.remote(gpu, idle0, load["t1"], args.points), timeout=60)
    info = ray.get(actor.info.remote(), timeout=60)  # again: errors and costs after the run
    report["nvml_call_costs"] = nvml_call_costs()  # measured while the GPU is busy would skew the load
    trial = {"tokens": load["matmuls"], "window_t0": load["t0"], "window_t1": load["t1"], "gpu": gpu}
    annotated = annotate_trial(trial, window)

    span = load["t1"] - load["t0"]
    expected = args.hz * span
    mean_power_energy = (window["power_mean_w"] or 0) * span
    checks = {
        "samples_at_rate": window["samples"] >= 0.6 * expected,
        "util_peak_over_50": (window["util_peak"] or 0) >= 50,
        "power_rises_under_load": (window["power_mean_w"] or 0) > (idle["power_mean_w"] or 0),
        "energy_positive": (window["energy_j"] or 0) > 0,
        # the sampler runs in its own process; this is its CPU cost, per GPU sampled
        "sampler_cpu_under_1pct_of_a_core_per_gpu": info["cpu_duty"] / len(info["gpus"]) < 0.01,
    }
    report.update(
        info=info,
        load=load,
        idle=idle,
        window=window,
        expected_samples=expected,
        # H100 power readings are ~1 s averages, so this lands near 1 when the counter is right
        energy_over_mean_power_x_time=window["energy_j"] / mean_power_energy if mean_power_energy else None,
        annotated={k: annotated[k] for k in ("joules_per_token", "telemetry_trusted", "telemetry_note")},
        timeline=timeline,
        checks=checks,
    )
    report["stopped"] = ray.get(actor.stop.remote(), timeout=60)["sweeps"]
    return (0 if all(checks.values()) else 3), report


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hz", type=float, default=5.0, help="sampling rate (the search default)")
    parser.add_argument("--load-s", type=float, default=5.0)
    parser.add_argument("--idle-s", type=float, default=1.5)
    parser.add_argument("--size", type=int, default=8192, help="matmul side (halved on OOM)")
    parser.add_argument("--points", type=int, default=40, help="timeline points")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args()

    ray.init(address="local", include_dashboard=False, configure_logging=False, log_to_driver=False)
    try:
        status, report = probe(args)
    except Exception as err:  # report what broke as JSON rather than a bare traceback
        status, report = 1, {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()}
    finally:
        ray.shutdown()
    report["exit_status"] = status
    text = json.dumps(report, indent=2, default=str)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
