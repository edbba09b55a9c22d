"""The workload set's sitting (issue 43): for each entry of workloads/set.yaml, the search, then its pair
trained alone one after the other (OUT/recipe.yaml, the usual hand recipe, and OUT/best.yaml, the answer),
and one table: workload, baseline, recipe alone, answer alone (in the workload's unit), answer / recipe,
the answer's loss against the limit, the search's wall time and exit.

    python bench/workloads.py --size cpu --out out/workloads
    python bench/workloads.py --size gpu --skip hybrid-100m --data tinyshakespeare.txt --out /tmp/wl

The pair's runs are short (`--pair-steps` optimizer steps, the first `--warmup-steps` untimed) and
alternate, recipe then answer, `--rounds` times; the table gives each side's median. The loss verdicts are
the search's own (its loss check trained both to the planned budget or its horizon). Writes
OUT/workloads.json and OUT/workloads.md; a line on stdout as each step starts and ends.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
SET = ROOT / "workloads" / "set.yaml"


def say(line: str) -> None:
    print(f"[workloads {time.strftime('%H:%M:%S')}] {line}", flush=True)


def run_search(name: str, entry: dict[str, Any], args: argparse.Namespace) -> tuple[int, float, Path]:
    out = Path(args.out) / name
    cmd = [sys.executable, "-m", "tuner.search", "--config", str(ROOT / entry[args.size]), "--out", str(out)]
    if args.data and entry.get("data") == "corpus":
        cmd += ["--data", args.data]
    say(f"{name}: {' '.join(cmd[1:])}")
    t0 = time.time()
    with open(Path(args.out) / f"{name}.search.log", "w") as log:
        code = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    wall = time.time() - t0
    say(f"{name}: search exit {code} after {wall:.0f} s")
    return code, wall, out


def train_alone(yaml_path: Path, args: argparse.Namespace) -> float | None:
    """One short run of a config alone; its steady-state speed (None: it failed)."""
    cmd = [sys.executable, "-m", "trainables.train", "--config", str(yaml_path), "--json"]
    cmd += ["--set", f"max_steps={args.pair_steps}", "--set", f"timing_warmup_steps={args.warmup_steps}"]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        say(f"  {yaml_path.name} failed (exit {done.returncode}): {done.stderr.strip()[-300:]}")
        return None
    return json.loads(lines[-1]).get("tokens_per_s")


def pair(out: Path, args: argparse.Namespace) -> dict[str, list[float]]:
    """recipe.yaml and best.yaml alone, alternating, `rounds` times each."""
    speeds: dict[str, list[float]] = {"recipe": [], "answer": []}
    for r in range(args.rounds):
        for side, file in (("recipe", "recipe.yaml"), ("answer", "best.yaml")):
            if not (out / file).exists():
                continue
            speed = train_alone(out / file, args)
            say(f"  round {r + 1}: {side} alone {speed if speed is None else f'{speed:,.0f}/s'}")
            if speed is not None:
                speeds[side].append(speed)
    return speeds


def row(name: str, code: int, wall: float, out: Path, speeds: dict[str, list[float]]) -> dict[str, Any]:
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {}
    best, limit, recipe = (
        summary.get("best") or {},
        summary.get("loss_limit") or {},
        summary.get("recipe") or {},
    )
    med = {side: statistics.median(v) if v else None for side, v in speeds.items()}
    base_loss = (summary.get("baseline") or {}).get("val_loss")
    same = _same_config(out / "recipe.yaml", out / "best.yaml")
    return {
        "workload": name,
        "unit": summary.get("unit", "tokens"),
        "exit": code,
        "search_s": round(wall),
        "baseline": (summary.get("baseline") or {}).get("tokens_per_s"),
        "recipe_alone": med["recipe"],
        "answer_alone": med["answer"],
        "runs": speeds,
        "answer_over_recipe": med["answer"] / med["recipe"] if med["answer"] and med["recipe"] else None,
        # best.yaml trains what recipe.yaml does: their ratio is two runs of one config (their spread)
        "answer_is_recipe": same,
        "answer": best.get("id", "baseline"),
        "answer_loss": best.get("val_loss", base_loss),
        "recipe_loss": recipe.get("val_loss"),
        "recipe_feasible": recipe.get("feasible"),
        "limit": limit.get("limit"),
    }


def _same_config(recipe: Path, best: Path) -> bool:
    """Whether the answer is the recipe itself: both files hold one training config (comments aside)."""
    if not (recipe.exists() and best.exists()):
        return False
    return yaml.safe_load(recipe.read_text()) == yaml.safe_load(best.read_text())


def _num(value: Any, fmt: str = ",.0f") -> str:
    return "—" if value is None else format(value, fmt)


def _ratio(r: dict[str, Any]) -> str:
    ratio = f"{_num(r['answer_over_recipe'], '.2f')}x"
    return (
        f"{ratio} (the answer is the recipe: the spread of two runs)" if r.get("answer_is_recipe") else ratio
    )


def table(rows: list[dict[str, Any]]) -> str:
    head = "| workload | unit/s | baseline | recipe alone | answer alone | answer ÷ recipe | answer loss | recipe loss | limit | search | exit |"
    out = [head, "|" + "---|" * 11]
    for r in rows:
        recipe_loss = (
            _num(r["recipe_loss"], ".4f") + {True: " ✓", False: " ✗", None: ""}[r["recipe_feasible"]]
        )
        out.append(
            f"| {r['workload']} ({r['answer']}) | {r['unit']} | {_num(r['baseline'])} | {_num(r['recipe_alone'])} "
            f"| {_num(r['answer_alone'])} | {_ratio(r)} | {_num(r['answer_loss'], '.4f')} "
            f"| {recipe_loss} | {_num(r['limit'], '.4f')} | {r['search_s']} s | {r['exit']} |"
        )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", choices=["cpu", "gpu"], required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--only", default="", help="comma-separated entries, run in this order (default: all)")
    p.add_argument("--skip", default="", help="comma-separated entries to leave out")
    p.add_argument("--data", help="corpus for the entries that read one (default: the search's own choice)")
    p.add_argument("--pair-steps", type=int, default=120)
    p.add_argument("--warmup-steps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    entries = yaml.safe_load(SET.read_text())
    only, skip = list(filter(None, args.only.split(","))), set(filter(None, args.skip.split(",")))
    if unknown := (set(only) | skip) - set(entries):
        p.error(f"unknown workload(s) {sorted(unknown)} (known: {', '.join(entries)})")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    rows = []
    for name in [n for n in (only or entries) if n not in skip]:  # --only's order: the first matters most
        code, wall, out = run_search(name, entries[name], args)
        rows.append(row(name, code, wall, out, pair(out, args)))
        (Path(args.out) / "workloads.json").write_text(json.dumps(rows, indent=1))
        (Path(args.out) / "workloads.md").write_text(table(rows))
    print(table(rows), flush=True)
    return 0 if all(r["exit"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
