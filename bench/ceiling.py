"""How fast can the workload train on this GPU? A sweep of batch x precision x compile x kernels.

    python bench/ceiling.py --data tinyshakespeare.txt [--batches 8,64,512] [--precisions fp32,bf16]
        [--compiles none,reduce-overhead] [--kernels torch,fused] [--steps 40] [--profile] [--out DIR]

Each config trains in its own process (`python -m trainables.train --json`, so an OOM or a crash stays
there) for `timing_warmup_steps` + `--steps` steps of the seed model (configs/seed-baseline.yaml), one at a
time on the GPU, sharing one Inductor/Triton cache (TORCHINDUCTOR_CACHE_DIR / TRITON_CACHE_DIR as set, else
DIR/cache). It prints a markdown table: steady tok/s, step ms (median), compile + warm-up s, peak memory and
MFU = 6 x parameters x tok/s / the GPU's dense bf16 peak (the usual training-FLOPs estimate; this model's
mixers do more work per token than a matmul-only count, so MFU is a floor). With --profile the fastest
config runs again under torch.profiler and the table of where its step time goes is written to
DIR/profile.txt (top CUDA kernels and CPU ops by total time) and DIR/trace.json (chrome://tracing).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from anywhere

# Dense bf16 tensor-core peak by GPU name (vendor datasheets, SXM parts): MFU's denominator.
BF16_PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0}
WARMUP_STEPS = 10


def peak_tflops(name: str) -> float | None:
    return next((v for k, v in BF16_PEAK_TFLOPS.items() if k in name), None)


def run_config(args, knobs: dict[str, str], env: dict[str, str]) -> dict:
    sets = {**knobs, "max_steps": WARMUP_STEPS + args.steps, "timing_warmup_steps": WARMUP_STEPS}
    sets |= {"eval_interval": 0, "eval_tokens": 256 * 8, "log_interval": max(1, args.steps // 2)}
    cmd = [sys.executable, "-m", "trainables.train", "--config", str(ROOT / "configs/seed-baseline.yaml")]
    cmd += ["--json", *(f"--set={k}={v}" for k, v in sets.items())]
    cmd += ["--data", args.data] if args.data else []
    started = time.time()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:  # a cold compile past --timeout is a result too, not the sweep's end
        error = f"did not finish in {args.timeout:.0f} s (compile + warm-up + {args.steps} steps)"
        return {**knobs, "status": "timeout", "error": error, "process_s": round(time.time() - started, 1)}
    lines = proc.stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        result = {"status": "error", "error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
    return {**knobs, **result, "process_s": round(time.time() - started, 1)}


def mfu(row: dict, gpu: str) -> float | None:
    peak = peak_tflops(gpu)
    if not (peak and row.get("tokens_per_s") and row.get("params")):
        return None
    return 6 * row["params"] * row["tokens_per_s"] / (peak * 1e12)


def table(rows: list[dict], gpu: str) -> str:
    head = "| batch | precision | compile | kernels | tok/s | step ms | compile+warm-up s | peak MiB | MFU |"
    out = [head, "|" + "---|" * 9]
    for r in rows:
        if r.get("status") != "ok":
            out.append(f"| {r['batch_size']} | {r['precision']} | {r['compile']} | {r['kernels']} | "
                       f"{r.get('status')}: {str(r.get('error'))[:80]} | | | | |")  # fmt: skip
            continue
        m = mfu(r, gpu)
        out.append(
            f"| {r['batch_size']} | {r['precision']} | {r['compile']} | {r['kernels']} | "
            f"{r['tokens_per_s']:,.0f} | {r['step_ms_median']:.1f} | {r['warmup_s']:.1f} | "
            f"{r['peak_mem_mb']:,.0f} | {f'{m:.2%}' if m is not None else '—'} |"
        )
    return "\n".join(out)


def profile(args, best: dict, out: Path) -> None:
    """The fastest config's steady steps under torch.profiler: where the step time goes."""
    import torch
    from torch.profiler import ProfilerActivity, schedule

    from trainables.config import load_config
    from trainables.loop import train

    knobs = {k: best[k] for k in ("batch_size", "precision", "compile", "kernels")}
    sets = [f"{k}={v}" for k, v in knobs.items()]
    sets += [f"max_steps={WARMUP_STEPS + 8}", f"timing_warmup_steps={WARMUP_STEPS}", "eval_interval=0"]
    cfg = load_config(ROOT / "configs/seed-baseline.yaml", sets + ["eval_tokens=2048"], data=args.data)
    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    sched = schedule(wait=WARMUP_STEPS, warmup=2, active=6, repeat=1)
    with torch.profiler.profile(activities=activities, schedule=sched) as prof:
        train(cfg, step_hook=prof.step, log=None)
    (out / "profile.txt").write_text(
        f"{knobs}\n\nby CUDA time:\n"
        + prof.key_averages().table(sort_by="cuda_time_total", row_limit=25)
        + "\n\nby CPU time:\n"
        + prof.key_averages().table(sort_by="cpu_time_total", row_limit=15)
    )
    prof.export_chrome_trace(str(out / "trace.json"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", help="corpus (default: the project's resolution order)")
    p.add_argument("--batches", default="8,64,512")
    p.add_argument("--precisions", default="fp32,bf16")
    p.add_argument("--compiles", default="none,reduce-overhead")
    p.add_argument("--kernels", default="torch,fused")
    p.add_argument("--steps", type=int, default=40, help="steady steps timed per config")
    p.add_argument("--timeout", type=float, default=600, help="seconds per config")
    p.add_argument("--profile", action="store_true", help="profile the fastest config")
    p.add_argument("--out", default="out/ceiling")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str((out / "cache" / "inductor").resolve()))
    env.setdefault("TRITON_CACHE_DIR", str((out / "cache" / "triton").resolve()))

    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    grid = itertools.product(
        args.batches.split(","), args.precisions.split(","), args.compiles.split(","), args.kernels.split(",")
    )
    rows = []
    with (out / "ceiling.jsonl").open("a") as log:
        for batch, precision, mode, kernels in grid:
            knobs = {"batch_size": int(batch), "precision": precision, "compile": mode, "kernels": kernels}
            row = run_config(args, knobs, env)
            rows.append(row)
            log.write(json.dumps(row) + "\n")
            log.flush()
            print(f"{knobs}: {row.get('status')} {row.get('tokens_per_s') or 0:,.0f} tok/s "
                  f"({row['process_s']} s)", file=sys.stderr, flush=True)  # fmt: skip
    print(f"GPU: {gpu}; {args.steps} steady steps after {WARMUP_STEPS} warm-up steps per config\n")
    print(table(rows, gpu))
    ok = [r for r in rows if r.get("status") == "ok"]
    if args.profile and ok:
        best = max(ok, key=lambda r: r["tokens_per_s"])
        profile(args, best, out)
        print(f"\nprofile of the fastest ({best['tokens_per_s']:,.0f} tok/s): {out / 'profile.txt'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
