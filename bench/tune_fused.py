"""What the fused kernels' Triton autotuning costs a process, cold and warm, and the results to ship.

    python bench/tune_fused.py --out DIR [--precisions bf16,fp16,fp32] [--set-name NAME] [--config YAML]

Each step runs the hybrid LM (the default config's sizes, or those of `--config`'s train.model and seq_len;
one layer: the kernels' tuning keys hold head and chunk sizes, not batch, length or depth) for one forward + backward at batch 2 through the fused
kernels, in a process of its own with `TRITON_PRINT_AUTOTUNING=1`, and reads which kernels autotuned and
for how long. Passes, each over the precisions:

  cold     fresh Triton cache, the precisions side by side (each process compiles every candidate config
           of every kernel and benchmarks them; what a cold fused process paid before shipped results)
  eval     fresh cache, fp32 forward only at batch 64 under no_grad: what a fused run's fp32 eval paid
  bench    the cold pass's cache with its autotune results deleted, one at a time: the benchmarking alone,
           on an otherwise idle GPU (these are the results shipped)
  warm     everything cached: what every later process of a search pays
  shipped  a fresh cache holding only the bench pass's results: a new machine with a shipped set

Writes DIR/tune.json (one row per process) and DIR/<set-name>/ (manifest.json + cache/<key>/*.autotune.json,
the layout model/ops/tuning_results/ takes), and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

AUTOTUNED = re.compile(
    r"Triton autotuning for function (\w+),\s*with key as (.*?),\s*finished after ([\d.]+)s", re.S
)
SIZES = dict(vocab_size=65, d_model=128, n_layers=1, seq_len=256)
SHAPE_KEYS = ("d_model", "rwkv_n_heads", "mamba_headdim", "mamba_d_state", "mamba_expand", "mamba_d_conv")


def sizes_of(config: Path | None) -> dict:
    """The model sizes to tune: the default's, or a search config's shapes (the keys that decide the
    kernels' head and state sizes) with its seq_len, at one layer."""
    if config is None:
        return dict(SIZES)
    import yaml

    train = yaml.safe_load(config.read_text())["train"]
    model = {k: v for k, v in (train.get("model") or {}).items() if k in SHAPE_KEYS}
    return {**SIZES, **model, "seq_len": train.get("seq_len", SIZES["seq_len"])}


def worker(precision: str, eval_only: bool, sizes: dict) -> None:
    """One process: import, build, one step; prints a JSON line of its timings last."""
    t0 = time.time()
    import torch

    from model import HybridConfig, HybridLM
    from model.ops import available_backends

    assert available_backends()["fla"] is True and available_backends()["mamba_ssm"] is True
    t_import = time.time() - t0
    model = HybridLM(HybridConfig(**sizes, kernels="fused")).cuda()
    batch = 64 if eval_only else 2
    idx = torch.randint(0, sizes["vocab_size"], (batch, sizes["seq_len"] + 1), device="cuda")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    t1 = time.time()
    with torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
        if eval_only:
            with torch.no_grad():
                model.eval()
                model(idx[:, :-1], idx[:, 1:])
        else:
            model(idx[:, :-1], idx[:, 1:])[1].backward()
    torch.cuda.synchronize()
    print(json.dumps({"import_s": round(t_import, 2), "step_s": round(time.time() - t1, 2)}), flush=True)


def run(precision: str, cache: Path, eval_only: bool = False) -> subprocess.Popen:
    env = {**os.environ, "TRITON_CACHE_DIR": str(cache), "TRITON_PRINT_AUTOTUNING": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    cmd = [sys.executable, __file__, "--worker", precision, "--sizes", json.dumps(SIZES)]
    cmd += ["--eval-only"] if eval_only else []
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def collect(pass_name: str, precision: str, proc: subprocess.Popen, started: float) -> dict:
    out, _ = proc.communicate()
    tuned = AUTOTUNED.findall(out)
    last = out.strip().splitlines()[-1] if out.strip() else ""
    try:
        timings = json.loads(last)
    except json.JSONDecodeError:
        timings = {"error": last[-300:]}
    return {
        "pass": pass_name,
        "precision": precision,
        "process_s": round(time.time() - started, 1),
        "kernels_tuned": len(tuned),
        "tune_s": round(sum(float(s) for _, _, s in tuned), 1),
        "slowest": sorted(((round(float(s), 1), f) for f, _, s in tuned), reverse=True)[:3],
        **timings,
    }


def side_by_side(pass_name: str, jobs: list[tuple[str, Path, bool]]) -> list[dict]:
    started = time.time()
    procs = [(p, run(p, cache, ev)) for p, cache, ev in jobs]
    return [collect(pass_name, p, proc, started) for p, proc in procs]


def one_at_a_time(pass_name: str, precisions: list[str], cache: Path) -> list[dict]:
    rows = []
    for p in precisions:
        started = time.time()
        rows.append(collect(pass_name, p, run(p, cache), started))
        print(json.dumps(rows[-1]), flush=True)
    return rows


def write_set(cache: Path, dest: Path, gpu: str) -> int:
    import torch

    from model.ops.tuning import installed_versions

    files = sorted(cache.rglob("*.autotune.json"))
    for f in files:
        target = dest / "cache" / f.relative_to(cache)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, target)
    manifest = {
        "capability": list(torch.cuda.get_device_capability()),
        "versions": installed_versions(),
        "gpu": gpu,
        "date": time.strftime("%Y-%m-%d"),
        "model": SIZES,
        "command": " ".join(["python bench/tune_fused.py", *sys.argv[1:]]),
        "kernel_shapes": len(files),
    }
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return len(files)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--precisions", default="bf16,fp16,fp32")
    ap.add_argument("--set-name", default="sm90")
    ap.add_argument("--config", type=Path, help="a search config whose model shapes to tune")
    ap.add_argument(
        "--results-only", action="store_true", help="only the cold and bench passes: the results to ship"
    )
    ap.add_argument("--worker")
    ap.add_argument("--sizes", help=argparse.SUPPRESS)
    ap.add_argument("--eval-only", action="store_true")
    args = ap.parse_args()
    if args.worker:
        return worker(args.worker, args.eval_only, json.loads(args.sizes))
    if args.config is not None and not args.config.is_file():
        ap.error(f"--config: no such file: {args.config}")
    SIZES.update(sizes_of(args.config))
    import torch

    gpu = torch.cuda.get_device_name()
    precisions = args.precisions.split(",")
    out = args.out
    main_cache, eval_cache, shipped_cache = out / "cache", out / "cache-eval", out / "cache-shipped"
    for d in (main_cache, eval_cache, shipped_cache):
        shutil.rmtree(d, ignore_errors=True)
    rows = side_by_side("cold", [(p, main_cache, False) for p in precisions] + [("fp32", eval_cache, True)])
    rows[-1]["pass"] = "eval"
    for r in rows:
        print(json.dumps(r), flush=True)
    for f in main_cache.rglob("*.autotune.json"):
        f.unlink()
    rows += one_at_a_time("bench", precisions, main_cache)
    n = write_set(main_cache, out / args.set_name, gpu)
    print(f"wrote {n} autotune results to {out / args.set_name}", flush=True)
    if not args.results_only:
        rows += one_at_a_time("warm", precisions, main_cache)
        shutil.copytree(out / args.set_name / "cache", shipped_cache)
        rows += one_at_a_time("shipped", precisions, shipped_cache)
    (out / "tune.json").write_text(json.dumps({"gpu": gpu, "rows": rows}, indent=1))
    print(f"\n{gpu}\n| pass | precision | process s | import s | step s | kernels autotuned | autotune s |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        cols = [r["pass"], r["precision"], r["process_s"], r.get("import_s"), r.get("step_s")]
        print("| " + " | ".join(str(c) for c in cols + [r["kernels_tuned"], r["tune_s"]]) + " |")


if __name__ == "__main__":
    main()
