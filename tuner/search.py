"""`python -m tuner.search`: the fastest training config whose loss stays within tolerance of the baseline.

This module is the command line: it reads and checks the input (before anything is started or written),
starts Ray (tuner/session/ray_session.py), claims OUT, and runs the pipeline (tuner/pipeline.py: hardware -> batch
probe -> speed screen -> loss check -> re-measure -> answer). Each finished phase is recorded in OUT/state.json, each phase is a Ray Tune experiment under OUT/ray/, and the
Optuna study lives in OUT/optuna.journal (or an RDB URL), so `--resume` finishes an interrupted search
without rerunning or duplicating finished trials.

Exit codes: EPILOG below (what `--help` prints).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import sys
import traceback
from pathlib import Path

import ray

from model import library_env
from trainables.common.cli import OneLineParser
from trainables.common.errors import DataError, EnvironmentFault, find_cause, first_line
from trainables.common.exit_codes import Exit
from trainables.common.progress import log
from trainables.config import ConfigError
from trainables.data import Corpus, resolve_corpus, shipped_corpus
from trainables.data.corpora import is_builtin
from trainables.preflight import preflight
from trainables.workloads.workload import WorkloadInfo
from tuner import emit
from tuner.config import SearchConfig, load_search_config, parse_duration
from tuner.pipeline import open_context, run_search
from tuner.runs.request import TrialInputs
from tuner.session import cache_server
from tuner.session.out_lock import OutLock
from tuner.session.ray_session import CONNECT_TIMEOUT_S, RaySession, RayTarget, ray_target, terminated
from tuner.session.streams import exit_bounded, guarded_streams, say
from tuner.space.domains import fit_to_workload
from tuner.state import answers, caches
from tuner.state.out_claim import check_writable, claim_out
from tuner.state.search_state import PhaseError, SearchFailed

EPILOG = """\
phases: hardware -> batch probe -> speed screen -> loss check (the baseline's too) -> re-measure ->
  answer; docs/architecture.md says what each one measures.

loss rule: a config passes when it trains to a val loss <= the limit (tuner/rules/loss_limit.py), where
  quality.mode absolute (default): limit = baseline + quality.tolerance (0.05: in the loss's units, nats)
  quality.mode relative:           limit = baseline x (1 + quality.tolerance) (0.05: 5% above it)
  The baseline's loss is the mean of its seeds where it trains two (at a quality.loss_horizon prefix);
  their spread is reported beside the limit, not added to it. Where the config sets neither
  quality.tolerance nor quality.mode, the workload's loss_tolerance (e.g. ("relative", 0.05)) stands in
  for the default; e.g. --set quality.mode=relative --set quality.tolerance=0.05. report.md states the
  limit with its arithmetic and where the tolerance came from.

outputs, in OUT: summary.json, report.md, report.html (rebuild: python -m tuner.report OUT),
  best.yaml (train it: python -m trainables.train --config OUT/best.yaml), trials/<phase>.jsonl (every
  finished trial), state.json (finished phases), optuna.journal (the study), ray/<phase>/ (Ray Tune
  runs, TensorBoard: tensorboard --logdir OUT/ray), compile-cache/, crash.log (after a crash).

--resume: goes on with the search in OUT; finished phases and trials are kept, not rerun. It runs the
  config saved in OUT/state.json: --config, --set, --data, --trials and --time-budget are not applied but
  checked, and must be the ones that started the search (else exit 2, nothing changed); --address may
  differ. With no search in OUT yet, it starts one. An interrupted or crashed search prints the command.
  A damaged OUT/state.json is rebuilt from the config and the finished trials (the damaged file is kept
  as state.json.damaged). One search at a time per OUT: a second is refused, naming the first.

Ray: with no --address the search starts a private local Ray instance of its own, whatever cluster
  Ray has recorded on this host; --address auto joins the cluster on this host, --address HOST:PORT (or
  RAY_ADDRESS, which Ray Jobs set) a remote one. The first line printed says which.

exit codes:
  0    a config was chosen (best.yaml)
  1    the search failed (e.g. the baseline itself does not train, or Ray Tune ended a phase on its
       own); the last lines say the cause and what to run next
  2    bad input, found before any trial ran: one line names the key or option (or an OUT in use)
  3    the baseline is the answer (best.yaml is the baseline): nothing passed the loss check, or
       nothing that passed was faster beyond the re-measure's noise (a tie the baseline won, named
       in the last lines); as a Ray Job (ray job submit, a KubeRay RayJob) this answer exits 0, so
       the job succeeds, and the last lines and summary.json (best: null or the baseline) say so
  4    the speed figures are not trusted: other processes contended for the machine during the
       re-measure, also when its windows were timed again, so no winner was crowned on them; the
       baseline is the answer (best.yaml), and the report says so at the top
  5    the machine, not the input: Ray cannot be started or reached (within --connect-timeout), or
       no CUDA for a config that needs it; one line says what and what to do
  6    the screen finished no config (e.g. its time budget ended during the first compiles): the
       baseline is the answer (best.yaml); the last lines say what to raise
  130  interrupted by a signal (Ctrl-C, SIGTERM): OUT is resumable with --resume; the last line is the command
       (on the terminal where stdout/stderr was a pipe that closed, e.g. `| tee` ended by Ctrl-C)

durations (--time-budget, search.time_budget, search.compile_deadline): 90, 1.5 (seconds), 90s, 20m,
  1h30m; above zero.
"""


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="python -m tuner.search",
        description=__doc__.splitlines()[0],
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", required=True, help="search YAML (configs/default.yaml, configs/smoke.yaml)")
    p.add_argument("--out", default="out/search", help="output directory (default: out/search)")
    p.add_argument("--data", help="corpus file or folder of .txt files")
    p.add_argument("--trials", type=int, help="speed-screen trials (overrides search.trials)")
    p.add_argument("--time-budget", help="e.g. 20m: stop proposing screen trials after this")
    p.add_argument(
        "--address",
        help="where Ray runs: local (a private local Ray, the default), auto (this host's cluster) or "
        "HOST:PORT; without it RAY_ADDRESS, where set, says the same (local, auto or HOST:PORT)",
    )
    p.add_argument(
        "--connect-timeout",
        default=f"{CONNECT_TIMEOUT_S:.0f}s",
        metavar="DURATION",
        help=f"give up joining a cluster that does not answer after this (default {CONNECT_TIMEOUT_S:.0f}s)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="go on with the search in OUT, with the settings that started it (see --resume below)",
    )
    p.add_argument(
        "--dashboard", action="store_true", help="local mode: start the Ray dashboard (127.0.0.1:8265)"
    )
    p.add_argument(
        "--fresh",
        action="store_true",
        help="search anew even where an earlier search on this machine matches this one (default: confirm "
        "its answer by re-measuring its finalists; TUNER_FRESH=1 does the same as --fresh)",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, e.g. search.trials=8 or train.batch_size=16",
    )
    p.add_argument(
        "--cache-dir",
        metavar="DIR",
        help="keep the compile caches here (default: search.cache_dir, else your user cache dir; "
        "python -m tuner.state.caches lists and clears them)",
    )
    p.add_argument(
        "--emit-rayjob",
        metavar="FILE",
        help="also write a KubeRay RayJob that trains the answer (python -m tuner.emit has more options)",
    )
    return p


def read_config(
    args: argparse.Namespace, out: Path, target: RayTarget | None = None
) -> tuple[SearchConfig, Corpus | None, WorkloadInfo]:
    """The validated config (a resumed search keeps the one it started with), the corpus the trials train
    on (resolved here, once, for every trial; None for a workload that reads none: reads_corpus) and what
    the workload implements; ConfigError on bad input. Every check runs here, before Ray starts and before
    OUT is made, so bad input leaves nothing."""
    target = target or ray_target(args.address)
    overrides = list(args.overrides)
    if args.trials is not None:
        overrides.append(f"search.trials={args.trials}")
    if args.time_budget is not None:
        overrides.append(f"search.time_budget={args.time_budget}")
    cfg = load_search_config(args.config, overrides, data=args.data)
    connect_timeout(args)
    if args.emit_rayjob:
        check_writable(Path(args.emit_rayjob), "--emit-rayjob")
    data = cfg.train.data
    if data is not None and not is_builtin(data):  # a built-in corpus is a name, not a path
        if not Path(data).exists():
            raise ConfigError(f"data path not found: {data}")
        cfg = cfg.with_train(data=str(Path(data).resolve()))  # trials run in other working directories
    local = not target.joins  # the device is checked only where the trials run on this machine
    corpus = None
    if cfg.train.workload != "hybrid":  # a workload of the user's says whether it reads the corpus
        found = preflight(cfg.train, local=local, section="train")
    if cfg.train.workload == "hybrid" or found.info.reads_corpus:
        corpus = _resolve_corpus(cfg.train.data)
        with shipped_corpus(corpus):  # the checks `python -m trainables.train` makes, on the trials' text
            found = preflight(
                cfg.train.model_copy(update={"data_sha256": corpus.sha256}), local=local, section="train"
            )
    if found.cfg.units_per_example != cfg.train.units_per_example:  # counting the workload's units
        cfg = cfg.with_train(units_per_example=found.cfg.units_per_example)
    # the workload's loss_tolerance, where the config sets no tolerance (tuner/config.py:QualitySection)
    cfg = cfg.model_copy(update={"quality": cfg.quality.with_workload_default(found.info.loss_tolerance)})
    return fit_to_workload(cfg, found.info), corpus, found.info


def _resolve_corpus(data: str | None) -> Corpus:
    """The corpus the trials train on, resolved once here (ConfigError: one line)."""
    try:
        return resolve_corpus(data)
    except DataError as err:
        raise ConfigError(str(err)) from None


def connect_timeout(args: argparse.Namespace) -> float:
    try:
        return parse_duration(args.connect_timeout)
    except ValueError as err:
        raise ConfigError(f"--connect-timeout: {err}") from None


def trial_env(cfg: SearchConfig, cache_dir: str | None = None) -> tuple[dict[str, str], str | None]:
    """The trials' environment, and the compile cache best.yaml should name (None: the user set their own).

    One cache root, kept across searches (`cache_dir`, else search.cache_dir, else the user's cache dir:
    tuner/state/caches.py), which each trial keys by its device and software, so a kernel is compiled (and
    autotuned) once per machine, not per trial or search; best.yaml names it, so the user's run reuses it
    too. Compile threads: the cores left for each of the runs that compile at once on a GPU."""
    threads = max(1, (os.cpu_count() or 1) // cfg.resources.speed_runs_per_gpu)
    what = "--cache-dir" if cache_dir else "search.cache_dir"
    cache = caches.resolve_root(cache_dir or cfg.search.cache_dir, what)
    env, own = library_env.trial_env(cache, threads)
    log(caches.start_line(cache) if own else "compile cache: the dirs you exported (TORCHINDUCTOR_CACHE_DIR, "
        "TRITON_CACHE_DIR), unkeyed")  # fmt: skip
    return env, str(cache) if own else None


def resume_command(argv: list[str], out: Path) -> str:
    """This search's own command with --out spelled out and --resume added: --resume needs the --config,
    --set, --data, --trials and --time-budget that started it, and --address to reach its cluster."""
    args = list(argv)
    if not any(a == "--out" or a.startswith("--out=") for a in args):
        args += ["--out", str(out)]
    if "--resume" not in args:
        args.append("--resume")
    return "python -m tuner.search " + shlex.join(args)


def baseline_command(args: argparse.Namespace) -> str:
    """The baseline alone, as the search trains it: the config's train: section and its train.* --set."""
    cmd = ["--config", args.config] + (["--data", args.data] if args.data else [])
    for item in args.overrides:
        if item.startswith("train."):
            cmd += ["--set", item.removeprefix("train.")]
    return "python -m trainables.train " + shlex.join(cmd)


def interrupted(err: KeyboardInterrupt, argv: list[str], out: Path) -> int:
    why = f": {err}" if str(err) else ""
    if (out / "state.json").exists():
        say(f"interrupted{why}; OUT is resumable: {resume_command(argv, out)}")
    else:
        say(f"interrupted{why}; nothing was written yet")
    return Exit.INTERRUPTED


def crashed(err: Exception, argv: list[str], out: Path) -> int:
    """An unexpected error: one line for what failed and where, its traceback in OUT/crash.log, and the
    command that goes on (or, with nothing in OUT to go on from, the traceback here)."""
    cause = err.error if isinstance(err, PhaseError) else err
    where = f" in phase {err.phase}" if isinstance(err, PhaseError) else ""
    what = f"the search failed{where}: {type(cause).__name__}: {first_line(cause)}"
    trace = "".join(traceback.format_exception(err))
    if (out / "state.json").exists():
        with contextlib.suppress(OSError):
            (out / "crash.log").write_text(trace)
            log(f"error: {what} (traceback: {out / 'crash.log'})")
            log(f"finished phases and trials are kept; once the cause is fixed: {resume_command(argv, out)}")
            return Exit.FAILED
    print(trace, file=sys.stderr, end="")
    log(f"error: {what}")
    return Exit.FAILED


def main(argv: list[str] | None = None) -> int:
    # SIGTERM (a job's end, `kill`) is an interrupt from the first moment: exit 130, resumable where
    # anything was written. Ray's start replaces the handler; the session puts this one back.
    before = signal.signal(signal.SIGTERM, terminated)
    try:
        with guarded_streams():  # a pipe closed by Ctrl-C (`| tee`) must not turn the interrupt into a crash
            return _main(list(sys.argv[1:] if argv is None else argv))
    finally:
        signal.signal(signal.SIGTERM, before or signal.SIG_DFL)


def _main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    out = Path(args.out)
    existed = out.exists()
    session, lock = RaySession(), OutLock(out)
    try:
        return _search(args, argv, out, session, lock)
    except ConfigError as err:
        log(f"error: {err}")
        return Exit.BAD_INPUT
    except EnvironmentFault as err:
        log(f"error: {err}")
        return Exit.ENVIRONMENT
    except KeyboardInterrupt as err:
        return interrupted(err, argv, out)
    except SearchFailed as err:
        log(f"error: {err}")
        log(f"to see why, train the baseline alone: {baseline_command(args)}")
        return Exit.FAILED
    except Exception as err:  # noqa: BLE001 - any other failure still ends in a line that says what next
        # An interrupt that landed in a library's clean-up, which raised over it (Optuna's journal lock: a
        # FileNotFoundError), is still an interrupt.
        stop = find_cause(err, KeyboardInterrupt)
        return interrupted(stop, argv, out) if stop else crashed(err, argv, out)
    finally:
        session.stop()
        lock.release()
        if not existed and out.is_dir() and not any(out.iterdir()):
            out.rmdir()  # ended before anything was written: leave no empty OUT behind


def _search(args: argparse.Namespace, argv: list[str], out: Path, session: RaySession, lock: OutLock) -> int:
    target = ray_target(args.address)
    cfg, corpus, workload = read_config(args, out, target)
    log(f"Ray: {target}")
    if corpus is not None:  # a workload that reads no corpus has no data line
        log(f"data: {corpus.source}")
    command = "python -m tuner.search " + shlex.join(argv)
    env, compile_cache = trial_env(cfg, args.cache_dir)  # before OUT: a bad cache root leaves nothing
    cfg = claim_out(args, out, lock, command, cfg, corpus)
    url = session.start(target, env, dashboard=args.dashboard, timeout_s=connect_timeout(args))
    if url:
        log(f"Ray dashboard: http://{url}")
    name = cache_server.server_name()  # trials on other nodes get the caches from the driver through it
    server = cache_server.serve(env, name)  # held for the search's lifetime: the driver owns it
    say_where_results_go(out)
    ctx = open_context(
        cfg, out, resume=args.resume, command=command, compile_cache=compile_cache, workload=workload,
        # through Ray's object store: no node needs its own copy
        inputs=TrialInputs(corpus=corpus, cache_server=name if server else None),
    )  # fmt: skip
    # remembered answers lie beside the compile caches: on shared storage when the caches are
    code = run_search(ctx, fresh=args.fresh, kept=answers.answers_dir(args.cache_dir or cfg.search.cache_dir))
    del server
    if args.emit_rayjob:
        emit_rayjob(out, args.emit_rayjob)
    return as_job_exit(code)


# Set by Ray's job supervisor in the environment of a Ray Job's driver (`ray job submit`, and so KubeRay's
# RayJob, whose submitter runs it).
RAY_JOB_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"


def as_job_exit(code: int) -> int:
    """A Ray Job's exit: a search that reached an answer succeeded, the baseline kept (3) included, so Ray
    marks the job SUCCEEDED and KubeRay does not count it failed or retry it. From a shell the exit still
    tells the answers apart; in a job, the last lines and summary.json (`best` null: the baseline) do.
    4 (untrusted figures) and 6 (nothing screened) stay failures: no answer was measured."""
    if code != Exit.BASELINE_STAYS or not os.environ.get(RAY_JOB_ENV):
        return code
    log(
        "exit 0 as a Ray Job: the baseline kept is an answer, the job's success (from a shell this search "
        f"exits {int(code)}; summary.json's best is null)"
    )
    return Exit.OK


def say_where_results_go(out: Path) -> None:
    """On a cluster of several nodes, one line on storage: none is shared, the driver gathers everything."""
    nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
    if nodes > 1:
        log(
            f"trial results: gathered by this driver into {out.resolve()} ({nodes} nodes): the trials get the "
            "corpus and return their results through Ray, so OUT needs no storage shared by the nodes"
        )


def emit_rayjob(out: Path, dest: str) -> None:
    """best.yaml as a ready RayJob (written for exit 0 and 3 alike: both write best.yaml)."""
    try:
        written = emit.write_rayjob(out / "best.yaml", dest)
    except ConfigError as err:
        log(f"error: --emit-rayjob: {err}")  # the search's answer stands; only the manifest is missing
        return
    log(f"RayJob for best.yaml: {written} (kubectl apply -f {written})")


if __name__ == "__main__":
    exit_bounded(main())
