"""report.md rendered from a synthetic summary.json: the answer, the table, the reasons, the commands."""

from __future__ import annotations

import copy
import json
import statistics

from tests.factories import legacy_summary, on_two_gpus, synthetic_summary
from trainables.common import progress
from trainables.workloads.flops import peak_flops
from tuner import report
from tuner.decide.costs import break_even_tokens, time_to_train
from tuner.report import fmt_mem, fmt_seconds, render_html, render_markdown, write_reports
from tuner.report.fmt import DASH
from tuner.report.view import View

HEADER = "| Config | Batch | Workers | Precision | Compile | Kernels | Tok/s | Warm-up | VRAM | Loss | vs baseline |"
BASE_CFG = {"batch_size": 8, "num_workers": 0, "precision": "fp32", "compile": "none", "kernels": "torch"}


def trial(tid, phase, config, status="ok", tps=None, loss=None, mem=None, feasible=None, **extra) -> dict:
    row = {
        "id": tid,
        "phase": phase,
        "config": config,
        "status": status,
        "feasible": feasible,
        "tokens_per_s": tps,
        "val_loss": loss,
        "peak_mem_mb": mem,
        "compile_s": None,
        "node": "n0",
        "gpu": 0,
        "wall_s": 10.0,
        "error": None,
    }
    return row | extra


WINNER_CFG = {"batch_size": 128, "precision": "bf16", "compile": "default"}
SUMMARY = {
    "baseline": {"config": BASE_CFG, "tokens_per_s": 30000.0, "val_loss": 1.5000},
    "best": {
        "id": "cfg-7",
        "config": WINNER_CFG,
        "tokens_per_s": 55200.0,
        "tokens_per_s_spread": [54000.0, 56000.0],
        "val_loss": 1.5200,
        "speedup": 1.84,
    },
    "trials": [
        trial("baseline", "baseline", BASE_CFG, tps=29000.0, loss=1.5, mem=512, feasible=True),
        trial("cfg-7", "screen", WINNER_CFG, tps=56000.0, mem=6 * 1024, feasible=True, loss=1.52),
        trial(
            "cfg-3", "screen", {"batch_size": 128, "precision": "bf16"}, tps=54000.0, mem=6000, feasible=True
        ),
        trial("cfg-9", "screen", {"batch_size": 4096}, status="oom", mem=79 * 1024, feasible=False),
        trial("cfg-4", "screen", {"batch_size": 512, "lr": 3e-3}, tps=70000.0, mem=20000, feasible=False),
        trial("cfg-5", "screen", {"lr": 1e-2}, tps=31000.0, feasible=False),
        trial(
            "cfg-10",
            "screen",
            {"lr": 1e-2, "compile": "default"},
            tps=32000.0,
            feasible=False,
            loss_checked_by="lc-5",
        ),  # fmt: skip
        trial("cfg-6", "screen", {"num_workers": 4}, status="stopped", tps=9000.0, feasible=True),
        trial("cfg-8", "screen", {"batch_size": 16}, tps=33000.0, feasible=None),
        trial(
            "cfg-2", "screen", {"batch_size": 64}, status="error", error="Traceback ...\nRuntimeError: boom"
        ),
        trial("lc-7", "loss_check", {"batch_size": 128, "precision": "bf16"}, tps=20000.0, loss=1.52),
        trial(
            "lc-4", "loss_check", {"batch_size": 512, "lr": 3e-3}, tps=25000.0, loss=1.6123, feasible=False
        ),
        trial("lc-5", "loss_check", {"lr": 1e-2}, status="nan", feasible=False),
        *(
            trial(f"cfg-7/r{i}", "remeasure", WINNER_CFG, tps=t)
            for i, t in enumerate((55200.0, 54000.0, 56000.0))
        ),
        *(
            trial(f"cfg-3/r{i}", "remeasure", {"batch_size": 128, "precision": "bf16"}, tps=t)
            for i, t in enumerate((50000.0, 49000.0, 51000.0))
        ),  # fmt: skip
    ],
    "loss_limit": {"baseline_loss": 1.5, "tolerance": 0.05, "mode": "absolute", "limit": 1.55},
    "hardware": {"gpu": "NVIDIA H100 80GB HBM3", "gpus": 1},
    "versions": {"torch": "2.11.0", "ray": "2.60.0"},
    "timings": {
        "baseline": 300.0,
        "screen": 600.0,
        "loss_check": 1200.0,
        "remeasure": 125.0,
        "total": 2225.0,
    },
    "selection": {
        "reasons": ["cfg-7 and cfg-3 overlap (...); chose cfg-7: the fastest"],
        "telemetry_changed_decision": False,
        "rejected": {"cfg-3": "slower: cfg-3 50,000 tok/s [49,000–51,000] does not overlap cfg-7"},
    },
    "command": "python -m tuner.search --config configs/default.yaml --out OUT",
    "best_yaml": "OUT/best.yaml",
    "measurement": {"screen_steps": 20, "repeats": 3, "loss_check_gpu_fraction": 0.5},
}


def rendered(summary: dict) -> str:
    return render_markdown(json.loads(json.dumps(summary)))  # what a saved summary.json gives back


def table_rows(text: str) -> list[list[str]]:
    lines = text.splitlines()
    start = lines.index(HEADER) + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_answer_names_the_winner_speedup_and_loss_against_the_limit():
    text = rendered(SUMMARY)
    assert text.startswith("# ")
    answer = text.split("\n\n")[1]
    assert "**cfg-7**" in answer and "1.84x" in answer
    assert "1.5200" in answer and "1.5000" in answer and "limit 1.5500" in answer


def test_table_has_baseline_then_winner_then_by_speed_then_failed():
    rows = table_rows(rendered(SUMMARY))
    labels = [r[0] for r in rows]
    assert labels[0] == "baseline" and labels[1] == "**cfg-7** (winner)"
    # exclusive re-measure medians rank cfg-3 (50,000), not its shared-GPU loss-check speed
    assert labels[2:] == [
        *("cfg-4", "cfg-3", "cfg-8", "cfg-10", "cfg-6 (stopped)"),
        *("cfg-9 (oom)", "cfg-5 (nan)", "cfg-2 (error)"),  # failed last, in the order they ran
    ]
    base, win, fast_infeasible, cfg3 = rows[:4]
    assert base == [
        "baseline",
        "8",
        "0",
        "fp32",
        "none",
        "torch",
        "30,000",
        "—",
        "512 MiB",
        "1.5000",
        "1.00x",
    ]
    assert win == [
        "**cfg-7** (winner)",
        "128",
        "0",
        "bf16",
        "default",
        "torch",
        "55,200",
        "—",  # no warm-up recorded (a summary from before the Warm-up column)
        "6.0 GiB",
        "1.5200",
        "1.84x",
    ]
    # a screen figure over the baseline's of the same kind (its own full run: this summary is from before
    # loss runs borrowed an execution, so that run timed its speed), not over the re-measured 30,000
    assert fast_infeasible[-2:] == ["1.6123 (over limit)", "2.41x"]
    assert cfg3[6] == "50,000" and cfg3[-1] == "1.67x"
    assert rows[labels.index("cfg-8")][9] == "—"  # never loss-checked
    assert rows[labels.index("cfg-9 (oom)")][8] == "79.0 GiB"


def test_a_config_faster_than_the_answer_but_never_loss_checked_is_not_called_slower():
    # the Hugging Face example on an H200: batch 32 screened 1.86x the answer; loss_check_top was used up
    summary = json.loads(json.dumps(SUMMARY))
    cfg8 = next(t for t in summary["trials"] if t["id"] == "cfg-8")
    cfg8["tokens_per_s"] = 90000.0
    why = rendered(summary).split("## Why others were rejected")[1].split("\n## ")[0]
    assert "- cfg-8: its loss was never checked (search.loss_check_top reached): 90,000 tok/s" in why


def test_winner_diff_and_rejection_reasons():
    text = rendered(SUMMARY)
    assert "- batch_size: 8 -> 128" in text and "- precision: fp32 -> bf16" in text
    assert "- compile: none -> default" in text
    why = text.split("## Why others were rejected")[1].split("\n## ")[0]
    assert "- cfg-9: out of memory (peak 79.0 GiB)" in why
    assert "- cfg-5: the loss became NaN in its loss check" in why
    assert "- cfg-10: loss check failed (loss run of lc-5)" in why  # shares cfg-5's loss-relevant knobs
    assert "- cfg-4: val loss 1.6123 over the limit 1.5500 by 0.0623" in why
    assert "- cfg-3: slower: cfg-3 50,000 tok/s" in why
    assert "- cfg-6: stopped early" in why
    assert "- cfg-8: slower (33,000 tok/s in the screen): its loss was never checked" in why
    assert "- cfg-2: error: RuntimeError: boom" in why
    assert "- cfg-7:" not in why and "- baseline:" not in why


def test_measurement_command_and_timings():
    text = rendered(SUMMARY)
    assert "20 steady-state steps" in text and "3 runs asked of each" in text and "shared GPU" in text
    assert "- loss_check_gpu_fraction: 0.5" in text
    assert "python -m trainables.train --config OUT/best.yaml" in text
    assert SUMMARY["command"] in text
    assert "| loss_check | 20m 00s |" in text and "| total | 37m 05s |" in text
    assert "- gpu: NVIDIA H100 80GB HBM3" in text
    notice = "batch probe skipped on CPU without memory_cap_mb"
    assert f"- {notice}" in rendered(SUMMARY | {"notices": [notice]})


def test_no_best_says_the_baseline_stays():
    summary = copy.deepcopy(SUMMARY) | {"best": None}
    summary["selection"] = {
        "reasons": ["no feasible finalist"],
        "telemetry_changed_decision": False,
        "rejected": {},
    }
    text = rendered(summary)
    assert "No config beat the baseline within tolerance" in text
    assert "winner" not in text.split("## Configs compared")[1].split("## ")[0]
    assert "## What the winner changes" not in text
    rows = table_rows(text)
    assert rows[0][0] == "baseline" and rows[1][0] == "cfg-4"
    assert "- cfg-7: re-measured at 55,200 tok/s but not chosen" in text
    assert "- cfg-8: slower (33,000 tok/s in the screen): its loss was never checked" in text


def test_best_equal_to_the_baseline_is_no_improvement():
    summary = copy.deepcopy(SUMMARY)
    summary["best"] = {
        "id": "baseline",
        "config": {"precision": "fp32"},
        "tokens_per_s": 30000.0,
        "speedup": 1.0,
    }
    assert "No config beat the baseline" in rendered(summary)


def test_minimal_summary_renders():
    text = render_markdown({"baseline": {"config": {}, "tokens_per_s": None, "val_loss": None}, "best": None})
    assert HEADER in text and "No config beat the baseline" in text


def test_formatters():
    assert fmt_mem(812.4) == "812 MiB" and fmt_mem(3 * 1024 + 205) == "3.2 GiB" and fmt_mem(None) == "—"
    assert fmt_seconds(59.6) == "1m 00s" and fmt_seconds(7325) == "2h 02m 05s" and fmt_seconds(4) == "4s"
    assert fmt_seconds(None) == "—" and fmt_seconds(float("nan")) == "—"
    # progress lines (the loop's ETA, a phase's, the stall notice) read a duration the same way, 0s at worst
    assert progress.fmt_seconds(7325) == "2h 02m 05s" and progress.fmt_seconds(-3.0) == "0s"
    # one formatter for both: an ETA that is not known yet reads as the reports' dash, not an OverflowError
    assert fmt_seconds is progress.fmt_seconds and progress.fmt_seconds(float("inf")) == DASH


def test_write_reports_writes_markdown(tmp_path):
    written = write_reports(tmp_path / "out", SUMMARY)
    md = tmp_path / "out" / "report.md"
    assert md in written and md.read_text() == render_markdown(SUMMARY)


def test_write_reports_writes_the_html_through_render_html(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "render_html", lambda summary: f"<p>{summary.best.id}</p>")
    written = write_reports(tmp_path, SUMMARY)
    assert (tmp_path / "report.html").read_text() == "<p>cfg-7</p>" and tmp_path / "report.html" in written


# --- a summary as the search writes it now: gated speed runs, loss runs on their twin's execution, costs ----

PLANNED = 50_000_000
CACHE = "/data/out/compile-cache"
SCREEN_GATE = {  # screen id -> (gate wait s, other runs compiling on its GPU while it was timed, warm-up s)
    "cfg-7": (2.5, 2, 48.0),
    "cfg-3": (0.8, 1, 6.0),
    "cfg-4": (0.0, 0, 7.0),
    "cfg-11": (1.5, 0, 95.0),
}
EAGER = {"compile": "none", "kernels": "torch", "num_workers": 0}  # the baseline config's speed knobs


def _remeasure(fid: str, config: dict, speeds: tuple, warmups: tuple) -> list[dict]:
    return [
        trial(f"{fid}/r{i}", "remeasure", config, tps=t, finalist=fid, warmup_s=w, gate_wait_s=0.4, compiling_beside=0)
        for i, (t, w) in enumerate(zip(speeds, warmups))
    ]  # fmt: skip


def _finalist(fid: str, config: dict, runs: list[dict], cold: float | None, loss: float) -> dict:
    speeds, warm = [r["tokens_per_s"] for r in runs], statistics.median(r["warmup_s"] for r in runs)
    median = statistics.median(speeds)
    return {
        "id": fid, "config": config, "runs": speeds, "val_loss": loss, "feasible": True,
        "warmup_s": warm, "warmup_cold_s": cold, "time_to_train_s": time_to_train(warm, PLANNED, median),
    }  # fmt: skip


def current_summary() -> dict:
    """SUMMARY as a search writes it now. The baseline's loss run trained with the execution of cfg-11 (its
    twin: compile=reduce-overhead), the winner's loss run with its own (compile=default); speed runs waited
    at the timing gate, some screen runs beside other runs' compiles; finalists' costs and break-evens."""
    out = copy.deepcopy(SUMMARY)
    twin = {**EAGER, "compile": "reduce-overhead"}
    base_row = trial("baseline", "baseline", {}, tps=41000.0, loss=1.5007, mem=512, feasible=True)
    base_row |= {"execution": twin, "twin_of": "cfg-11", "warmup_s": 95.0}  # its loss run, not a speed
    trials = [base_row]
    for t in out["trials"][1:]:
        if t["id"] == "lc-7":  # the loss check of cfg-7's loss knobs trains the fastest of them: cfg-7 itself
            t |= {"config": WINNER_CFG, "screen_id": "cfg-7", "twin_of": "cfg-7", "feasible": True}
            t["execution"] = {**EAGER, "compile": "default"}
        elif t["id"] == "lc-4":
            t |= {"screen_id": "cfg-4", "twin_of": "cfg-4", "execution": dict(EAGER)}
        elif t["id"] == "cfg-3":
            t |= {"val_loss": 1.52, "loss_checked_by": "lc-7"}
        wait, beside, warmup = SCREEN_GATE.get(t["id"], (0.0, 0, 3.0))
        if t["phase"] == "screen" and t["status"] not in ("oom", "error"):
            t |= {"gate_wait_s": wait, "compiling_beside": beside, "warmup_s": warmup}
        if t["phase"] != "remeasure":
            trials.append(t)
    cfg11 = {"compile": "reduce-overhead"}
    trials.append(
        trial("cfg-11", "screen", cfg11, tps=40000.0, feasible=True, loss=1.5007, loss_checked_by="baseline")
    )
    trials[-1] |= {"gate_wait_s": 1.5, "compiling_beside": 0, "warmup_s": 95.0}
    runs = {
        "baseline": _remeasure("baseline", {}, (29800.0, 30000.0, 30200.0), (2.0, 2.1, 1.9)),
        "cfg-7": _remeasure("cfg-7", WINNER_CFG, (55200.0, 54000.0, 56000.0), (12.0, 13.0, 12.5)),
        "cfg-3": _remeasure("cfg-3", {"batch_size": 128, "precision": "bf16"}, (50000.0, 49000.0, 51000.0), (5.5,) * 3),
    }  # fmt: skip
    out["trials"] = trials + [r for rows in runs.values() for r in rows]
    out["baseline"] |= {"val_loss": 1.5007, "tokens_per_s_full_run": 41000.0, "loss_execution": twin}
    out["finalists"] = [
        _finalist("baseline", {}, runs["baseline"], None, 1.5007),
        _finalist("cfg-7", WINNER_CFG, runs["cfg-7"], 48.0, 1.52),
        _finalist("cfg-3", {"batch_size": 128, "precision": "bf16"}, runs["cfg-3"], 6.0, 1.52),
    ]
    winner = out["finalists"][1]
    out["best"] |= {"warmup_s": winner["warmup_s"], "time_to_train_s": winner["time_to_train_s"]}
    out["break_even"] = [
        {
            "compile": "default", "config_id": "cfg-7", "versus_id": "cfg-3",
            "tokens_per_s": 56000.0, "versus_tokens_per_s": 54000.0, "warmup_cold_s": 48.0, "warmup_warm_s": 12.5,
            "tokens_cold": break_even_tokens(48.0, 56000.0, 6.0, 54000.0),
            "tokens_warm": break_even_tokens(12.5, 56000.0, 5.5, 54000.0),
        },
        {
            "compile": "reduce-overhead", "config_id": "cfg-11", "versus_id": "cfg-3",
            "tokens_per_s": 40000.0, "versus_tokens_per_s": 54000.0, "warmup_cold_s": 95.0, "warmup_warm_s": None,
            "tokens_cold": None, "tokens_warm": None,
        },
    ]  # fmt: skip
    out |= {"planned_tokens": PLANNED, "compile_cache": CACHE}
    out["measurement"] |= {
        "screen": "up to 4 runs share the GPUs while they compile and warm up; their timed windows take turns, "
        "one per GPU at a time",
        "loss_check": "shared GPU (fractions), full token budget, val loss only; each trained with the "
        "fastest execution screened for its loss knobs (the baseline too)",
        "remeasure": "up to 4 runs share the GPUs while they compile and warm up; their timed windows take "
        "turns, one per GPU at a time; repeated; medians",
    }
    return out


CURRENT = current_summary()


def section(text: str, title: str) -> str:
    return text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_table_shows_warm_up_and_the_execution_each_loss_was_trained_with():
    rows = {r[0]: r for r in table_rows(rendered(CURRENT))}
    base, win, cfg3, cfg4 = rows["baseline"], rows["**cfg-7** (winner)"], rows["cfg-3"], rows["cfg-4"]
    assert base[6:] == [
        "30,000", "2.0s", "512 MiB", "1.5007, trained with compile=reduce-overhead (as cfg-11 runs)", "1.00x"
    ]  # fmt: skip
    assert win[6:9] == ["55,200", "12s", "6.0 GiB"]  # the finalist's warm figure: median of its re-measures
    assert win[9] == "1.5200, trained with compile=default"  # its own loss run: no one else's execution
    assert cfg3[7] == "5.5s" and cfg3[9] == "1.5200, trained with compile=default (as cfg-7 runs)"
    assert cfg4[7] == "7.0s"  # no re-measure: its screen run's compile + warm-up
    assert cfg4[9] == "1.6123 (over limit), trained with the baseline config's execution"
    assert rows["cfg-11"][9] == "1.5007, trained with compile=reduce-overhead"  # the baseline's
    assert rows["cfg-8"][9] == "—"  # never loss-checked: no execution to name


def test_the_answer_quotes_the_baseline_loss_its_limit_was_built_on():
    """With two seeds the limit rests on their mean; the answer quotes that, not the first seed's run."""
    seeded = {"baseline_loss": 1.51, "tolerance": 0.05, "mode": "absolute", "limit": 1.56}
    seeded |= {"seed_losses": [1.5007, 1.5193], "noise": 0.0186}
    answer = rendered(CURRENT | {"loss_limit": seeded}).split("\n\n")[1]
    assert (
        "Its validation loss is 1.5200 against the baseline's 1.5100 (limit 1.5600 = baseline 1.5100"
        in answer
    )
    one_seed = rendered(CURRENT).split("\n\n")[1]
    assert "against the baseline's 1.5007 (limit 1.5500 = baseline 1.5000" in one_seed  # its one loss run's


def test_answer_names_the_executions_and_the_time_to_train():
    answer = rendered(CURRENT).split("\n\n")[1]
    assert answer.startswith("**cfg-7** is the fastest config within tolerance: 55,200 tok/s")
    assert (
        "Its validation loss is 1.5200 against the baseline's 1.5007 (limit 1.5500 = baseline 1.5000 + 0.05, "
        "the absolute tolerance); "
        "the winner's was trained with compile=default, the baseline's was trained with "
        "compile=reduce-overhead (as cfg-11 runs)."
    ) in answer
    ttt = fmt_seconds(CURRENT["best"]["time_to_train_s"])
    assert answer.endswith(
        f"The planned run (50,000,000 tokens) takes ~{ttt} with cfg-7, 12s of it compile + warm-up."
    )
    stays = rendered(CURRENT | {"best": None})
    assert "Its loss run was trained with compile=reduce-overhead (as cfg-11 runs)." in stays
    assert "takes ~27m 49s with the baseline, 2.0s of it compile + warm-up." in stays


def test_what_the_planned_run_costs():
    costs = section(rendered(CURRENT), "What the planned run costs")
    assert "The planned run is 50,000,000 tokens (train.tokens)." in costs
    assert "as a run of best.yaml pays it (it reuses them)" in costs
    lines = costs.splitlines()
    head = lines.index("| Finalist | Tok/s | Warm-up cold | Warm-up warm | Time to train |")
    assert lines[head + 2 : head + 5] == [
        f"| **cfg-7** (winner) | 55,200 | 48s | 12s | {fmt_seconds(12.5 + PLANNED / 55200)} |",
        f"| cfg-3 | 50,000 | 6.0s | 5.5s | {fmt_seconds(5.5 + PLANNED / 50000)} |",
        f"| baseline | 30,000 | — | 2.0s | {fmt_seconds(2.0 + PLANNED / 30000)} |",
    ]
    assert "### Break-even" in costs and "fastest feasible eager config" in costs
    cold, warm = CURRENT["break_even"][0]["tokens_cold"], CURRENT["break_even"][0]["tokens_warm"]
    assert (
        f"| default | cfg-7 | 56,000 | cfg-3: 54,000 tok/s | 48s / 12s | {cold:,.0f} tokens "
        f"({cold / PLANNED:.3g}x the planned run) | {warm:,.0f} tokens ({warm / PLANNED:.3g}x the planned run) |"
    ) in costs
    assert (
        "| reduce-overhead | cfg-11 | 40,000 | cfg-3: 54,000 tok/s | 1m 35s / — | never: not faster than eager |"
        in costs
    )


def test_how_each_number_was_measured_says_what_shared_the_gpu():
    text = rendered(CURRENT)
    measured = section(text, "How each number was measured")
    assert "exclusive" not in text and "alone on a whole GPU" not in text
    assert (
        "Speed screen: each config ran 20 steady-state steps, timed after a few untimed warm-up steps (compile "
        "included); up to 4 runs share the GPUs while they compile and warm up; their timed windows take turns, "
        "one per GPU at a time; a run waited 2.5s at most for its turn at the gate, 0.0s at the median"
    ) in measured
    assert "other runs compiled on the GPU during 2 of 8 timed windows (up to 2 at once)" in measured
    assert "each timed window also waited until no other run on its GPU was compiling" in measured
    assert "no other run compiled on its GPU during any timed window" in measured  # the re-measure's
    assert (
        "Baseline: the configured run. Its Tok/s is the median of its re-measure runs (as configured)"
        in measured
    )
    assert "trained with compile=reduce-overhead (as cfg-11 runs) at 41,000 tok/s on a shared GPU" in measured
    assert "That execution is its twin's: the fastest screened config with the same loss knobs" in measured
    assert "screen compiles may overlap" in measured


def test_the_measurement_says_when_the_baseline_had_repeats_of_its_own():
    assert "every speed-up divides by it" not in section(rendered(CURRENT), "How each number was measured")
    more = {**CURRENT, "measurement": {**CURRENT["measurement"], "baseline_repeats": 6}}
    measured = section(rendered(more), "How each number was measured")
    assert (
        "the top feasible configs, 3 runs asked of each, and the baseline, 6 (every speed-up divides by it)"
        in measured
    )


def test_run_it_reuses_the_compile_cache():
    cached, uncached = (section(rendered(CURRENT | {"compile_cache": c}), "Run it") for c in (CACHE, None))
    assert "python -m trainables.train --config OUT/best.yaml" in cached and "compile_cache" not in uncached
    assert (
        f"best.yaml names the search's compile cache (`compile_cache: {CACHE}`), so this run reuses the "
        "Inductor/Triton kernels the search compiled and pays the warm compile + warm-up (~12s with them warm)"
    ) in cached


def test_a_shorter_planned_run_than_the_break_even_picks_the_config_that_finishes_first():
    summary = copy.deepcopy(CURRENT)
    first, fastest = summary["finalists"][2], summary["finalists"][1]
    why = (
        "the planned run (50,000,000 tokens) is shorter than cfg-7's break-even against cfg-3: cfg-3 finishes it "
        "in 1,006 s, cfg-7 in 1,018 s (compile + warm-up included)"
    )
    summary["best"] = {
        "id": "cfg-3", "config": first["config"], "tokens_per_s": 50000.0, "tokens_per_s_spread": [49000.0, 51000.0],
        "val_loss": 1.52, "speedup": 1.67, "warmup_s": first["warmup_s"], "time_to_train_s": first["time_to_train_s"],
    }  # fmt: skip
    summary["selection"] = {
        "reasons": [f"chose cfg-3: {why}"],
        "rejected": {"cfg-7": f"faster once running, but {why}"},
    }
    text = rendered(summary)
    answer = text.split("\n\n")[1]
    assert answer.startswith(
        "**cfg-3** finishes the planned run (50,000,000 tokens) first among the configs within tolerance (cfg-7 "
        "runs faster once warmed up, but does not earn back its longer compile + warm-up within the run): 50,000"
    )
    assert "fastest" not in answer and fastest["id"] != summary["best"]["id"]
    assert f"- chose cfg-3: {why}" in section(text, "How the winner was chosen")
    assert f"- cfg-7: faster once running, but {why}" in section(text, "Why others were rejected")
    assert table_rows(text)[1][0] == "**cfg-3** (winner)"
    assert "| **cfg-3** (winner) | 50,000 |" in section(text, "What the planned run costs")


def test_the_report_reads_the_finish_first_decision_from_its_field_not_from_the_rejection():
    """Older summaries kept the decision only in cfg-7's rejection (the test above); newer ones record it in
    `finishes_later`, whatever the sentences say."""
    summary = copy.deepcopy(CURRENT)
    summary["best"] = {**summary["best"], "id": "cfg-3", "config": summary["finalists"][2]["config"]}
    reworded = {"reasons": ["chose cfg-3"], "rejected": {"cfg-7": "finishes the planned run later"}}
    first = rendered({**summary, "selection": {**reworded, "finishes_later": "cfg-7"}}).split("\n\n")[1]
    assert (
        first.startswith("**cfg-3** finishes the planned run (50,000,000 tokens) first")
        and "(cfg-7 " in first
    )
    plain = rendered({**summary, "selection": {**reworded, "finishes_later": None}}).split("\n\n")[1]
    assert plain.startswith("**cfg-3** is the fastest config within tolerance")


def test_summaries_from_before_the_gate_and_the_costs_still_render():
    legacy = legacy_summary(CURRENT)
    text = rendered(legacy)
    assert "## What the planned run costs" not in text and "compile_cache" not in text
    assert "trained with" not in text  # no execution recorded: no claim about it
    measured = section(text, "How each number was measured")
    assert "exclusive GPU (or the whole CPU share)" in measured  # its own wording, true when it ran
    assert "Baseline: the seed config trained to the full token budget." in measured
    assert "timing gate" not in text and "waited" not in text
    assert render_html(legacy).startswith("<!DOCTYPE html>")


# --- issue #10: the knobs each config changes, CPU searches, node ids; issue #12: the GPUs section ----------

NODE_ID = "7088e154e66767fe6807b1254f2e09d538e0af71761592aeee82b61b"


def on_cpu(summary: dict) -> dict:
    """The search as a CPU run records it: no GPU in its hardware, no run placed on one."""
    out = copy.deepcopy(summary) | {"hardware": {"gpus": 0, "cuda": False, "cpus": 2}}
    out["trials"] = [t | {"gpu": None} for t in out["trials"]]
    return out


def test_the_knobs_each_config_changes_are_listed_under_the_table():
    compared = section(rendered(SUMMARY), "Configs compared")
    assert "- cfg-4: batch_size=512, lr=0.003" in compared  # lr has no column
    assert "- cfg-10: lr=0.01, compile=default" in compared
    assert "- **cfg-7** (winner): batch_size=128, precision=bf16, compile=default" in compared
    assert "- cfg-9 (oom): batch_size=4096" in compared and "- baseline" not in compared


def test_a_cpu_search_has_no_vram_column():
    text = rendered(on_cpu(SUMMARY))
    head = (
        "| Config | Batch | Workers | Precision | Compile | Kernels | Tok/s | Warm-up | Loss | vs baseline |"
    )
    assert head in text and "VRAM" not in text
    rows = {r[0]: r for r in _rows_under(text, head)}
    assert rows["baseline"][6:] == ["30,000", "—", "1.5000", "1.00x"]
    assert HEADER in rendered(SUMMARY)  # a GPU search keeps it


def _rows_under(text: str, head: str) -> list[list[str]]:
    lines = text.splitlines()
    start = lines.index(head) + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_a_node_id_is_cut_short_and_said_once():
    notice = f"GPU telemetry unavailable on node {NODE_ID}: nvmlInit failed (NVMLError); carrying on"
    summary = on_cpu(SUMMARY) | {"notices": [notice], "telemetry": {"available": False, "notice": notice}}
    text = rendered(summary)
    assert NODE_ID not in text and text.count(NODE_ID[:8]) == 1
    assert f"- GPU telemetry unavailable on node {NODE_ID[:8]}: nvmlInit failed" in text


def test_the_gpus_section_shows_each_gpus_use_per_phase_and_whether_they_agree():
    one = rendered(synthetic_summary())
    gpus = section(one, "GPUs").strip()
    assert gpus.startswith(f"How busy each GPU on node {NODE_ID[:8]} was in each phase")
    head = (
        "| Phase | GPU | Runs finished | Util mean | Util median | Memory mean | Memory median | Readings |"
    )
    assert head in gpus
    # 8 ok and 1 stopped screen runs, an oom and an error; the baseline's loss run counts in the loss check
    assert "| screen | GPU 0 | 9 (+2 failed) | 86% | 90% | 8.8 GiB | 9.7 GiB | 3,055 |" in gpus
    assert "| loss_check | GPU 0 | 5 (+1 failed) |" in gpus
    assert "| whole search | GPU 0 |" in gpus and "population" not in gpus  # one GPU: nothing to compare
    alike = rendered(on_two_gpus(synthetic_summary()))
    assert "| screen | GPU 1 | 0 | 41% |" in section(alike, "GPUs")
    assert "| remeasure | GPU 1 | 4 |" in section(alike, "GPUs")  # the runs the test moved to GPU 1
    assert "GPUs 0 and 1: one population. The same configs ran 0.2% faster on GPU 0" in section(alike, "GPUs")
    assert "one population" not in section(alike, "Notices")
    apart = rendered(on_two_gpus(synthetic_summary(), gpu1_factor=1.05))
    sentence = "GPUs 0 and 1 differ beyond the noise: the same configs ran 4.8% faster on GPU 1 than on GPU 0"
    assert sentence in section(apart, "GPUs") and sentence not in section(apart, "Notices")
    assert (
        "- GPUs 0 and 1 differ beyond the noise (4.8% apart at the median, noise band 2.5%), but the search "
        "pools their runs as one population: see GPUs." in section(apart, "Notices")
    )
    assert "| Config | GPU 0 | GPU 1 | Gap | Noise band | Verdict |" in section(apart, "GPUs")
    assert (
        "| all finalists (each vs its GPUs' mean) | -2.4% (5 runs) | +2.4% (4 runs) | 4.8% | 2.5% | differ |"
        in apart
    )
    assert "## GPUs" not in rendered(SUMMARY) and "## GPUs" not in rendered(on_cpu(SUMMARY))


# --- issue #33: every speed figure carries its trust mark; ratios only between figures of the same kind -----

CALM = {"cpu_own_cores": 1.9, "cpu_others_cores": 0.1, "cpu_count": 2}
BUSY = {"cpu_own_cores": 0.2, "cpu_others_cores": 1.8, "cpu_count": 2, "cpu_shared": True}
SMOKE_CFG = {"batch_size": 16, "precision": "fp32", "loader": "dataloader"}


def cpu_search(*screen: dict) -> dict:
    """A CPU search as one writes it now: the baseline's loss run borrowed its twin's execution (so its speed
    is no speed figure), every timed window recorded its CPU shares, the baseline re-measured at 20,000."""
    base = trial("baseline", "baseline", {}, tps=8000.0, loss=2.0, execution={}, **CALM)
    remeasure = [trial(f"remeasure-{i}", "remeasure", {}, tps=t, finalist="baseline", **CALM)
                 for i, t in enumerate((19000.0, 20000.0, 21000.0))]  # fmt: skip
    return on_cpu(
        {
            "baseline": {"config": SMOKE_CFG, "tokens_per_s": 20000.0, "val_loss": 2.0},
            "best": None,
            "trials": [base, *screen, *remeasure],
            "loss_limit": {"baseline_loss": 2.0, "tolerance": 0.05, "mode": "absolute", "limit": 2.05},
        }
    )


def cells(summary: dict) -> dict[str, dict[str, str]]:
    """Each table row by its config label, as column -> cell."""
    text = rendered(summary)
    head = next(line for line in text.splitlines() if line.startswith("| Config |"))
    columns = [c.strip() for c in head.strip("|").split("|")]
    return {row[0].split(" (")[0]: dict(zip(columns, row)) for row in _rows_under(text, head)}


def test_an_early_stopped_row_without_cpu_shares_is_marked_unjudged_and_the_note_says_why():
    # issue 33: a run stopped on a 1-step window has an interim report with no CPU shares
    stopped = trial("screen-1", "screen", {"batch_size": 64}, status="stopped", tps=1200.0)
    calm = trial("screen-2", "screen", {"batch_size": 32}, tps=30000.0, **CALM)
    busy = trial("screen-3", "screen", {"batch_size": 8}, tps=5000.0, **BUSY)
    screened_base = trial("screen-0", "screen", {}, tps=15000.0, **CALM)
    table = cells(cpu_search(screened_base, stopped, calm, busy))
    assert table["screen-1"]["Tok/s"] == "1,200 (unjudged)"
    assert table["screen-1"]["vs baseline"] == "0.08x (unjudged)"  # over the baseline's screen run
    assert table["screen-2"]["Tok/s"] == "30,000" and table["screen-2"]["vs baseline"] == "2.00x"
    assert table["screen-3"]["Tok/s"] == "5,000 (contended)"
    assert table["screen-3"]["vs baseline"] == "0.33x (contended)"
    text = rendered(cpu_search(screened_base, stopped, calm, busy))
    assert view_notes_in(text) == ["(contended):", "(unjudged):"]


def view_notes_in(text: str) -> list[str]:
    compared = section(text, "Configs compared")
    return [line.split(" ")[0] for line in compared.splitlines() if line.startswith("(")]


def test_a_search_that_never_judged_its_windows_marks_nothing():
    # summaries from before the CPU shares, without GPU telemetry: no figure is marked, none was judged
    table = cells(SUMMARY)
    assert not any("(unjudged)" in c for row in table.values() for c in row.values())


# --- issue 44: a headline figure timed only in contended windows is said so in the report's first lines ------

NOT_TRUSTED = "**Not trusted: the speed figures were taken while other processes kept the machine busy.**"


def contended_baseline(**fields) -> dict:
    """The smoke search under two busy loops as it writes summary.json now: nothing passed the loss check,
    and the baseline's every re-measure window was contended (707 tok/s where it runs 20,000 alone)."""
    slow_loss = trial("screen-1", "screen", {"batch_size": 32}, tps=30000.0, feasible=False, **CALM)
    summary = cpu_search(slow_loss)
    for t in summary["trials"]:
        if t["phase"] == "remeasure":
            t.update(BUSY, tokens_per_s=707.0)
    summary["baseline"]["tokens_per_s"] = 707.0
    base = {"id": "baseline", "runs": [707.0] * 3, "speed_trusted": False, "feasible": True}
    summary |= {
        "untrusted": True,
        "planned_tokens": 200_000,
        "finalists": [base | {"time_to_train_s": 283.0}],
    }
    return summary | fields


def test_a_baseline_kept_on_contended_figures_says_so_at_the_top_and_marks_them():
    top = rendered(contended_baseline()).split("\n## ")[0]
    assert NOT_TRUSTED in top
    assert "the baseline (707 tok/s (contended), val loss 2.0000) stays the answer" in top
    assert f"takes ~{fmt_seconds(283.0)} (contended) with the baseline" in top  # the time to train too
    # its answer stands on its loss check (exit 3), not refused on the figures (exit 4)
    assert "No config beat the baseline within tolerance" in top and "exit 4" not in top


def test_nothing_screened_on_contended_figures_says_so_at_the_top():
    why = "the screen finished 0 of 2 configs: they were stopped before a timed step"
    top = rendered(contended_baseline(nothing_screened=why)).split("\n## ")[0]
    assert NOT_TRUSTED in top and "it (707 tok/s (contended), val loss" in top and "(exit 6)" in top


def test_a_winner_over_a_baseline_timed_only_in_contended_windows_is_not_trusted_at_the_top():
    # the ratio's denominator contended while the winner's windows were calm: a summary.json that did not
    # say `untrusted` (written before issue 44) gets its report's first lines right all the same
    win = {"batch_size": 32}
    screened = trial("screen-1", "screen", win, tps=30000.0, feasible=True, loss=2.01, **CALM)
    again = [
        trial(f"remeasure-w{i}", "remeasure", win, tps=31000.0, finalist="screen-1", **CALM) for i in range(3)
    ]
    summary = cpu_search(screened, *again)
    for t in summary["trials"]:
        if t["phase"] == "remeasure" and t["finalist"] == "baseline":
            t.update(BUSY)
    summary["best"] = {
        "id": "screen-1",
        "config": win,
        "tokens_per_s": 31000.0,
        "val_loss": 2.01,
        "speedup": 1.55,
    }
    top = rendered(summary).split("\n## ")[0]
    assert NOT_TRUSTED in top
    assert "1.55x the baseline's 20,000 tok/s (contended)" in top
    assert "31,000 tok/s (contended)" not in top  # its own figure was timed in calm windows


def test_a_screen_figure_is_divided_by_the_baselines_screen_run_never_by_its_re_measure():
    screened_base = trial("screen-0", "screen", {}, tps=10000.0, **CALM)
    fast = trial("screen-1", "screen", {"batch_size": 64}, tps=25000.0, **CALM)
    summary = cpu_search(screened_base, fast)
    table = cells(summary)
    assert table["screen-1"]["vs baseline"] == "2.50x"  # 25,000 / 10,000, not / 20,000 (1.25x)
    assert table["baseline"]["Tok/s"] == "20,000" and table["baseline"]["vs baseline"] == "1.00x"
    entry = next(e for e in View.of(summary).entries if e.label == "screen-1")
    assert "the baseline config's own screen run (10,000 tok/s)" in entry.how["speedup"]


def test_a_screen_figure_has_no_ratio_where_the_baseline_config_was_not_screened():
    fast = trial("screen-1", "screen", {"batch_size": 64}, tps=25000.0, **CALM)
    summary = cpu_search(fast)
    assert cells(summary)["screen-1"]["vs baseline"] == "—"
    entry = next(e for e in View.of(summary).entries if e.label == "screen-1")
    assert "no ratio: the baseline config was not screened" in entry.how["speedup"]
    assert entry.speedup is None  # the chart draws no bar for it either


def test_a_re_measured_figure_is_divided_by_the_baselines_re_measured_median():
    screened_base = trial("screen-0", "screen", {}, tps=10000.0, **CALM)
    fast = trial("screen-1", "screen", {"batch_size": 64}, tps=25000.0, **CALM)
    again = [trial(f"remeasure-{i}", "remeasure", {"batch_size": 64}, tps=t, finalist="screen-1", **CALM)
             for i, t in ((3, 29000.0), (4, 30000.0), (5, 31000.0))]  # fmt: skip
    summary = cpu_search(screened_base, fast)
    summary["trials"] += again
    row = cells(summary)["screen-1"]
    assert row["Tok/s"] == "30,000" and row["vs baseline"] == "1.50x"  # 30,000 / 20,000


def test_the_html_table_marks_and_explains_an_unjudged_figure():
    stopped = trial("screen-1", "screen", {"batch_size": 64}, status="stopped", tps=1200.0)
    page = render_html(cpu_search(trial("screen-0", "screen", {}, tps=15000.0, **CALM), stopped))
    assert "1,200 (unjudged)" in page and "nothing recorded whether other processes shared" in page


def test_a_trial_stopped_before_its_first_timed_step_is_not_called_slower():
    compiling = trial("screen-1", "screen", {"batch_size": 64}, status="stopped")  # the budget ended
    why = section(rendered(cpu_search(compiling)), "Why others were rejected")
    assert "- screen-1: stopped before its first timed step, while it compiled or warmed up" in why
    assert "slower" not in why


# --- MFU beside tok/s ---------------------------------------------------------------------------------------

H100 = "NVIDIA H100 80GB HBM3"  # what torch names an H100 SXM: CI has no GPU, so the rows carry its figures


def with_mfu(summary: dict, gpu: str = H100, per_token: float = 6e8, source: str = "6 x parameters") -> dict:
    """`summary` as a search on `gpu` records it since runs count FLOPs: each run's FLOPs per token, where
    they come from, and its GPU's peak at its precision (None for a GPU the table lacks)."""
    out = copy.deepcopy(summary)
    out["hardware"] = {**out.get("hardware", {}), "gpu": gpu, "gpus": 1}
    for t in out["trials"]:
        precision = {**BASE_CFG, **t["config"]}["precision"]
        peak = peak_flops(gpu, precision)
        t |= {"flops_per_token": per_token, "flops_source": source, "peak_flops": peak}
        t["train"] = {**t.get("train", {}), "precision": precision}
    return out


def mfu_of(tps: float, precision: str, gpu: str = H100, per_token: float = 6e8) -> str:
    return f"{tps * per_token / peak_flops(gpu, precision):.1%}"


def test_the_table_shows_mfu_beside_tok_s_at_each_configs_precision():
    table = cells(with_mfu(CURRENT))
    assert list(table["baseline"])[6:8] == ["Tok/s", "MFU"]
    assert table["**cfg-7**"]["MFU"] == mfu_of(55200.0, "bf16")  # the answer's re-measured median
    assert table["baseline"]["MFU"] == mfu_of(30000.0, "fp32")  # fp32 against the fp32 peak
    assert table["cfg-4"]["MFU"] == mfu_of(70000.0, "fp32")  # screened only: its screen figure
    assert table["cfg-2"]["MFU"] == "—"  # failed: no speed, no MFU


def test_the_answer_and_the_finalists_give_mfu_and_the_note_says_where_the_flops_come_from():
    text = rendered(with_mfu(CURRENT))
    answer = text.split("\n\n")[1]
    assert f"55,200 tok/s (range 54,000–56,000) at {mfu_of(55200.0, 'bf16')} MFU, 1.84x" in answer
    costs = section(text, "What the planned run costs").splitlines()
    head = costs.index("| Finalist | Tok/s | MFU | Warm-up cold | Warm-up warm | Time to train |")
    assert costs[head + 2].startswith(f"| **cfg-7** (winner) | 55,200 | {mfu_of(55200.0, 'bf16')} | 48s |")
    assert costs[head + 4].startswith(f"| baseline | 30,000 | {mfu_of(30000.0, 'fp32')} | — |")
    measured = section(text, "How each number was measured")
    assert "MFU (model FLOPs utilisation): Tok/s x training FLOPs per token" in measured
    assert "FLOPs per token: 6 x parameters (the workload declares no count of its own" in measured
    declared = section(rendered(with_mfu(CURRENT, source="workload")), "How each number was measured")
    assert "FLOPs per token: the workload's own count (its flops_per_token(model))" in declared
    stays = rendered(with_mfu(CURRENT) | {"best": None}).split("\n\n")[1]
    assert f"the baseline (30,000 tok/s at {mfu_of(30000.0, 'fp32')} MFU, val loss" in stays


def test_a_gpu_without_a_known_peak_shows_no_mfu_and_says_why():
    unknown = with_mfu(CURRENT, gpu="NVIDIA A10G")
    table = cells(unknown)
    assert table["**cfg-7**"]["MFU"] == "—" and table["baseline"]["MFU"] == "—"
    measured = section(rendered(unknown), "How each number was measured")
    assert "No MFU is given here: no dense peak is known for 'NVIDIA A10G'" in measured


def test_summaries_without_flops_and_cpu_searches_have_no_mfu_column():
    assert "MFU" not in cells(CURRENT)["baseline"]  # written before runs counted FLOPs
    assert "| Finalist | Tok/s | Warm-up cold |" in rendered(CURRENT)
    cpu = on_cpu(with_mfu(CURRENT))
    for t in cpu["trials"]:
        t["peak_flops"] = None  # a CPU has no peak
    assert "MFU" not in cells(cpu)["baseline"] and "MFU (model FLOPs" not in rendered(cpu)
