"""report.md rendered from a synthetic summary.json: the answer, the table, the reasons, the commands."""

from __future__ import annotations

import copy
import json

from tuner import report
from tuner.report import fmt_mem, fmt_seconds, render_markdown, write_reports

HEADER = "| Config | Batch | Workers | Precision | Compile | Kernels | Tok/s | VRAM | Loss | vs baseline |"
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
    "tolerance": {"value": 0.05, "mode": "absolute", "limit": 1.55},
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
    assert base == ["baseline", "8", "0", "fp32", "none", "torch", "30,000", "512 MiB", "1.5000", "1.00x"]
    assert win == [
        "**cfg-7** (winner)",
        "128",
        "0",
        "bf16",
        "default",
        "torch",
        "55,200",
        "6.0 GiB",
        "1.5200",
        "1.84x",
    ]
    assert fast_infeasible[-2:] == ["1.6123 (over limit)", "2.33x"]
    assert cfg3[6] == "50,000" and cfg3[-1] == "1.67x"
    assert rows[labels.index("cfg-8")][8] == "—"  # never loss-checked
    assert rows[labels.index("cfg-9 (oom)")][7] == "79.0 GiB"


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
    assert "20 steady-state steps" in text and "3 exclusive runs" in text and "shared GPU" in text
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


def test_write_reports_writes_markdown(tmp_path):
    written = write_reports(tmp_path / "out", SUMMARY)
    md = tmp_path / "out" / "report.md"
    assert md in written and md.read_text() == render_markdown(SUMMARY)


def test_write_reports_writes_the_html_through_render_html(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "render_html", lambda summary: f"<p>{summary.best.id}</p>")
    written = write_reports(tmp_path, SUMMARY)
    assert (tmp_path / "report.html").read_text() == "<p>cfg-7</p>" and tmp_path / "report.html" in written
