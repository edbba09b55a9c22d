"""Telemetry overhead on training throughput: the same config trained with the NVML sampler off and on.

    python bench/telemetry_overhead.py --set batch_size=128 --set precision=bf16              # whole runs
    python bench/telemetry_overhead.py --set batch_size=128 --set precision=bf16 --segments 40

Whole runs (default): runs alternate off/on (--repeats each) in one process on one GPU, so drift hits
both equally; prints the median tok/s of each, the overhead from those medians and, steadier under drift,
the median of the per-pair overheads (each "on" run against the "off" run just before it).

Segments (--segments N): one long run whose steps are cut into 2N segments of --steps steps; the sampler
(the search's own Ray actor) is paused and resumed at each segment boundary, so "on" and "off" alternate
every few seconds and share the machine's slow drift. Each "on" segment is compared with the mean of the
"off" segments on either side; the median of those overheads is the figure, with its interquartile range.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import ray  # noqa: E402

from trainables.config import TrainConfig, load_config  # noqa: E402
from trainables.training.loop import train  # noqa: E402
from tuner.telemetry import start_telemetry  # noqa: E402


def _pct(off: float, on: float) -> float:
    return 100 * (off - on) / off


def _quartiles(values: list[float]) -> list[float]:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else values * 3
    return [round(q[0], 2), round(q[2], 2)]


def whole_runs(cfg: TrainConfig, repeats: int, hz: float) -> dict:
    speeds: dict[str, list[float]] = {"off": [], "on": []}
    actors: dict = {}
    window = None
    train(cfg, log=None)  # warm-up run: allocator, kernels, data cache
    for _ in range(repeats):
        for mode in ("off", "on"):
            if mode == "on" and not actors:
                actors = start_telemetry(hz=hz, all_nodes=True, export_metrics=True)
                ray.get([a.info.remote() for a in actors.values()])
            if mode == "off" and actors:
                ray.get([a.stop.remote() for a in actors.values()])
                for a in actors.values():
                    ray.kill(a)
                actors = {}
            result = train(cfg, log=None)
            speeds[mode].append(result.tokens_per_s)
            if mode == "on":
                actor = next(iter(actors.values()))
                window = ray.get(actor.window.remote(0, result.window_t0, result.window_t1, [os.getpid()]))
            print(f"{mode}: {result.tokens_per_s:,.0f} tok/s", file=sys.stderr, flush=True)
    off, on = statistics.median(speeds["off"]), statistics.median(speeds["on"])
    pairs = sorted(_pct(a, b) for a, b in zip(speeds["off"], speeds["on"], strict=True))
    return {
        "tokens_per_s_off": speeds["off"],
        "tokens_per_s_on": speeds["on"],
        "median_off": off,
        "median_on": on,
        "overhead_pct": round(_pct(off, on), 2),
        "paired_overhead_pct_median": round(statistics.median(pairs), 2),
        "paired_overhead_pct_range": [round(pairs[0], 2), round(pairs[-1], 2)],
        "window_on": window,
    }


def paired_overheads(off: list[float], on: list[float]) -> list[float]:
    """Overhead (%) of each "on" segment against the mean of the "off" segments before and after it."""
    return [_pct((off[i] + off[i + 1]) / 2, on[i]) for i in range(min(len(on), len(off) - 1))]


def median_ci95(values: list[float], resamples: int = 10_000, seed: int = 0) -> list[float]:
    """Bootstrap 95% interval of the median (percentile method, fixed seed: reruns print the same)."""
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    return [round(medians[int(0.025 * resamples)], 2), round(medians[int(0.975 * resamples) - 1], 2)]


def segments(cfg: TrainConfig, n: int, steps: int, hz: float) -> dict:
    (actor,) = start_telemetry(hz=hz, all_nodes=True, export_metrics=True).values()
    available = ray.get(actor.info.remote())["available"]
    ray.get(actor.pause.remote())
    tokens_per_segment = steps * cfg.batch_size * cfg.grad_accum * cfg.seq_len
    rates: list[tuple[str, float]] = []  # (mode, tok/s) per segment, in order
    state = {"mode": "off", "since": None}

    def boundary(point: dict) -> None:
        # The loop synchronises the GPU before each report, so segment times are whole steps' times.
        now = time.perf_counter()
        if point["done"]:  # the last report comes after the final evaluation: not a training segment
            return
        if state["since"] is not None and point["step"] - steps >= cfg.timing_warmup_steps:
            rates.append((state["mode"], tokens_per_segment / (now - state["since"])))
        on = len(rates) % 2 == 1  # off, on, off, on, ... from the first timed segment
        ray.get(actor.resume.remote() if on else actor.pause.remote())
        state["mode"] = "on" if on else "off"
        state["since"] = time.perf_counter()  # the pause/resume call itself is not counted

    warm = -(-cfg.timing_warmup_steps // steps)  # whole segments before timing starts
    total = (2 * n + warm + 1) * steps  # + 1: the last segment ends in the final evaluation
    train(
        cfg.model_copy(update={"max_steps": total, "log_interval": steps}),
        log=None,
        report=boundary,
    )
    info = ray.get(actor.stop.remote())
    off = [r for m, r in rates if m == "off"]
    on = [r for m, r in rates if m == "on"]
    paired = paired_overheads(off, on)
    return {
        "segments": len(rates),
        "steps_per_segment": steps,
        "tokens_per_s_off": [round(r, 1) for r in off],
        "tokens_per_s_on": [round(r, 1) for r in on],
        "median_off": round(statistics.median(off), 1),
        "median_on": round(statistics.median(on), 1),
        "overhead_pct": round(_pct(statistics.median(off), statistics.median(on)), 2),
        "paired_overhead_pct_median": round(statistics.median(paired), 2),
        "paired_overhead_pct_quartiles": _quartiles(paired),
        "paired_overhead_pct_median_ci95": median_ci95(paired),
        "sampler": {
            "available": available,
            **{k: info[k] for k in ("reason", "sweeps", "sweep_ms_mean", "sweep_cpu_ms_mean", "cpu_duty")},
        },
    }


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--config", default="configs/default.yaml")
    p.add_argument("--set", dest="overrides", action="append", default=[])
    p.add_argument("--data")
    p.add_argument("--steps", type=int, default=150, help="steps per run (per segment with --segments)")
    p.add_argument("--repeats", type=int, default=3, help="whole-run pairs")
    p.add_argument("--segments", type=int, default=0, help="on/off segment pairs in one run (0: whole runs)")
    p.add_argument("--hz", type=float, default=5.0)
    args = p.parse_args()
    overrides = [f"max_steps={args.steps}", "eval_interval=0", "eval_tokens=4096", *args.overrides]
    cfg = load_config(args.config, overrides, data=args.data)

    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR")
    if args.segments:
        result = segments(cfg, args.segments, args.steps, args.hz)
    else:
        result = whole_runs(cfg, args.repeats, args.hz)
    config = {k: getattr(cfg, k) for k in ("batch_size", "precision", "kernels", "compile", "loader")}
    print(
        json.dumps({"config": config, "steps": args.steps, "repeats": args.repeats, "hz": args.hz, **result})
    )
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
