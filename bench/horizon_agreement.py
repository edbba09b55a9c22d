"""Does the loss limit at a prefix of the planned run judge as the full run would? (issue 36 item 3)

    python bench/horizon_agreement.py [--config configs/default.yaml] [--data tinyshakespeare.txt]
        [--horizons 10%,5%,20%,40%] [--configs FILE.yaml] [--execution compile=reduce-overhead,...]
        [--set KEY=VALUE ...] [--jobs 4] [--out docs/results/horizon_agreement.json] [--work out/DIR]

Trains the config's baseline at two seeds and each config of a list (different batches, lr rules and
precisions; the built-in CONFIGS, or a YAML list of knob mappings) for the whole planned run
(`train.tokens`), each in its own process (`python -m trainables.train --out DIR`: an OOM stays there),
`--jobs` at a time, with an eval at every horizon prefix (eval_interval: the greatest common divisor of the
prefixes' steps, each prefix a whole number of steps of every batch: tuner/rules/horizon.py). Then, for each
horizon, it judges every config as the search would (tuner/state/records.py:LossLimit): at the prefix against the
two seeds' mean + tolerance + their difference, at the full run against the first seed + tolerance; and
prints and writes (JSON) each config's two verdicts and the agreement N/M. The first horizon is the one a
report cites (tuner/rules/horizon.py:validation_note reads the JSON's top-level figures).

`--execution` applies speed-only knobs to every run (default on CUDA: CUDA graphs, block by block; they do
not change what is trained, which is why the search's loss runs borrow them too).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from anywhere

from trainables.config import ConfigError, load_config, read_yaml  # noqa: E402 - after the path insert
from tuner.rules.horizon import LossHorizon, horizon_for  # noqa: E402
from tuner.state.records import LossLimit  # noqa: E402

# Different batches, lr rules and precisions around the default config's baseline (batch 8, fp32, lr 3e-4
# at lr_base_batch 8): the loss knobs the default search moves, on both sides of the loss limit (on
# H100s batch 512 fp16 fails it at the full run, batch 256 fp16 sqrt passes; docs/benchmarks.md).
CONFIGS: list[dict[str, Any]] = [
    {"batch_size": 8, "precision": "bf16"},
    {"batch_size": 16, "precision": "fp32"},
    {"batch_size": 16, "precision": "bf16", "lr_scaling": "sqrt"},
    {"batch_size": 32, "precision": "bf16", "lr_scaling": "sqrt"},
    {"batch_size": 32, "precision": "bf16", "lr_scaling": "linear"},
    {"batch_size": 64, "precision": "tf32", "lr_scaling": "sqrt"},
    {"batch_size": 64, "precision": "bf16", "lr_scaling": "linear"},
    {"batch_size": 128, "precision": "bf16", "lr_scaling": "none"},
    {"batch_size": 128, "precision": "bf16", "lr_scaling": "sqrt"},
    {"batch_size": 256, "precision": "fp16", "lr_scaling": "sqrt"},
    {"batch_size": 256, "precision": "bf16", "lr_scaling": "none"},
    {"batch_size": 512, "precision": "bf16", "lr_scaling": "sqrt"},
]
GPU_EXECUTION = "compile=reduce-overhead,compile_scope=blocks"


def run_one(args, knobs: dict[str, Any], out: Path, env: dict[str, str]) -> dict[str, Any]:
    """One full planned run in its own process: its result.json (status, val_loss, history)."""
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "trainables.train", "--config", str(Path(args.config).resolve())]
    cmd += ["--json", "--out", str(out), *(f"--set={kv}" for kv in args.set)]
    cmd += [f"--set={k}={v}" for k, v in knobs.items()] + (["--data", args.data] if args.data else [])
    started = time.time()
    with (out / "train.log").open("w") as log:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=log, text=True)
    result_file = out / "result.json"
    if result_file.exists():
        result = json.loads(result_file.read_text())
    else:  # exit 2 or a crash: the last line says why
        tail = (out / "train.log").read_text().strip().splitlines() or [f"exit {proc.returncode}"]
        result = {"status": "error", "error": tail[-1], "history": []}
    print(f"{knobs}: {result['status']} in {time.time() - started:.0f} s", file=sys.stderr, flush=True)
    return result


def loss_at(result: dict[str, Any], tokens: int) -> float | None:
    """The run's val loss at the eval point that had trained `tokens` tokens (None: no such point)."""
    return next((p["val_loss"] for p in result.get("history", []) if p.get("tokens") == tokens), None)


def judged(result: dict[str, Any], loss_limit: LossLimit, tokens: int | None) -> tuple[float | None, bool]:
    """A run's loss at `tokens` (None: its end) and the loss limit's verdict on it (a failed run fails)."""
    loss = result.get("val_loss") if tokens is None else loss_at(result, tokens)
    return loss, result.get("status") == "ok" and loss_limit.passes(loss)


def horizon_report(
    horizon: LossHorizon, base: list[dict], runs: list[tuple[dict, dict]], full_loss_limit: LossLimit, q
) -> dict[str, Any]:
    """One horizon's verdicts: every config at the prefix and at the full run, and how many agree."""
    seeds = [loss_at(r, horizon.tokens) for r in base]
    loss_limit = LossLimit.of(seeds[0], q.tolerance, q.mode, horizon, seeds[1:])
    verdicts = []
    for knobs, result in runs:
        short_loss, short_pass = judged(result, loss_limit, horizon.tokens)
        full_loss, full_pass = judged(result, full_loss_limit, None)
        verdicts.append({"knobs": knobs, "status": result.get("status"), "short_loss": short_loss,
                         "short_pass": short_pass, "full_loss": full_loss, "full_pass": full_pass})  # fmt: skip
    trained = [v for v in verdicts if v["status"] == "ok"]  # a failed run fails both: no evidence
    agreed = sum(v["short_pass"] == v["full_pass"] for v in trained)
    return {"tokens": horizon.tokens, "fraction": horizon.fraction, "loss_limit": loss_limit.model_dump(),
            "agreed": agreed, "total": len(trained), "verdicts": verdicts}  # fmt: skip


def horizons_of(args, base_cfg, configs: list[dict]) -> list[LossHorizon]:
    """Each --horizons entry (tokens or a % of the planned run) as whole steps of every batch run here."""
    space = {
        "batch_size": sorted(
            {base_cfg.batch_size, *(c.get("batch_size", base_cfg.batch_size) for c in configs)}
        )
    }
    found = []
    for given in args.horizons.split(","):
        budget = base_cfg.tokens * float(given[:-1]) / 100 if given.endswith("%") else float(given)
        horizon = horizon_for(base_cfg, space, math.ceil(budget))
        if not horizon.is_prefix:
            raise ConfigError(f"--horizons {given}: reaches the planned run ({base_cfg.tokens:,} tokens)")
        found.append(horizon)
    return found


def eval_interval(base_cfg, knobs: dict[str, Any], horizons: list[LossHorizon]) -> int:
    """Steps between a run's evals: it evaluates at every horizon's prefix (whole steps of its batch)."""
    step = knobs.get("batch_size", base_cfg.batch_size) * base_cfg.seq_len * base_cfg.grad_accum
    return math.gcd(*(h.tokens // step for h in horizons))


def table(report: dict[str, Any]) -> str:
    limit = report["loss_limit"]
    out = [f"horizon {report['tokens']:,} tokens ({report['fraction']:.1%}): limit {limit['limit']:.4f}, "
           f"seed noise {limit['noise'] or 0:.4f}; agreed {report['agreed']}/{report['total']}",
           "| config | status | loss at prefix | pass | loss at full run | pass |", "|---|---|---|---|---|---|"]  # fmt: skip
    for v in report["verdicts"]:
        fmt = lambda x: "—" if x is None else f"{x:.4f}"  # noqa: E731
        out.append(f"| {v['knobs']} | {v['status']} | {fmt(v['short_loss'])} | {v['short_pass']} | "
                   f"{fmt(v['full_loss'])} | {v['full_pass']} |")  # fmt: skip
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=str(ROOT / "configs/default.yaml"), help="a training or search config")
    p.add_argument("--data", help="corpus (default: the project's resolution order)")
    p.add_argument("--horizons", default="10%,5%,20%,40%", help="prefixes: tokens or %% of the planned run")
    p.add_argument("--configs", help="YAML list of knob mappings (default: the built-in CONFIGS)")
    p.add_argument("--execution", help=f"speed-only knobs for every run (default on CUDA: {GPU_EXECUTION})")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="fixed for every run")
    p.add_argument("--jobs", type=int, default=1, help="runs at once (GPU: several share it)")
    p.add_argument("--out", default=str(ROOT / "docs/results/horizon_agreement.json"), help="the JSON record")
    p.add_argument("--work", default=str(ROOT / "out/horizon_agreement"), help="each run's log and result")
    args = p.parse_args(argv)
    try:
        return _bench(args)
    except (ValueError, OSError, yaml.YAMLError) as err:  # ConfigError is a ValueError
        print(f"error: {err}", file=sys.stderr)
        return 2


def _bench(args) -> int:
    import torch  # here: --help answers without it

    from tuner.config import QualitySection, load_search_config

    is_search = "train" in (read_yaml(args.config) or {})
    sets = [f"train.{kv}" for kv in args.set]
    quality = load_search_config(args.config, sets, data=args.data).quality if is_search else QualitySection()
    base_cfg = load_config(args.config, args.set, args.data)
    configs = yaml.safe_load(Path(args.configs).read_text()) if args.configs else CONFIGS
    if not isinstance(configs, list) or not all(isinstance(c, dict) for c in configs):
        raise ConfigError(f"--configs {args.configs}: expected a YAML list of knob mappings")
    horizons = horizons_of(args, base_cfg, configs)
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    execution = args.execution if args.execution is not None else (GPU_EXECUTION if gpu != "cpu" else "")
    fixed = dict(kv.split("=", 1) for kv in execution.split(",") if kv)
    out, work = Path(args.out), Path(args.work)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str((work / "cache" / "inductor").resolve()))
    env.setdefault("TRITON_CACHE_DIR", str((work / "cache" / "triton").resolve()))
    seeds = [{"seed": base_cfg.seed}, {"seed": base_cfg.seed + 1}]
    cases = [*seeds, *configs]
    knobs = [{**fixed, **case, "eval_interval": eval_interval(base_cfg, case, horizons)} for case in cases]
    started = time.time()
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        results = list(pool.map(lambda n: run_one(args, knobs[n], work / f"run{n}", env), range(len(cases))))
    base, runs = results[:2], list(zip(configs, results[2:]))
    if any(r.get("status") != "ok" for r in base):
        print(
            f"error: the baseline did not train at both seeds: {[r.get('error') for r in base]}",
            file=sys.stderr,
        )
        return 1
    q = quality
    full_loss_limit = LossLimit.of(base[0]["val_loss"], q.tolerance, q.mode)
    reports = [horizon_report(h, base, runs, full_loss_limit, q) for h in horizons]
    record = {"config": os.path.relpath(Path(args.config).resolve(), ROOT), "device": gpu,
              "date": time.strftime("%Y-%m-%d"), "execution": fixed, "planned_tokens": base_cfg.tokens,
              "full_loss_limit": full_loss_limit.model_dump(), "wall_s": round(time.time() - started, 1),
              **{k: reports[0][k] for k in ("agreed", "total", "fraction", "tokens")},
              "horizons": reports}  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1))
    print(f"{gpu}; planned run {base_cfg.tokens:,} tokens; full-run limit {full_loss_limit.limit:.4f}; "
          f"{time.time() - started:.0f} s\n")  # fmt: skip
    print("\n\n".join(table(r) for r in reports))
    print(f"\nwritten: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
