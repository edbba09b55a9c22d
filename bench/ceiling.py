"""How fast can a workload train on this GPU? Sweeps batch, precision, compile, scope, checkpoints, kernels.

    python bench/ceiling.py --data tinyshakespeare.txt [--config configs/seed-baseline.yaml]
        [--batches 8,64,512] [--precisions fp32,bf16] [--compiles none,reduce-overhead] [--scopes model]
        [--checkpointing 0] [--kernels torch,fused] [--set KEY=VALUE ...] [--steps 40] [--profile] [--out DIR]

Each config trains in its own process (`python -m trainables.train --json`, so an OOM or a crash stays
there) for `timing_warmup_steps` + `--steps` steps of the model `--config` names (a training YAML or a
search config, whose `train:` section is used; the seed's by default; e.g. --config configs/hybrid-100m.yaml
--batches 8,16,32 --precisions bf16 --compiles none,default,max-autotune-no-cudagraphs --scopes model,blocks
--checkpointing 0,2), one at a time on the GPU, sharing one Inductor/Triton cache (TORCHINDUCTOR_CACHE_DIR /
TRITON_CACHE_DIR as set, else DIR/cache). It prints a markdown table: steady tok/s, MFU, step ms (median),
compile + warm-up s and peak memory. MFU is each run's own (trainables/workloads/flops.py): tok/s x the workload's
training FLOPs per token (the hybrid counts its matmuls and its mixers' state updates; a workload without
a count gets 6 x parameters) / the GPU's dense peak at the run's precision (— for a GPU not in the table).
With --profile the fastest config runs again under torch.profiler and the table of where its step time
goes is written to DIR/profile.txt (top CUDA kernels and CPU ops by total time) and DIR/trace.json.
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

from trainables.workloads.flops import gpu_peak, no_peak_reason  # noqa: E402 - after the path insert above

WARMUP_STEPS = 10
GRID = ("batch_size", "precision", "compile", "compile_scope", "activation_checkpointing", "kernels")


def run_config(args, knobs: dict[str, str], env: dict[str, str]) -> dict:
    sets = {**knobs, "max_steps": WARMUP_STEPS + args.steps, "timing_warmup_steps": WARMUP_STEPS}
    sets |= {"eval_interval": 0, "eval_tokens": args.eval_tokens, "log_interval": max(1, args.steps // 2)}
    cmd = [sys.executable, "-m", "trainables.train", "--config", str(Path(args.config).resolve())]
    cmd += ["--json", *(f"--set={k}={v}" for k, v in sets.items()), *(f"--set={kv}" for kv in args.set)]
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


def table(rows: list[dict]) -> str:
    head = "| batch | precision | compile | scope | ckpt | kernels | tok/s | MFU | step ms | warm-up s "
    head += "| peak MiB |"
    out = [head, "|" + "---|" * 11]
    for r in rows:
        knobs = " | ".join(str(r[k]) for k in GRID)
        if r.get("status") != "ok":
            out.append(f"| {knobs} | {r.get('status')}: {str(r.get('error'))[:80]} | | | | |")
            continue
        m = r.get("mfu")
        out.append(
            f"| {knobs} | {r['tokens_per_s']:,.0f} | {f'{m:.2%}' if m is not None else '—'} | "
            f"{r['step_ms_median']:.1f} | {r['warmup_s']:.1f} | {r['peak_mem_mb']:,.0f} |"
        )
    return "\n".join(out)


def flops_line(rows: list[dict], gpu: str) -> str:
    """Under the table: what MFU divided, or why there is none."""
    found = gpu_peak(gpu)
    if found is None:
        return f"MFU: not given: {no_peak_reason(None if gpu == 'cpu' else gpu)}"
    model, peak = found
    counts = {(r.get("flops_per_token"), r.get("flops_source")) for r in rows if r.get("flops_per_token")}
    per_token = "; ".join(f"{n:.3g} ({source})" for n, source in sorted(counts)) or "not reported"
    return (
        f"MFU: tok/s x training FLOPs per token [{per_token}] / the {model}'s dense peak (TFLOP/s: fp32 "
        f"{peak.fp32:g}, tf32 {peak.tf32:g}, bf16/fp16 {peak.bf16:g}; trainables/workloads/flops.py)"
    )


def profile(args, best: dict, out: Path) -> None:
    """The fastest config's steady steps under torch.profiler: where the step time goes."""
    import torch
    from torch.profiler import ProfilerActivity, schedule

    from trainables.config import load_config
    from trainables.training.loop import train

    knobs = {k: best[k] for k in GRID}
    sets = [f"{k}={v}" for k, v in knobs.items()] + list(args.set)
    sets += [f"max_steps={WARMUP_STEPS + 8}", f"timing_warmup_steps={WARMUP_STEPS}", "eval_interval=0"]
    cfg = load_config(args.config, sets + [f"eval_tokens={args.eval_tokens}"], data=args.data)
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
    p.add_argument("--config", default=str(ROOT / "configs/seed-baseline.yaml"), help="the model and recipe")
    p.add_argument("--batches", default="8,64,512")
    p.add_argument("--precisions", default="fp32,bf16")
    p.add_argument("--compiles", default="none,reduce-overhead")
    p.add_argument("--scopes", default="model", help="compile_scope: model, blocks")
    p.add_argument("--checkpointing", default="0", help="activation_checkpointing: 0 (off) or every k blocks")
    p.add_argument("--kernels", default="torch,fused")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="fixed for every config")
    p.add_argument("--steps", type=int, default=40, help="steady steps timed per config")
    p.add_argument("--timeout", type=float, default=600, help="seconds per config")
    p.add_argument("--profile", action="store_true", help="profile the fastest config")
    p.add_argument("--out", default="out/ceiling")
    args = p.parse_args(argv)
    from trainables.config import load_config

    args.eval_tokens = 8 * load_config(args.config, args.set).seq_len  # the one eval at the end: kept short
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str((out / "cache" / "inductor").resolve()))
    env.setdefault("TRITON_CACHE_DIR", str((out / "cache" / "triton").resolve()))

    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    axes = (args.batches, args.precisions, args.compiles, args.scopes, args.checkpointing, args.kernels)
    rows = []
    with (out / "ceiling.jsonl").open("a") as log:
        for values in itertools.product(*(axis.split(",") for axis in axes)):
            knobs = dict(zip(GRID, values))
            knobs["batch_size"] = int(knobs["batch_size"])
            row = run_config(args, knobs, env)
            rows.append(row)
            log.write(json.dumps(row) + "\n")
            log.flush()
            print(f"{knobs}: {row.get('status')} {row.get('tokens_per_s') or 0:,.0f} tok/s "
                  f"({row['process_s']} s)", file=sys.stderr, flush=True)  # fmt: skip
    print(f"GPU: {gpu}; {args.steps} steady steps after {WARMUP_STEPS} warm-up steps per config\n")
    print(table(rows))
    print(f"\n{flops_line([r for r in rows if r.get('status') == 'ok'], gpu)}")
    ok = [r for r in rows if r.get("status") == "ok"]
    if args.profile and ok:
        best = max(ok, key=lambda r: r["tokens_per_s"])
        profile(args, best, out)
        print(f"\nprofile of the fastest ({best['tokens_per_s']:,.0f} tok/s): {out / 'profile.txt'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
