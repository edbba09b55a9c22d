"""`python -m tuner.search`: the fastest training config whose loss stays within tolerance of the baseline.

The pipeline (`run_search`) reads top to bottom: hardware -> baseline -> batch probe -> speed screen ->
loss check -> re-measure -> answer; docs/architecture.md says what each phase measures and why. Each
finished phase is recorded in OUT/state.json, each phase is a Ray Tune experiment under OUT/ray/, and the
Optuna study lives in OUT/optuna.journal (or an RDB URL), so `--resume` finishes an interrupted search
without rerunning or duplicating finished trials.

Exit codes: 0 a config was chosen; 2 bad input (before Ray starts); 3 nothing beat the tolerance (the
answer is the baseline); 130 interrupted (OUT is resumable).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import socket
import sys
from pathlib import Path

import ray

from trainables.config import ConfigError
from trainables.data import DataError, resolve_corpus
from trainables.gate import open_gates
from trainables.loop import first_line
from tuner import eta, observe
from tuner.config import SearchConfig, load_search_config
from tuner.context import SearchContext, State, log
from tuner.phases import baseline, finish, loss_check, probe, remeasure, screen
from tuner.records import Hardware, TrialRow
from tuner.select import propagate_feasibility
from tuner.space import applicable, probe_hardware

EXIT_BAD_INPUT, EXIT_INTERRUPTED = 2, 130


def run_search(ctx: SearchContext) -> int:
    space = _space_for_hardware(ctx)
    ctx.telemetry = observe.start(ctx)
    gates = open_gates()  # one timed window per GPU at a time; the driver owns them for the search

    bounds = ctx.phase("probe", lambda: probe.run(ctx, space), dict[str, int])
    space, ctx.batch_bounds = probe.bounded(ctx, space, bounds), bounds
    screened = ctx.phase("screen", lambda: screen.run(ctx, space), list[TrialRow])
    eta.after_screen(ctx, screened)

    checked = ctx.phase("loss_check", lambda: loss_check.run(ctx, screened), list[TrialRow])
    base_row, checked = checked[0], checked[1:]
    limit = ctx.cfg.quality.limit(base_row.val_loss)
    propagate_feasibility(screened, checked, base_row.val_loss, limit, baseline=ctx.base)
    measured = ctx.phase("remeasure", lambda: remeasure.run(ctx, screened), list[TrialRow])

    summary = finish.summarize(ctx, base_row, screened, checked, measured, limit)
    del gates
    return finish.write(ctx, summary)


def _space_for_hardware(ctx: SearchContext):
    """The space trimmed to what applies on the trials' hardware; knobs left with one choice are fixed."""
    space, fixed, notices = applicable(ctx.cfg.search.space, ctx.hw.model_dump())
    ctx.base.update(fixed)
    if ctx.base["kernels"] == "fused" and not ctx.hw.cuda:
        raise ConfigError("config key 'train.kernels': 'fused' needs CUDA workers (use torch or auto)")
    for n in notices:
        ctx.notice(n)
    if fixed:
        ctx.notice(f"fixed (one choice left): {fixed}")
    for choice, why in ctx.cfg.search.left_out.items():
        ctx.notice(f"left out of the space: {choice}: {why}")
    return space


def open_context(
    cfg: SearchConfig, out: Path, *, resume: bool, command: str, compile_cache: str | None = None
) -> SearchContext:
    """The context every phase works with: the cluster's resources and the trials' hardware."""
    state = State(out)
    state.data.setdefault("config", cfg.model_dump())
    state.data.setdefault("command", command)
    state.save()
    resources = ray.cluster_resources()
    gpus = int(resources.get("GPU", 0))
    task = ray.remote(probe_hardware).options(**({"num_gpus": 1} if gpus else {}))
    ctx = SearchContext(
        cfg=cfg,
        out=out,
        base=cfg.baseline().model_dump(),
        hw=Hardware(),
        cluster_cpus=int(resources.get("CPU", 1)),
        state=state,
        command=command,
        resume=resume,
        compile_cache=compile_cache,
    )
    hw = ctx.phase("hardware", lambda: Hardware(**ray.get(task.remote())), Hardware)
    ctx.hw = hw.model_copy(update={"gpus": gpus})  # every GPU of the cluster, not just the probed node's
    return ctx


def check_address(address: str | None) -> None:
    """Fail fast on an unreachable cluster (HOST:PORT); 'auto' is checked by ray.init itself."""
    if not address or address in ("auto", "local") or address.startswith("ray://"):
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"--address: expected auto or HOST:PORT, got {address!r}")
    try:
        socket.create_connection((host, int(port)), timeout=3).close()
    except OSError as err:
        raise ConfigError(f"--address: cannot reach Ray at {address} ({err.strerror or err})") from None


def check_out(out: Path, resume: bool) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe_file = out / ".write-test"
        probe_file.write_text("")
        probe_file.unlink()
    except OSError as err:
        raise ConfigError(f"--out: {out} is not writable ({err.strerror or err})") from None
    if not resume and (out / "state.json").exists():
        raise ConfigError(
            f"--out: {out} holds an earlier search; pass --resume to continue it or pick a new OUT"
        )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tuner.search", description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True, help="search YAML (configs/default.yaml, configs/smoke.yaml)")
    p.add_argument("--out", default="out/search", help="output directory (default: out/search)")
    p.add_argument("--data", help="corpus file or folder of .txt files")
    p.add_argument("--trials", type=int, help="speed-screen trials (overrides search.trials)")
    p.add_argument("--time-budget", help="e.g. 20m: stop proposing screen trials after this")
    p.add_argument("--address", help="join a Ray cluster: auto or HOST:PORT (default: start one locally)")
    p.add_argument("--resume", action="store_true", help="continue the search in OUT")
    p.add_argument(
        "--dashboard", action="store_true", help="local mode: start the Ray dashboard (127.0.0.1:8265)"
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, e.g. search.trials=8 or train.batch_size=16",
    )
    return p


def read_config(args: argparse.Namespace, out: Path) -> SearchConfig:
    """The validated config (a resumed search keeps the one it started with); ConfigError on bad input."""
    overrides = list(args.overrides)
    if args.trials is not None:
        overrides.append(f"search.trials={args.trials}")
    if args.time_budget is not None:
        overrides.append(f"search.time_budget={args.time_budget}")
    cfg = load_search_config(args.config, overrides, data=args.data)
    check_out(out, args.resume)
    check_address(args.address)
    data = cfg.baseline().data
    if data is not None:
        if not Path(data).exists():
            raise ConfigError(f"data path not found: {data}")
        cfg.train["data"] = str(Path(data).resolve())  # trials run in other working directories
    if args.resume:
        cfg = _resumable(out, cfg)  # exactly the settings that started it
    if cfg.train.get("workload", "hybrid") == "hybrid":  # say which corpus the trials will train on
        try:
            corpus = resolve_corpus(cfg.train.get("data"))
        except DataError as err:
            raise ConfigError(str(err)) from None
        log(f"data: {corpus.source}")
        cfg.train.setdefault("data_sha256", corpus.sha256)  # a resumed search keeps its own
    return cfg


def _resumable(out: Path, asked: SearchConfig) -> SearchConfig:
    """The config OUT's search started with, when `asked` (this command's) is the same search."""
    path = out / "state.json"
    if not path.exists():  # a retried job passes --resume from its first submission on
        log(f"--resume: {out} holds no earlier search; starting a new one")
        return asked
    try:
        saved = SearchConfig(**json.loads(path.read_text())["config"])
    except (ValueError, KeyError, TypeError) as err:
        raise ConfigError(
            f"--resume: {path} is unreadable ({first_line(err)}); nothing was changed"
        ) from None
    mine = {**saved.model_dump(), "train": {k: v for k, v in saved.train.items() if k != "data_sha256"}}
    if asked.model_dump() != mine:
        raise ConfigError(
            f"--resume: {out} was started with other settings; pass the same --config, --set and --data "
            "as the search that made it (its command is in OUT/state.json), or a new --out"
        )
    return saved


def trial_env(cfg: SearchConfig, out: Path) -> tuple[dict[str, str], str | None]:
    """The trials' environment, and the compile cache best.yaml should name (None: the user set their own).

    One Inductor/Triton cache per search, shared by its trials, so a kernel is compiled once, not per trial;
    it stays in OUT, and best.yaml names it, so the user's run reuses it too. Compile threads: the cores
    left for each of the runs that compile at once on a GPU."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # our progress lines replace Ray's tables
    threads = max(1, (os.cpu_count() or 1) // cfg.resources.speed_runs_per_gpu)
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(threads))
    cache = (out / "compile-cache").resolve()
    own = not (os.environ.get("TRITON_CACHE_DIR") or os.environ.get("TORCHINDUCTOR_CACHE_DIR"))
    env = {
        "TRITON_CACHE_DIR": os.environ.get("TRITON_CACHE_DIR", str(cache / "triton")),
        "TORCHINDUCTOR_CACHE_DIR": os.environ.get("TORCHINDUCTOR_CACHE_DIR", str(cache / "inductor")),
        "TORCHINDUCTOR_COMPILE_THREADS": os.environ["TORCHINDUCTOR_COMPILE_THREADS"],
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    return env, str(cache) if own else None


def start_ray(args: argparse.Namespace, env: dict[str, str]) -> None:
    joining = args.address not in (None, "local")
    try:
        context = ray.init(
            address=args.address if joining else None,
            runtime_env={"env_vars": env},
            log_to_driver=False,
            logging_level="ERROR",
            **({} if joining else {"include_dashboard": args.dashboard}),
        )
    except (ConnectionError, RuntimeError, ValueError) as err:
        raise ConfigError(f"cannot start or join Ray: {first_line(err)}") from None
    if args.dashboard and not joining:
        log(f"Ray dashboard: http://{context.dashboard_url}")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = Path(args.out)
    command = "python -m tuner.search " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])
    )
    existed = out.exists()
    try:
        cfg = read_config(args, out)
        env, compile_cache = trial_env(cfg, out)
        start_ray(args, env)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        if not existed and out.is_dir() and not any(out.iterdir()):
            out.rmdir()  # refused before anything was written: leave no empty OUT behind
        return EXIT_BAD_INPUT
    try:
        ctx = open_context(cfg, out, resume=args.resume, command=command, compile_cache=compile_cache)
        return run_search(ctx)
    except KeyboardInterrupt as err:
        log(f"interrupted{': ' + str(err) if str(err) else ''}; OUT is resumable: --resume --out {out}")
        return EXIT_INTERRUPTED
    except baseline.SearchFailed as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    finally:
        ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
