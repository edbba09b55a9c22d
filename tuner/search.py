"""`python -m tuner.search`: the fastest training config whose loss stays within tolerance of the baseline.

Phases (see DESIGN.md): baseline -> speed screen (Optuna via Ray Tune, exclusive GPU, short) -> loss check
(full budget, GPU fractions, only configs whose loss can differ) -> re-measure (exclusive, repeated) ->
select. Each finished phase is recorded in OUT/state.json, each phase is a Ray Tune experiment under
OUT/ray/, and the Optuna study lives in OUT/optuna.journal (or an RDB URL), so `--resume` finishes an
interrupted search without rerunning or duplicating finished trials.

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
import time
from pathlib import Path
from typing import Any

from trainables.config import ConfigError, TrainConfig, make_config
from trainables.loop import first_line
from tuner.config import SearchConfig, load_search_config, parse_duration

EXIT_OK, EXIT_BAD_INPUT, EXIT_NO_FEASIBLE, EXIT_INTERRUPTED = 0, 2, 3, 130


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class SearchFailed(RuntimeError):
    """The search cannot go on (e.g. the baseline itself fails); one line, exit 1."""


class State:
    """OUT/state.json: the search's inputs and each finished phase's rows, written atomically."""

    def __init__(self, out: Path):
        self.path = out / "state.json"
        self.data: dict[str, Any] = (
            json.loads(self.path.read_text()) if self.path.exists() else {"phases": {}}
        )

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str))
        tmp.replace(self.path)

    def phase(self, name: str) -> Any:
        return self.data["phases"].get(name)

    def finish(self, name: str, value: Any, seconds: float) -> None:
        self.data["phases"][name] = value
        self.data.setdefault("timings", {})[name] = round(seconds, 1)
        self.save()


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
        probe = out / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise ConfigError(f"--out: {out} is not writable ({err.strerror or err})") from None
    if not resume and (out / "state.json").exists():
        raise ConfigError(
            f"--out: {out} holds an earlier search; pass --resume to continue it or pick a new OUT"
        )


class Search:
    def __init__(self, cfg: SearchConfig, out: Path, *, resume: bool, command: str):
        self.cfg, self.out, self.resume, self.command = cfg, out, resume, command
        self.state = State(out)
        self.base: dict[str, Any] = cfg.baseline().model_dump()
        self.notices: list[str] = []

    # ----- helpers -----
    def _short(self, extra: dict[str, Any]) -> dict[str, Any]:
        """A short exclusive speed run: a fixed number of steady steps, a token eval only."""
        s = self.cfg.search
        warm = self.base["timing_warmup_steps"]
        return {
            **self.base,
            **extra,
            "max_steps": warm + s.screen_steps,
            "eval_interval": 0,
            "eval_tokens": self.base["seq_len"] * self.base["eval_batch_size"],
            "log_interval": max(1, s.screen_steps // 4),
            "out_dir": None,
        }

    def _exclusive(self) -> dict[str, float]:
        if self.hw["gpus"]:
            return {"cpu": self.cfg.resources.cpus_per_trial, "gpu": self.cfg.resources.gpus_per_trial}
        return {"cpu": max(1, self.cluster_cpus)}  # the whole CPU share: speed is never measured shared

    def _gpu_share(self, screened: dict[str, Any]) -> float | None:
        """GPU fraction for a loss run: the configured share, or more when the config's screen run peaked
        above it (with 25% headroom), rounded up to 1/k so runs pack evenly. Its memory cap is the same."""
        if not self.hw["gpus"]:
            return None
        need = (screened.get("peak_mem_mb") or 0) * 1.25 / max(1, self.hw.get("gpu_mem_mb") or 1)
        share = max(self.cfg.resources.loss_check_gpu_fraction, need)
        return 1.0 if share > 0.5 else 1.0 / int(1.0 / share)

    def _shared(self):
        if self.hw["gpus"]:  # per trial: its own GPU share (see _gpu_share)
            cpus = self.cfg.resources.cpus_per_trial
            return lambda config: {"cpu": cpus, "gpu": config["train"]["gpu_memory_fraction"]}
        return {"cpu": self.cfg.resources.cpus_per_trial}

    def _run_cases(
        self, phase: str, cases: list[dict[str, Any]], resources, *, repeats: int = 1, concurrent=0
    ):
        from tuner.phases import run_cases

        rows = run_cases(
            phase,
            self.out,
            cases,
            resources,
            repeats=repeats,
            max_concurrent=concurrent,
            reuse_actors=self._reuse(),
        )
        return self._annotate(rows)

    def _reuse(self) -> bool:
        """Warm workers across trials, except under a CPU memory cap: an allocation failing inside a native
        library (oneDNN) can leave that process unable to run the next trial."""
        return bool(self.hw["gpus"]) or not self.base.get("memory_cap_mb")

    def _notice(self, msg: str) -> None:
        self.notices.append(msg)
        _log(f"notice: {msg}")

    # ----- telemetry -----
    def _start_telemetry(self) -> None:
        """One NVML sampler per GPU node; on a machine without NVML it says so once and the search goes on."""
        import ray

        from tuner.telemetry import describe_unavailable, start_telemetry

        hz = self.cfg.search.telemetry_hz
        self.telemetry = start_telemetry(hz=hz, all_nodes=not self.hw["gpus"]) if hz else {}
        self.telemetry_notice = None if hz else "telemetry off (search.telemetry_hz = 0)"
        for info in ray.get([a.info.remote() for a in self.telemetry.values()]):
            line = describe_unavailable(info)
            if line:
                self.telemetry_notice = line
                self._notice(line)

    def _annotate(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Join each trial to the GPU samples of its steady window (util, power, J/token, throttling) and
        flag speed figures taken while other processes contended for the host's CPUs."""
        from tuner.report import phase_of
        from tuner.telemetry import annotate_trial, fetch_window, flag_cpu_contention

        out = []
        for row in rows:
            has_window = row.get("window_t0") and row.get("window_t1") and row.get("gpu") is not None
            if getattr(self, "telemetry", None) and has_window:
                window = fetch_window(self.telemetry, {**row, "node": row.get("node_id")})
                if window.get("available"):
                    row = annotate_trial(row, window)
                    self._write_timeline(row)
                else:
                    row["telemetry_note"] = window.get("reason")
            out.append(flag_cpu_contention(row))
        # loss-check runs share the machine by design and their speed is never used
        flagged = [r for r in out if r.get("cpu_shared") and phase_of(r) != "loss_check"]
        if flagged:
            worst = max(r["cpu_others_cores"] for r in flagged)
            self._notice(
                f"{flagged[0]['phase']}: {len(flagged)} of {len(out)} timed runs shared the CPU with other "
                f"processes (up to {worst:.1f} cores busy elsewhere); their speed figures are not trusted"
            )
        return out

    def _write_timeline(self, row: dict[str, Any]) -> None:
        """The trial's GPU timeline into TensorBoard, next to Ray's curves for that trial."""
        import ray
        from tensorboardX import SummaryWriter

        from tuner.telemetry import write_tensorboard

        actor = self.telemetry.get(row.get("node_id"))
        if actor is None or not row.get("path"):
            return
        try:
            ref = actor.timeline.remote(row["gpu"], row["window_t0"], row["window_t1"], 200)
            timeline = ray.get(ref, timeout=30)
            with SummaryWriter(logdir=row["path"]) as writer:
                write_tensorboard(writer, timeline)
            row["timeline"] = timeline
        except Exception as err:  # noqa: BLE001 - a missing plot must not end the search
            self._notice(f"telemetry timeline for {row.get('id')} not written: {err}")

    def _timed(self, name: str, fn):
        done = self.state.phase(name)
        if done is not None:
            _log(f"[{name}] already done (from {self.state.path})")
            return done
        _log(f"[{name}] starting")
        t0 = time.time()
        value = fn()
        self.state.finish(name, value, time.time() - t0)
        return value

    # ----- phases -----
    def run(self) -> int:
        import ray

        from tuner.space import applicable, bound_batch, probe_hardware

        resources = ray.cluster_resources()
        self.cluster_cpus = int(resources.get("CPU", 1))
        gpu_opts = {"num_gpus": 1} if resources.get("GPU", 0) >= 1 else {}
        self.hw = self._timed(
            "hardware", lambda: ray.get(ray.remote(probe_hardware).options(**gpu_opts).remote())
        )
        self.hw["gpus"] = int(resources.get("GPU", 0))
        space, fixed, notices = applicable(self.cfg.search.space, self.hw)
        self.base.update(fixed)
        if self.base["kernels"] == "fused" and not self.hw["cuda"]:
            raise ConfigError("config key 'train.kernels': 'fused' needs CUDA workers (use torch or auto)")
        for n in notices:
            self._notice(n)
        if fixed:
            self._notice(f"fixed (one choice left): {fixed}")
        self._start_telemetry()

        baseline = self._timed(
            "baseline", lambda: self._run_cases("baseline", [self.base], self._exclusive())[0]
        )
        if baseline["status"] != "ok":
            raise SearchFailed(f"the baseline run failed ({baseline['status']}: {baseline['error']})")
        baseline["feasible"] = True
        limit = self.cfg.quality.limit(baseline["val_loss"])
        _log(
            f"baseline: {baseline['tokens_per_s']:,.0f} tok/s, val loss {baseline['val_loss']:.4f} (limit {limit:.4f})"
        )

        bounds = self._timed("probe", lambda: self._probe(space))
        if bounds:
            space, notices = bound_batch(space, max(bounds.values()))
            for n in notices:
                self._notice(n)

        screen = self._timed("screen", lambda: self._screen(space))
        checked = self._timed("loss_check", lambda: self._loss_check(screen, limit))
        from tuner.select import propagate_feasibility

        propagate_feasibility(screen, checked, baseline["val_loss"], limit, baseline=self.base)
        remeasure = self._timed("remeasure", lambda: self._remeasure(screen))
        return self._finish(baseline, screen, checked, remeasure, limit)

    def _probe(self, space) -> dict[str, int]:
        import ray

        from tuner.probe import max_batch

        on_gpu = self.hw["gpus"] > 0
        if not self.cfg.search.probe_batch or not isinstance(space.get("batch_size"), list):
            return {}
        if not on_gpu and not self.base.get("memory_cap_mb"):
            self._notice("batch probe skipped on CPU without memory_cap_mb (the OS swaps rather than OOMs)")
            return {}
        precisions = space.get("precision", [self.base["precision"]])
        limit = min(self.cfg.search.max_batch, max(space["batch_size"]))
        # A fresh worker per precision (max_calls=1): an OOM must not leave state behind for the next probe.
        task = ray.remote(max_batch).options(num_gpus=1 if on_gpu else 0, num_cpus=1, max_calls=1)
        bounds = dict(zip(precisions, ray.get([task.remote(self.base, p, limit) for p in precisions])))
        _log(f"[probe] largest batch per precision: {bounds}")
        return bounds

    def _screen(self, space) -> list[dict[str, Any]]:
        import optuna
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend
        from ray.tune.search.optuna import OptunaSearch

        from tuner.phases import run_search
        from tuner.space import to_tune

        s = self.cfg.search
        storage = (
            optuna.storages.RDBStorage(s.storage)
            if s.storage
            else JournalStorage(JournalFileBackend(str(self.out / "optuna.journal")))
        )
        points = [p for p in (self._start_point(point, space) for point in s.start_points) if p]
        if self.resume:
            _fail_stale_trials(storage, "screen")

        def make_searcher():
            return OptunaSearch(
                points_to_evaluate=points or None,
                metric="tokens_per_s",
                mode="max",
                sampler=optuna.samplers.TPESampler(
                    seed=s.seed, n_startup_trials=max(2, min(8, s.trials // 3))
                ),
                study_name="screen",
                storage=storage,
            )

        rows = run_search(
            "screen",
            self.out,
            {"train": self._short({}), **to_tune(space)},
            self._exclusive(),
            trials=s.trials,
            make_searcher=make_searcher,
            stopper_ratio=s.early_stop_ratio,
            max_concurrent=max(1, self.hw["gpus"]),
            time_budget_s=parse_duration(s.time_budget) if s.time_budget else None,
            reuse_actors=self._reuse(),
        )
        for row in rows:
            row["val_loss"] = None  # a short run's loss means nothing; the loss check fills it in
        return self._annotate(rows)

    def _start_point(self, point: dict[str, Any], space) -> dict[str, Any] | None:
        """A full point of the space: named knobs as given, the rest the baseline's value (or the first choice)."""
        from tuner.config import Range

        full = {}
        for name, knob in space.items():
            value = point.get(name, self.base[name])
            ok = knob.low <= value <= knob.high if isinstance(knob, Range) else value in knob
            if not ok and name in point:
                self._notice(f"start point {point} skipped: {name}={value!r} does not apply here")
                return None
            full[name] = value if ok else (knob.low if isinstance(knob, Range) else knob[0])
        return full

    def _loss_check(self, screen, limit) -> list[dict[str, Any]]:
        """Loss runs for the fastest distinct-loss configs, in rounds that fill the free slots, until
        `loss_check_top` feasible configs are known (a config sharing the baseline's loss counts) or
        `max_loss_checks` runs are spent: a fast config that fails its check makes room for the next."""
        from tuner.select import loss_check_candidates

        s = self.cfg.search
        picks = loss_check_candidates(screen, self.base, len(screen))
        queue = [p for p in picks if not p.get("inherits")]  # the baseline's own loss stands for the rest
        feasible = sum(1 for p in picks if p.get("inherits"))
        budget = s.max_loss_checks if s.max_loss_checks is not None else 2 * s.loss_check_top
        slots = self._shared_slots()
        # Full token budget, the baseline's seed and data order; GPU fractions with a memory cap each.
        rows: list[dict[str, Any]] = []
        round_no = 0
        while queue and feasible < s.loss_check_top and len(rows) < budget:
            take = min(slots, s.loss_check_top - feasible, budget - len(rows))
            batch, queue = queue[:take], queue[take:]
            cases = [
                {**self.base, **p["config"], "gpu_memory_fraction": self._gpu_share(p), "out_dir": None}
                for p in batch
            ]
            name = f"loss_check_{round_no}"
            new = self._timed(
                name, lambda name=name, cases=cases: self._run_cases(name, cases, self._shared())
            )
            for row in new:
                pick = batch[row["case"]]
                row["config"], row["screen_id"] = pick["config"], pick["id"]
                row["feasible"] = (
                    row["status"] == "ok" and row["val_loss"] is not None and row["val_loss"] <= limit
                )
                feasible += bool(row["feasible"])
            rows += new
            round_no += 1
        return rows

    def _shared_slots(self) -> int:
        """How many loss-check runs fit at once on the cluster."""
        r = self.cfg.resources
        if self.hw["gpus"]:
            slots = int(self.hw["gpus"] / r.loss_check_gpu_fraction)
        else:
            slots = int(self.cluster_cpus / r.cpus_per_trial)
        return max(1, min(slots, r.max_concurrent or slots))

    def _remeasure(self, screen) -> list[dict[str, Any]]:
        feasible = [t for t in screen if t.get("feasible") and t["status"] == "ok"]
        feasible.sort(key=lambda t: -(t["tokens_per_s"] or 0))
        finalists = [{"id": "baseline", "config": {}}]
        cases = [self._short({})]
        for t in feasible:  # distinct configs only: TPE may propose the same point twice
            case = self._short(t["config"])
            if case not in cases and len(finalists) <= self.cfg.search.remeasure_top:
                finalists.append({"id": t["id"], "config": t["config"]})
                cases.append(case)
        rows = self._run_cases(
            "remeasure",
            cases,
            self._exclusive(),
            repeats=self.cfg.search.repeats,
            concurrent=max(1, self.hw["gpus"]),
        )
        for row in rows:
            finalist = finalists[row["case"]]
            row["finalist"], row["config"], row["val_loss"] = finalist["id"], finalist["config"], None
        return rows

    def _finish(self, baseline, screen, checked, remeasure, limit) -> int:
        from tuner.report import write_reports
        from tuner.select import pick_winner, spread

        by_finalist: dict[str, list[dict[str, Any]]] = {}
        for row in remeasure:
            by_finalist.setdefault(row["finalist"], []).append(row)
        screen_by_id = {t["id"]: t for t in screen}
        finalists = []
        for fid, rows in by_finalist.items():
            src = screen_by_id.get(fid, {**baseline, "config": {}})
            finalists.append(
                {
                    "id": fid,
                    "config": src["config"],
                    "runs": [r["tokens_per_s"] for r in rows if r["status"] == "ok" and r["tokens_per_s"]],
                    "val_loss": src.get("val_loss"),
                    "feasible": src.get("feasible"),
                    **_energy(rows),
                }
            )
        base_runs = [r["tokens_per_s"] for r in by_finalist.get("baseline", []) if r["status"] == "ok"]
        base_median = spread(base_runs)[0] if base_runs else baseline["tokens_per_s"]
        # The baseline competes too: when nothing beats it beyond noise, the simplest (it) wins.
        selection = pick_winner(finalists, self.base)
        winner, sel = selection.winner, selection.to_dict()
        if not any(f["feasible"] for f in finalists if f["id"] != "baseline"):
            winner = None  # nothing but the baseline itself passed: exit 3, the baseline is the answer

        best = None
        if winner:
            median, lo, hi = spread(winner["runs"])
            best_cfg = make_config({**self.base, **winner["config"]})
            self._write_best(best_cfg)
            best = {
                "id": winner["id"],
                "config": winner["config"],
                "tokens_per_s": median,
                "tokens_per_s_spread": [lo, hi],
                "val_loss": winner["val_loss"],
                "speedup": round(median / base_median, 3) if base_median else None,
            }
        else:
            self._write_best(make_config(self.base))
        trials = [baseline] + screen + checked + remeasure
        timelines = {}
        for fid in ("baseline", best["id"] if best else None):
            run = next((r for r in by_finalist.get(fid, []) if r.get("timeline")), None)
            if run:
                timelines[run["id"]] = run["timeline"].get("points", [])
        for row in trials:
            row.pop("timeline", None)  # kept for the baseline's and the winner's runs only
        summary = {
            "baseline": {
                "config": self.base,
                "tokens_per_s": base_median,
                "tokens_per_s_full_run": baseline["tokens_per_s"],
                "val_loss": baseline["val_loss"],
            },
            "best": best,
            "trials": trials,
            "tolerance": {"value": self.cfg.quality.tolerance, "mode": self.cfg.quality.mode, "limit": limit},
            "hardware": self.hw,
            "versions": _versions(),
            "timings": {
                **self.state.data.get("timings", {}),
                # loss_check_N rounds are inside loss_check
                "total": round(
                    sum(v for k, v in self.state.data.get("timings", {}).items() if not k[-1].isdigit()), 1
                ),
            },
            "selection": sel,
            "notices": self.notices,
            "telemetry": {
                "available": bool(self.telemetry) and self.telemetry_notice is None,
                "notice": self.telemetry_notice,
                "timelines": timelines,
            },
            "command": self.command,
            "best_yaml": str(self.out / "best.yaml"),
            "measurement": {
                "screen_steps": self.cfg.search.screen_steps,
                "timing_warmup_steps": self.base["timing_warmup_steps"],
                "repeats": self.cfg.search.repeats,
                "screen": "exclusive GPU (or the whole CPU share)",
                "loss_check": "shared GPU (fractions), full token budget, val loss only",
                "remeasure": "exclusive, repeated; medians",
            },
        }
        (self.out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
        write_reports(self.out, summary)
        if best:
            _log(
                f"best: {best['id']} {best['config']} -> {best['tokens_per_s']:,.0f} tok/s "
                f"({best['speedup']}x baseline), val loss {best['val_loss']}"
            )
            _log(f"run it: python -m trainables.train --config {self.out / 'best.yaml'}")
            return EXIT_OK
        _log("no config beat the baseline within tolerance; the answer is the baseline (best.yaml)")
        return EXIT_NO_FEASIBLE

    def _write_best(self, cfg: TrainConfig) -> None:
        from trainables.config import dump_config

        # best.yaml is for training on whatever corpus its user has; the corpus check is the search's own
        dump_config(cfg.model_copy(update={"data_sha256": None}), self.out / "best.yaml")


def _energy(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A finalist's J/token (median over its exclusive runs) and whether its speed figures can be trusted."""
    from tuner.select import spread

    joules = [r["joules_per_token"] for r in rows if r.get("joules_per_token")]
    trusted = [r["telemetry_trusted"] for r in rows if "telemetry_trusted" in r]
    return {
        "joules_per_token": spread(joules)[0] if joules and len(joules) == len(rows) else None,
        "telemetry_trusted": all(trusted) if trusted else None,
    }


def _fail_stale_trials(storage, study_name: str) -> None:
    """Trials left RUNNING by a killed driver will never report: mark them failed so TPE ignores them."""
    import optuna
    from optuna.trial import TrialState

    try:
        study = optuna.load_study(study_name=study_name, storage=storage)
    except KeyError:  # no study yet
        return
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)


def _versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {"python": sys.version.split()[0]}
    for dist in (
        "torch",
        "ray",
        "optuna",
        "hybrid-tuner",
        "flash-linear-attention",
        "mamba-ssm",
        "causal-conv1d",
    ):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            pass
    return out


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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = Path(args.out)
    command = "python -m tuner.search " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])
    )

    try:
        overrides = list(args.overrides)
        if args.trials is not None:
            overrides.append(f"search.trials={args.trials}")
        if args.time_budget is not None:
            overrides.append(f"search.time_budget={args.time_budget}")
        if args.resume and (out / "state.json").exists():
            saved = json.loads((out / "state.json").read_text())
            cfg = SearchConfig(**saved["config"])  # resume with exactly the settings that started it
        else:
            cfg = load_search_config(args.config, overrides, data=args.data)
        check_out(out, args.resume)
        check_address(args.address)
        base = cfg.baseline()
        if base.data is not None:
            if not Path(base.data).exists():
                raise ConfigError(f"data path not found: {base.data}")
            cfg.train["data"] = str(Path(base.data).resolve())  # trials run in other working directories
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # our progress lines replace Ray's tables
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    # One compile cache per search, shared by its trials, so a kernel is compiled once, not per trial.
    cache = (out / "compile-cache").resolve()
    env_vars = {
        "TRITON_CACHE_DIR": os.environ.get("TRITON_CACHE_DIR", str(cache / "triton")),
        "TORCHINDUCTOR_CACHE_DIR": os.environ.get("TORCHINDUCTOR_CACHE_DIR", str(cache / "inductor")),
        "TORCHINDUCTOR_COMPILE_THREADS": os.environ["TORCHINDUCTOR_COMPILE_THREADS"],
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    import ray

    if cfg.train.get("workload", "hybrid") == "hybrid":  # say which corpus the trials will train on
        from trainables.data import DataError, resolve_corpus

        try:
            corpus = resolve_corpus(cfg.train.get("data"))
            _log(f"data: {corpus.source}")
            cfg.train.setdefault("data_sha256", corpus.sha256)  # a resumed search keeps its own
        except DataError as err:
            print(f"error: {err}", file=sys.stderr)
            return EXIT_BAD_INPUT
    joining = args.address not in (None, "local")
    try:
        context = ray.init(
            address=args.address if joining else None,
            runtime_env={"env_vars": env_vars},
            log_to_driver=False,
            logging_level="ERROR",
            **({} if joining else {"include_dashboard": args.dashboard}),
        )
    except (ConnectionError, RuntimeError, ValueError) as err:
        print(f"error: cannot start or join Ray: {first_line(err)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.dashboard and not joining:
        _log(f"Ray dashboard: http://{context.dashboard_url}")
    search = Search(cfg, out, resume=args.resume, command=command)
    search.state.data.setdefault("config", cfg.model_dump())
    search.state.data.setdefault("command", command)
    search.state.save()
    try:
        return search.run()
    except KeyboardInterrupt as err:
        _log(f"interrupted{': ' + str(err) if str(err) else ''}; OUT is resumable: --resume --out {out}")
        return EXIT_INTERRUPTED
    except SearchFailed as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    finally:
        ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
