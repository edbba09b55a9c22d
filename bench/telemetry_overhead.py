"""Telemetry overhead on training throughput: the same config trained with the NVML sampler off and on.

    python bench/telemetry_overhead.py --config configs/default.yaml --set batch_size=128 --set precision=bf16

Runs alternate off/on (repeats each) in one process on one GPU, so drift hits both equally; prints the
median tok/s of each, the overhead in percent from those medians and, steadier under drift, the median of
the per-pair overheads (each "on" run against the "off" run just before it), plus the sampler's own window
for the last "on" run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import ray  # noqa: E402

from trainables.config import load_config  # noqa: E402
from trainables.loop import train  # noqa: E402
from tuner.telemetry import start_telemetry  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--config", default="configs/default.yaml")
    p.add_argument("--set", dest="overrides", action="append", default=[])
    p.add_argument("--data")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--hz", type=float, default=5.0)
    args = p.parse_args()
    overrides = [f"max_steps={args.steps}", "eval_interval=0", "eval_tokens=4096", *args.overrides]
    cfg = load_config(args.config, overrides, data=args.data)

    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    speeds: dict[str, list[float]] = {"off": [], "on": []}
    actors: dict = {}
    window = None
    train(cfg, log=None)  # warm-up run: allocator, kernels, data cache
    for _ in range(args.repeats):
        for mode in ("off", "on"):
            if mode == "on" and not actors:
                actors = start_telemetry(hz=args.hz, all_nodes=True, export_metrics=True)
                ray.get([a.info.remote() for a in actors.values()])
            if mode == "off" and actors:
                ray.get([a.stop.remote() for a in actors.values()])
                for a in actors.values():
                    ray.kill(a)
                actors = {}
            result = train(cfg, log=None)
            speeds[mode].append(result["tokens_per_s"])
            if mode == "on":
                actor = next(iter(actors.values()))
                window = ray.get(
                    actor.window.remote(0, result["window_t0"], result["window_t1"], [os.getpid()])
                )
            print(f"{mode}: {result['tokens_per_s']:,.0f} tok/s", file=sys.stderr, flush=True)
    off, on = statistics.median(speeds["off"]), statistics.median(speeds["on"])
    pairs = sorted(100 * (a - b) / a for a, b in zip(speeds["off"], speeds["on"], strict=True))
    print(
        json.dumps(
            {
                "config": {k: getattr(cfg, k) for k in ("batch_size", "precision", "kernels", "compile")},
                "steps": args.steps,
                "repeats": args.repeats,
                "hz": args.hz,
                "tokens_per_s_off": speeds["off"],
                "tokens_per_s_on": speeds["on"],
                "median_off": off,
                "median_on": on,
                "overhead_pct": round(100 * (off - on) / off, 2),
                "paired_overhead_pct_median": round(statistics.median(pairs), 2),
                "paired_overhead_pct_range": [round(pairs[0], 2), round(pairs[-1], 2)],
                "window_on": window,
            }
        )
    )
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
