"""One place that builds the typed records tests need: trial rows and summaries with sensible defaults, a
realistic synthetic search summary, and a summary as searches wrote it before the timing gate and costs."""

from __future__ import annotations

import copy
import math
import random
import statistics
from pathlib import Path
from typing import Any

from tuner.config import SearchConfig
from tuner.context import SearchContext
from tuner.decide.costs import break_even_tokens, time_to_train
from tuner.space.knobs import SPEED_ONLY_KNOBS
from tuner.state.gpu_records import SEARCH
from tuner.state.hardware import Hardware
from tuner.state.records import Summary, TrialRow
from tuner.state.search_state import State
from tuner.telemetry.gpus import USAGE_PHASES, gpu_population

# The smoke model at one layer of width 32, for Tune-trial tests whose rules are of steps, tokens, places and
# profiles, not of the model: 20-40% less of their time (docs/test-times.md).
SMALL_SMOKE_MODEL = ["train.model.n_layers=1", "train.model.d_model=32"]


def search_context(
    cfg: SearchConfig, out: Path, hw: Hardware | None = None, cluster_cpus: int = 1, **more: Any
) -> SearchContext:
    """A search's context for a phase test: the config's train section as the baseline, a fresh state in
    `out`, no GPU unless `hw` says otherwise."""
    return SearchContext(
        cfg=cfg,
        out=out,
        base=cfg.train,
        hw=hw or Hardware(gpus=0),
        cluster_cpus=cluster_cpus,
        state=State(out),
        command="",
        **more,
    )


def make_row(
    tid: str, phase: str = "screen", config: dict[str, Any] | None = None, **fields: Any
) -> TrialRow:
    """A finished trial row; `fields` set any TrialRow field (status, tokens_per_s, val_loss, ...)."""
    values: dict[str, Any] = {"id": tid, "phase": phase, "config": dict(config or {}), "status": "ok"}
    return TrialRow(**(values | fields))


def make_summary(**fields: Any) -> Summary:
    """A summary; nested sections may be given as dicts, trials as rows or dicts."""
    return Summary.model_validate(fields)


# Fields a search writes since speed runs share a GPU behind a timing gate, loss runs borrow their twin's
# execution and the summary says what the planned run costs: absent from summaries written before.
GATED_TRIAL_FIELDS = ("gate_wait_s", "compiling_beside", "execution", "twin_of")
COST_FIELDS = ("planned_tokens", "compile_cache", "finalists", "break_even")
OLD_MEASUREMENT = {
    "screen": "exclusive GPU (or the whole CPU share)",
    "loss_check": "shared GPU (fractions), full token budget, val loss only",
    "remeasure": "exclusive, repeated; medians",
}


def legacy_summary(summary: dict[str, Any]) -> dict[str, Any]:
    """A summary.json dict as a search wrote it before those fields (and with its measurement wording)."""
    out = {k: v for k, v in summary.items() if k not in COST_FIELDS}
    out["trials"] = [{k: v for k, v in t.items() if k not in GATED_TRIAL_FIELDS} for t in summary["trials"]]
    out["baseline"] = {k: v for k, v in summary["baseline"].items() if k != "loss_execution"}
    if summary.get("best"):
        out["best"] = {k: v for k, v in summary["best"].items() if k not in ("warmup_s", "time_to_train_s")}
    out["measurement"] = {**summary.get("measurement", {}), **OLD_MEASUREMENT}
    return out


# --- a realistic synthetic summary: an H100 search over batch, precision, compile, kernels, workers, lr ------
# (tests/test_report_html.py renders it; `python tests/test_report_html.py` screenshots it for docs/)

BASE_CFG = {
    "batch_size": 8,
    "num_workers": 0,
    "precision": "fp32",
    "compile": "none",
    "kernels": "torch",
    "lr": 3e-4,
    "timing_warmup_steps": 5,
}
T0 = 1_760_000_000.0  # sample times are time.time()
NODE_ID = "7088e154e66767fe6807b1254f2e09d538e0af71761592aeee82b61b"  # a Ray node id: 56 hex digits

# --- a realistic synthetic summary: an H100 search over batch, precision, compile, kernels, workers, lr ------


def _speed(cfg: dict) -> float:
    """Tok/s shaped like the measured facts: launch-bound at small batch, bf16 and compile and fused help."""
    batch = cfg.get("batch_size", 8)
    per_step_ms = 70.0 / (1.0 if cfg.get("kernels", "torch") == "torch" else 1.6)
    per_step_ms /= {"none": 1.0, "default": 1.5, "max-autotune": 1.6}[cfg.get("compile", "none")]
    per_token_us = 0.9 if cfg.get("precision", "fp32") == "bf16" else 3.2
    return batch * 256 / (per_step_ms / 1e3 + batch * 256 * per_token_us / 1e6)


def _loss(cfg: dict) -> float:
    """Loss at a fixed token budget: bigger batches take fewer steps; a high lr diverges a little."""
    batch = cfg.get("batch_size", 8)
    return round(1.50 + 0.008 * math.log2(batch / 8) + (0.09 if cfg.get("lr", 3e-4) > 1e-3 else 0.0), 4)


def _gpu_fields(rng: random.Random, cfg: dict, tps: float, shared: bool = False) -> dict:
    util = min(98.0, 20 + 10 * math.log2(cfg.get("batch_size", 8)))
    power = 120 + 4.3 * util
    return {
        "gpu_util_mean": util,
        "gpu_power_mean_w": power,
        "energy_j": power * 12.0,
        "joules_per_token": power / tps * rng.uniform(0.98, 1.02),
        "gpu_temp_max_c": 40 + util / 3,
        "throttled_share": 0.0,
        "slowdown_share": 0.0,
        "shared": shared,
        "telemetry_trusted": not shared,
        "telemetry_note": "GPU shared with pids [4242]" if shared else None,
    }


def search_row(tid: str, phase: str, cfg: dict, status: str = "ok", **values) -> dict:
    """One trial of the synthetic search as summary.json holds it."""
    row = {
        "id": tid,
        "phase": phase,
        "config": cfg,
        "status": status,
        "feasible": None,
        "tokens_per_s": None,
        "val_loss": None,
        "peak_mem_mb": None,
        "compile_s": 40.0 if cfg.get("compile", "none") != "none" else None,
        "node": "10.0.0.7",
        "node_id": NODE_ID,
        "gpu": 0,
        "wall_s": 30.0,
        "error": None,
        "finalist": None,
        "repeat": None,
    }
    return row | values


WINNER_CFG = {"batch_size": 256, "precision": "bf16", "compile": "default", "kernels": "fused"}
SCREEN = [  # (id, config changes, status)
    ("screen-0", WINNER_CFG, "ok"),
    ("screen-1", {"batch_size": 256, "precision": "bf16", "kernels": "fused"}, "ok"),
    ("screen-2", {"batch_size": 1024, "precision": "bf16", "compile": "default", "kernels": "fused"}, "ok"),
    ("screen-3", {"batch_size": 64, "precision": "bf16", "compile": "max-autotune"}, "ok"),
    ("screen-4", {"num_workers": 4, "compile": "default"}, "ok"),
    ("screen-5", {"batch_size": 128, "lr": 3e-3, "precision": "bf16"}, "ok"),
    ("screen-6", {"batch_size": 16, "compile": "default"}, "stopped"),
    ("screen-7", {"batch_size": 128, "precision": "bf16", "compile": "default"}, "ok"),
    ("screen-8", {"batch_size": 4096, "precision": "fp32"}, "oom"),
    ("screen-9", {"batch_size": 512, "precision": "bf16", "compile": "max-autotune"}, "error"),
    ("screen-10", {"batch_size": 64, "lr": 1e-2, "precision": "bf16"}, "ok"),
]


def _timeline(rng: random.Random, util: float, power: float, mem_mb: float, temp: tuple, throttle_from=None):
    points = []
    for i in range(120):
        warm = min(1.0, i / 8)
        points.append(
            {
                "t": T0 + 500 + i * 0.25,
                "util_gpu": util * warm + rng.uniform(-3, 3),
                "util_mem": util * 0.6 * warm,
                "mem_used_mb": mem_mb * (0.4 + 0.6 * warm),
                "power_w": 70 + (power - 70) * warm + rng.uniform(-8, 8),
                "temp_c": temp[0] + (temp[1] - temp[0]) * i / 119,
                "sm_clock_mhz": 1980.0,
                "mem_clock_mhz": 2619.0,
                "throttled": 0.5 if throttle_from is not None and i >= throttle_from else 0.0,
                "processes": 1,
            }
        )
    return points  # summary.json keeps a timeline's points only


def synthetic_summary() -> dict:
    """A whole H100 search: baseline, 11 screened configs (one OOM, one error, one stopped), loss checks
    (one NaN, one over the limit), re-measures of the winner, a runner-up and the baseline, telemetry."""
    rng = random.Random(0)
    base_tps = _speed({})
    trials = [
        search_row(
            "baseline-0", "baseline", BASE_CFG, tokens_per_s=base_tps * 0.98, val_loss=1.5, peak_mem_mb=480.0
        )
        | _gpu_fields(rng, {}, base_tps)
    ]
    limit = 1.55
    for tid, cfg, status in SCREEN:
        tps = _speed(cfg) * rng.uniform(0.97, 1.03)
        mem = 480.0 * cfg.get("batch_size", 8) / 8 * (0.55 if cfg.get("precision") == "bf16" else 1.0)
        if status == "oom":
            trials.append(search_row(tid, "screen", cfg, status, peak_mem_mb=79.2 * 1024, feasible=False))
            continue
        if status == "error":
            error = "Traceback (most recent call last):\n...\nBackendCompilerFailed: triton autotune <failed>"
            trials.append(search_row(tid, "screen", cfg, status, error=error, feasible=False))
            continue
        row = search_row(tid, "screen", cfg, status, tokens_per_s=tps, peak_mem_mb=mem) | _gpu_fields(
            rng, cfg, tps
        )
        if status == "stopped":
            row["tokens_per_s"] = tps * 0.4
        trials.append(row)
    screen = {t["id"]: t for t in trials if t["phase"] == "screen"}
    # Loss checks in two rounds; screen-1 (no compile) shares screen-0's loss-relevant knobs.
    checks = [("screen-2", 0), ("screen-0", 0), ("screen-5", 1), ("screen-10", 1), ("screen-7", 1)]
    for n, (sid, round_no) in enumerate(checks):
        cfg = screen[sid]["config"]
        nan = sid == "screen-10"
        loss = None if nan else _loss(cfg)
        check = search_row(
            f"loss_check_{round_no}-{n}",
            f"loss_check_{round_no}",
            cfg,
            "nan" if nan else "ok",
            tokens_per_s=_speed(cfg) * 0.45,
            val_loss=loss,
            peak_mem_mb=screen[sid]["peak_mem_mb"],
            feasible=not nan and loss <= limit,
            screen_id=sid,
        ) | _gpu_fields(rng, cfg, _speed(cfg) * 0.45, shared=True)
        trials.append(check)
        for t in screen.values():  # the check's verdict stands for configs differing only in speed knobs
            same = {k: v for k, v in t["config"].items() if k not in SPEED_ONLY_KNOBS}
            mine = {k: v for k, v in cfg.items() if k not in SPEED_ONLY_KNOBS}
            if same == mine and t["status"] not in ("oom", "error"):
                t.update(val_loss=loss, feasible=check["feasible"], loss_checked_by=check["id"])
    for t in screen.values():  # configs changing only speed knobs inherit the baseline's loss
        if set(t["config"]) <= SPEED_ONLY_KNOBS:
            t.update(val_loss=1.5, feasible=True, loss_checked_by="baseline")
    remeasure = []
    for fid, cfg in (("baseline", {}), ("screen-0", WINNER_CFG), ("screen-1", screen["screen-1"]["config"])):
        for r in range(3):
            tps = _speed(cfg) * rng.uniform(0.985, 1.015)
            remeasure.append(
                search_row(
                    f"remeasure-{len(remeasure)}", "remeasure", cfg, tokens_per_s=tps, finalist=fid, repeat=r
                )
                | {"peak_mem_mb": 480.0 if fid == "baseline" else 9200.0}
                | _gpu_fields(rng, cfg, tps)
            )
    trials += remeasure
    win_runs = sorted(r["tokens_per_s"] for r in remeasure if r["finalist"] == "screen-0")
    base_runs = sorted(r["tokens_per_s"] for r in remeasure if r["finalist"] == "baseline")
    return _gated_with_twins_and_costs(trials) | {
        "baseline": {
            "config": BASE_CFG,
            "tokens_per_s": base_runs[1],
            "tokens_per_s_full_run": trials[0]["tokens_per_s"],
            "val_loss": 1.5,
            "loss_execution": trials[0]["execution"],
        },
        "best": {
            "id": "screen-0",
            "config": WINNER_CFG,
            "tokens_per_s": win_runs[1],
            "tokens_per_s_spread": [win_runs[0], win_runs[2]],
            "val_loss": _loss(WINNER_CFG),
            "speedup": round(win_runs[1] / base_runs[1], 3),
            "warmup_s": _warmup(WINNER_CFG, True),
            "time_to_train_s": time_to_train(_warmup(WINNER_CFG, True), PLANNED, win_runs[1]),
        },
        "trials": trials,
        "loss_limit": {"baseline_loss": 1.5, "tolerance": 0.05, "mode": "absolute", "limit": limit},
        "hardware": {"gpus": 1, "cuda": True, "gpu": "NVIDIA H100 80GB HBM3", "gpu_mem_mb": 81559},
        "versions": {"python": "3.12.3", "torch": "2.11.0+cu130", "ray": "2.60.0", "optuna": "5.0.0"},
        "timings": dict(TIMINGS),
        "selection": {
            "reasons": [
                "screen-0 and screen-1 overlap within their spread: chose screen-0, the fastest",
                "screen-0 uses 3% less energy per token than screen-1",
            ],
            "telemetry_changed_decision": False,
            "rejected": {"screen-1": "slower: screen-1's range does not overlap screen-0's"},
        },
        "measurement": {
            "screen_steps": 20,
            "timing_warmup_steps": 5,
            "repeats": 3,
            "loss_check_gpu_fraction": 0.25,
            "screen": SHARED_SPEED_RUNS,
            "loss_check": "shared GPU (fractions), full token budget, val loss only; each trained with the "
            "fastest execution screened for its loss knobs (the baseline too)",
            "remeasure": f"{SHARED_SPEED_RUNS}; repeated; medians",
        },
        "notices": ["compile mode reduce-overhead dropped: CUDA graphs do not support the fused scan"],
        "telemetry": {
            "available": True,
            "notice": None,
            "timelines": {
                "remeasure-3": _timeline(rng, 96, 560, 9200, (47, 69), throttle_from=100),
                "remeasure-0": _timeline(rng, 22, 150, 480, (38, 42)),
            },
        },
        "command": "python -m tuner.search --config configs/default.yaml --out out/h100",
        "best_yaml": "out/h100/best.yaml",
        "gpu_usage": gpu_usage(TIMINGS, {0: 86.0}),
    }


TIMINGS = {
    "hardware": 4.1, "baseline": 412.0, "probe": 35.0, "screen": 611.0, "loss_check": 1290.0, "remeasure": 240.0,
    "total": 2592.1,
}  # fmt: skip
# Each phase's share of a GPU's busiest utilisation (the probe trains one step per batch; loss runs pack).
PHASE_LOAD = {"probe": 0.3, "screen": 1.0, "loss_check": 0.9, "remeasure": 0.7}


def usage_stats(util: float, mem_mb: float, span_s: float, covered: float = 1.0) -> dict:
    """One GPU over one span as summary.json's `gpu_usage` holds it: 5 readings a second."""
    return {
        "span_s": span_s, "samples": int(span_s * 5 * covered), "covered_s": span_s * covered,
        "util_mean": util, "util_median": min(100.0, util + 4), "mem_util_mean": util * 0.6,
        "mem_used_mean_mb": mem_mb, "mem_used_median_mb": mem_mb * 1.1, "mem_used_peak_mb": mem_mb * 1.5,
    }  # fmt: skip


def gpu_usage(timings: dict[str, float], busiest: dict[int, float], node_id: str = NODE_ID) -> list[dict]:
    """Each GPU's use per phase and over the search, as a search on `node_id` records it; `busiest`: GPU
    index -> its utilisation in the screen, other phases a share of it (PHASE_LOAD)."""
    out = []
    for gpu, util in busiest.items():
        spans = {
            p: usage_stats(util * PHASE_LOAD[p], 9000.0 * PHASE_LOAD[p], timings[p]) for p in USAGE_PHASES
        }
        total = sum(timings[p] for p in USAGE_PHASES)
        mean = sum(spans[p]["util_mean"] * timings[p] for p in USAGE_PHASES) / total
        spans[SEARCH] = usage_stats(mean, 7000.0, total)
        out.append({"node_id": node_id, "gpu": gpu, "name": "NVIDIA H100 80GB HBM3", "spans": spans})
    return out


def on_two_gpus(summary: dict, gpu1_factor: float = 1.0) -> dict:
    """The search on a host with two GPUs: the re-measure's repeats alternate between GPU 0 and GPU 1 (runs
    on GPU 1 `gpu1_factor` times as fast), each GPU's use per phase (GPU 1 less busy), and the population
    tuner.telemetry.gpus finds in those repeats."""
    out = copy.deepcopy(summary)
    out["hardware"] = {**out["hardware"], "gpus": 2}
    remeasured = [t for t in out["trials"] if t["phase"] == "remeasure"]
    for n, t in enumerate(remeasured):
        t["gpu"] = n % 2
        t["tokens_per_s"] *= gpu1_factor if t["gpu"] else 1.0
    for f in out.get("finalists", []):
        f["runs"] = [t["tokens_per_s"] for t in remeasured if t["finalist"] == f["id"]]
    population = gpu_population(TrialRow.model_validate(t) for t in remeasured)
    out["gpu_population"] = [p.model_dump(mode="json") for p in population]
    out["gpu_usage"] = gpu_usage(out["timings"], {0: 88.0, 1: 41.0})
    return out


SHARED_SPEED_RUNS = (
    "up to 4 runs share the GPUs while they compile and warm up; their timed windows take turns, one per GPU "
    "at a time"
)
PLANNED = 200_000_000
CACHE = "out/h100/compile-cache"


def _warmup(cfg: dict, warm: bool) -> float:
    """Compile + warm-up seconds: eager ~2 s, compile default ~50 s cold, max-autotune minutes; a warm cache
    cuts a compile to a fraction."""
    compile_s = {"none": 0.0, "default": 48.0, "max-autotune": 210.0}[cfg.get("compile", "none")]
    return round(2.0 + compile_s * (0.25 if warm else 1.0), 1)


def _execution(cfg: dict) -> dict:
    full = BASE_CFG | cfg
    return {k: full[k] for k in sorted(SPEED_ONLY_KNOBS) if k in full}


def _gated_with_twins_and_costs(trials: list[dict]) -> dict:
    """What a search records since the timing gate and the twins: each speed run's wait at its GPU's gate
    and the compiles beside its timed window, each loss run's borrowed execution (the baseline's from
    screen-4: compile=default, num_workers=4), the finalists' costs and the break-even per compile mode."""
    screen = {t["id"]: t for t in trials if t["phase"] == "screen"}
    for n, t in enumerate(trials):
        if t["phase"] in ("screen", "remeasure") and t["status"] in ("ok", "stopped"):
            warm = t["phase"] == "remeasure"
            beside = 0 if warm else n % 3  # the screen's compiles overlap timed windows; the re-measure's not
            t |= {
                "gate_wait_s": 0.3 * (n % 4),
                "compiling_beside": beside,
                "warmup_s": _warmup(t["config"], warm),
            }
        elif t["phase"].startswith("loss_check"):
            t |= {"execution": _execution(t["config"]), "twin_of": t["screen_id"]}
    twin = _execution(screen["screen-4"]["config"])
    trials[0] |= {"execution": twin, "twin_of": "screen-4", "warmup_s": _warmup(twin, False)}
    finalists = []
    for fid, cfg in (("screen-0", WINNER_CFG), ("screen-1", screen["screen-1"]["config"]), ("baseline", {})):
        runs = [t["tokens_per_s"] for t in trials if t.get("finalist") == fid]
        warm, median = _warmup(cfg, True), statistics.median(runs)
        finalists.append(
            {
                "id": fid, "config": cfg, "runs": runs, "val_loss": _loss(cfg), "feasible": True,
                "warmup_s": warm, "warmup_cold_s": _warmup(cfg, False) if fid != "baseline" else None,
                "time_to_train_s": time_to_train(warm, PLANNED, median),
            }
        )  # fmt: skip
    win, eager = screen["screen-0"], screen["screen-1"]
    cold_w, warm_w = _warmup(WINNER_CFG, False), _warmup(WINNER_CFG, True)
    cold_e, warm_e = _warmup(eager["config"], False), _warmup(eager["config"], True)
    break_even = {
        "compile": "default", "config_id": "screen-0", "versus_id": "screen-1",
        "tokens_per_s": win["tokens_per_s"], "versus_tokens_per_s": eager["tokens_per_s"],
        "warmup_cold_s": cold_w, "warmup_warm_s": warm_w,
        "tokens_cold": break_even_tokens(cold_w, win["tokens_per_s"], cold_e, eager["tokens_per_s"]),
        "tokens_warm": break_even_tokens(warm_w, win["tokens_per_s"], warm_e, eager["tokens_per_s"]),
    }  # fmt: skip
    return {
        "finalists": finalists,
        "break_even": [break_even],
        "planned_tokens": PLANNED,
        "compile_cache": CACHE,
    }


def without_telemetry(summary: dict) -> dict:
    """The same search as a CPU run records it: no GPU, no telemetry fields, no timelines."""
    out = copy.deepcopy(summary)
    out["hardware"] = {"gpus": 0, "cuda": False, "cpus": 2}
    out["telemetry"] = {"available": False, "notice": None, "timelines": {}}
    out["gpu_usage"], out["gpu_population"] = [], []
    gpu_keys = set(_gpu_fields(random.Random(0), {}, 1.0))
    out["trials"] = [{k: v for k, v in t.items() if k not in gpu_keys} | {"gpu": None} for t in out["trials"]]
    return out


def without_best(summary: dict) -> dict:
    out = copy.deepcopy(summary) | {"best": None}
    out["selection"] = {"reasons": ["no finalist beat the baseline beyond noise"], "rejected": {}}
    return out
