"""An oracle for the search's answer (issue 54): the fastest config of a stated sample of the search's space
whose val loss stays within the loss limit, each config trained alone to the full budget.

    python bench/oracle.py --config configs/smoke.yaml --data tinyshakespeare.txt --out out/oracle
    python bench/oracle.py --config examples/nanogpt/gpu.yaml --data tinyshakespeare.txt --out /tmp/o \\
        --answer out/nanogpt/best.yaml --knobs precision,compile --points batch_size=64,128 --sample 4

1. The baseline (the config's `train:` section, with --set as the search takes it) to `train.tokens`: its
   val loss sets the loss limit by the project's rule (QualitySection.loss_limit, at the full run).
2. The points: each distinct (effective batch, peak lr) of the space's batch_size, grad_accum, lr and
   lr_scaling values (--points narrows them), trained at the search's recipe as it runs here; a point whose
   loss fails the limit is dropped with its configs.
3. At every passing point, the product of --knobs' values (the other knobs at the baseline's), plus
   --sample N configs drawn from the whole space with --seed; values this machine cannot run are skipped,
   saying why (tuner/space/domains.py:applicable), as are configs the training config refuses.
4. The oracle: the fastest run (tokens_per_s) with status ok within the limit (the baseline and the points'
   runs are candidates too). 5. --answer: the search's best.yaml trained the same way (right after the
   baseline, so a cut sitting has it): answer_over_oracle is its speed over the oracle's.

Each run is `python -m trainables.train --config FILE --json` in its own process, one at a time.
OUT/oracle.json (bench/oracle_record.py) and OUT/oracle.md are rewritten after every run; a rerun with the
same OUT skips the configs it recorded. Exit 0; 1 where the baseline did not train (no limit); 2 bad input,
before any run; 5 the machine cannot run the baseline's config.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
# Run from anywhere; bench/ itself off the path (Python puts a script's folder first): its kernels.py would
# pass for Hugging Face's `kernels` package in this process, which builds the workload. The oracle's own
# modules are bench.oracle_* (a namespace package of the checkout).
sys.path[:] = [str(ROOT), *(p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench")]

from bench.oracle_plan import (  # noqa: E402 - after the path insert
    DEFAULT_KNOBS,
    POINT_KNOBS,
    FittedSpace,
    fitted_space,
    knob_values,
    point_values,
)
from bench.oracle_record import OracleRecord, SampleStatement, Skipped, WorkloadRecord, read_runs  # noqa: E402
from bench.oracle_runs import say, train_alone  # noqa: E402
from bench.oracle_sitting import Sitting  # noqa: E402
from trainables.common.cli import OneLineParser  # noqa: E402
from trainables.common.errors import EnvironmentFault  # noqa: E402
from trainables.common.exit_codes import Exit  # noqa: E402
from trainables.config import ConfigError, TrainConfig, load_config, make_config  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python bench/oracle.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True, help="the search config (its train: section is the baseline)")
    p.add_argument("--data", help="corpus file or folder of .txt files, as tuner.search takes it")
    p.add_argument("--out", default="out/oracle", help="oracle.json and oracle.md; the runs' configs")
    p.add_argument("--answer", help="the search's best.yaml, trained alone the same way")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, as the search's --set: train.tokens=2M, search.space.batch_size=[8,16]",
    )
    p.add_argument(
        "--knobs",
        default=DEFAULT_KNOBS,
        help=f"knobs whose product is trained at every passing point (default {DEFAULT_KNOBS}; '' none)",
    )
    p.add_argument(
        "--points",
        action="append",
        default=[],
        metavar="KNOB=V1,V2",
        help=f"narrow a point knob ({', '.join(POINT_KNOBS)}) to these values of the space; repeatable",
    )
    p.add_argument(
        "--compile-cache",
        metavar="DIR",
        help="the compile cache root every run uses (train.compile_cache; the search's is trainables."
        "compile_cache.default_root()): its runs then compile as warm as best.yaml's; default: torch's own",
    )
    p.add_argument("--sample", type=int, default=0, metavar="N", help="N random configs of the whole space")
    p.add_argument("--seed", type=int, default=0, help="the random configs' seed")
    return p


def parse_points(items: list[str]) -> dict[str, list[Any]]:
    """--points batch_size=64,128 -> {"batch_size": [64, 128]}: each value read as YAML (sqrt, 64), and
    as a number where YAML leaves it a string (PyYAML reads 3e-4 as one)."""
    out: dict[str, list[Any]] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        if not sep or name not in POINT_KNOBS or not raw:
            raise ConfigError(
                f"--points: expected KNOB=V1,V2 with KNOB one of {', '.join(POINT_KNOBS)}, got {item!r}"
            )
        out[name] = [_value(v) for v in raw.split(",")]
    return out


def _value(text: str) -> Any:
    value = yaml.safe_load(text)
    try:
        return float(value) if isinstance(value, str) else value
    except ValueError:
        return value


def read_search(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """The search config, corpus and workload exactly as `python -m tuner.search` reads them (the workload's
    loss tolerance, its unsupported knobs out of the space, the data path made absolute)."""
    from tuner.search import build_parser as search_parser
    from tuner.search import read_config

    argv = ["--config", args.config, "--address", "local", *(["--data", args.data] if args.data else [])]
    argv += [f"--set={item}" for item in args.overrides]
    return read_config(search_parser().parse_args(argv), Path(args.out))


def probe() -> dict[str, Any]:
    """What this machine can run (tuner/space/domains.py:probe_hardware). With a GPU, in a process of its
    own, so this one holds no CUDA context on the GPU the runs have alone."""
    import torch

    from tuner.space.domains import probe_hardware

    if not torch.cuda.is_available():
        return probe_hardware()
    code = "import json; from tuner.space.domains import probe_hardware; print(json.dumps(probe_hardware()))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise EnvironmentFault(
            f"the hardware probe failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}"
        )
    return json.loads(done.stdout.strip().splitlines()[-1])


def commit() -> str | None:
    """The code measured: the staged copy's gitrev file (bench/device/stage.sh writes the commit measured;
    the device's own git repository holds another commit, under the synced tree: an H100 sitting at 0c676c7
    recorded 62b0de3-dirty), else git's short hash (-dirty with tracked edits)."""
    gitrev = ROOT / "gitrev"
    if gitrev.exists():
        return gitrev.read_text().strip()
    try:
        git = ["git", "-C", str(ROOT)]
        rev = subprocess.run(
            [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        )
        dirty = subprocess.run(
            [*git, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return rev.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def read_answer(args: argparse.Namespace, base: dict[str, Any]) -> TrainConfig:
    """The search's best.yaml as a training config. With --data, on that corpus pinned as every other run's,
    so a best.yaml that is a config of the sample (the baseline, where the search kept it) is that run."""
    try:
        answer = load_config(args.answer, data=base.get("data") if args.data else None)
        if args.data and answer.data_sha256 is None and "data_sha256" in base:
            answer = make_config(
                {**answer.model_dump(exclude_unset=True), "data_sha256": base["data_sha256"]}
            )
    except ConfigError as err:
        raise ConfigError(f"--answer: {err}") from None
    planned = make_config(base, section="train").tokens
    if answer.tokens != planned:
        say(
            f"--answer trains {answer.tokens:,} tokens, the baseline {planned:,}: its loss is judged "
            "against a limit set at another budget"
        )
    return answer


def prepare(args: argparse.Namespace, train) -> Sitting:
    """Every check before any run (ConfigError: one line, exit 2): the config, --knobs, --points, --answer,
    --sample and an OUT/oracle.json a rerun would resume from."""
    if args.sample < 0:
        raise ConfigError(f"--sample: expected a count of configs, 0 or more, got {args.sample}")
    narrowed = parse_points(args.points)
    cfg, corpus, info = read_search(args)
    base_values = cfg.train.model_dump(exclude_unset=True)
    if corpus is not None:  # every run trains on the text resolved here, as the search's trials do
        base_values["data_sha256"] = corpus.sha256
    if args.compile_cache:
        base_values["compile_cache"] = str(Path(args.compile_cache).expanduser().resolve())
    answer = read_answer(args, base_values) if args.answer else None
    out = Path(args.out)
    prior = read_runs(out / "oracle.json")
    hardware = probe()
    space = fitted_space(cfg, hardware)
    names = [n.strip() for n in args.knobs.split(",") if n.strip()]
    values = knob_values(names, space, cfg.train)
    statement = SampleStatement(
        knobs=names,
        values=values,
        point_knobs=point_values(space, cfg.train, narrowed),
        point_execution=space.execution,
        random=args.sample,
        seed=args.seed,
        skipped=_not_offered(space, names),
    )
    record = OracleRecord(
        workload=WorkloadRecord(
            config=args.config, workload=cfg.train.workload, overrides=args.overrides, data=cfg.train.data
        ),
        card=hardware.get("gpu_name") or "cpu",
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        commit=commit(),
        sample=statement,
    )
    (out / "configs").mkdir(parents=True, exist_ok=True)
    return Sitting(
        out=out,
        base_values=base_values,
        quality=cfg.quality,
        leave_out=info.unsupported,
        record=record,
        prior=prior,
        train=train,
        space=space,
        answer=answer,
        answer_path=args.answer,
    )


def _not_offered(space: FittedSpace, knobs: list[str]) -> list[Skipped]:
    """What the sample leaves out and why: the values this hardware drops, the knobs the space lacks here,
    point knobs that are ranges (their baseline value stands)."""
    out = [
        Skipped(what=line.split(":")[0].removeprefix("dropped "), why=line.partition(": ")[2])
        for line in space.dropped
    ]
    out += [
        Skipped(what=k, why="not a list knob of the space here: the baseline's value only")
        for k in knobs
        if k not in space.choices
    ]
    out += [
        Skipped(what=k, why="a range in the space: the points keep the baseline's value")
        for k in POINT_KNOBS
        if k in space.ranges
    ]
    return out


@contextlib.contextmanager
def run_ends_with_the_sitting():
    """SIGTERM (a kill, a lease's end) exits as Ctrl-C does, through the run's kill (oracle_runs.py): a
    training run left behind would hold the GPU from the next sitting's runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def main(argv: list[str] | None = None, train=train_alone) -> int:
    """`train`: how one run trains (a test counts or refuses runs through it)."""
    args = build_parser().parse_args(argv)
    try:
        sitting = prepare(args, train)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return Exit.BAD_INPUT
    except EnvironmentFault as err:
        print(f"error: {err}", file=sys.stderr)
        return Exit.ENVIRONMENT
    say(f"{args.config} on {sitting.record.card}: writing {Path(args.out) / 'oracle.json'} after every run")
    with run_ends_with_the_sitting():
        code = sitting.sit()
    print((Path(args.out) / "oracle.md").read_text(), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
