"""report.html: sections and plots on realistic synthetic summaries, self-containment, escaping, the
`python -m tuner.report OUT` rebuild, and a real headless Chromium rendering it (DOM and screenshot).

`python tests/test_report_html.py docs/report-screenshot.png` regenerates the screenshot in docs/.
"""

from __future__ import annotations

import copy
import html.parser
import json
import math
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from tuner.report import render_html, render_markdown, write_reports
from tuner.select import SPEED_ONLY_KNOBS

REPO = Path(__file__).resolve().parents[1]
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


def _row(tid: str, phase: str, cfg: dict, status: str = "ok", **values) -> dict:
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
        _row(
            "baseline-0", "baseline", BASE_CFG, tokens_per_s=base_tps * 0.98, val_loss=1.5, peak_mem_mb=480.0
        )
        | _gpu_fields(rng, {}, base_tps)
    ]
    limit = 1.55
    for tid, cfg, status in SCREEN:
        tps = _speed(cfg) * rng.uniform(0.97, 1.03)
        mem = 480.0 * cfg.get("batch_size", 8) / 8 * (0.55 if cfg.get("precision") == "bf16" else 1.0)
        if status == "oom":
            trials.append(_row(tid, "screen", cfg, status, peak_mem_mb=79.2 * 1024, feasible=False))
            continue
        if status == "error":
            error = "Traceback (most recent call last):\n...\nBackendCompilerFailed: triton autotune <failed>"
            trials.append(_row(tid, "screen", cfg, status, error=error, feasible=False))
            continue
        row = _row(tid, "screen", cfg, status, tokens_per_s=tps, peak_mem_mb=mem) | _gpu_fields(rng, cfg, tps)
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
        check = _row(
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
                _row(
                    f"remeasure-{len(remeasure)}", "remeasure", cfg, tokens_per_s=tps, finalist=fid, repeat=r
                )
                | {"peak_mem_mb": 480.0 if fid == "baseline" else 9200.0}
                | _gpu_fields(rng, cfg, tps)
            )
    trials += remeasure
    win_runs = sorted(r["tokens_per_s"] for r in remeasure if r["finalist"] == "screen-0")
    base_runs = sorted(r["tokens_per_s"] for r in remeasure if r["finalist"] == "baseline")
    return {
        "baseline": {
            "config": BASE_CFG,
            "tokens_per_s": base_runs[1],
            "tokens_per_s_full_run": trials[0]["tokens_per_s"],
            "val_loss": 1.5,
        },
        "best": {
            "id": "screen-0",
            "config": WINNER_CFG,
            "tokens_per_s": win_runs[1],
            "tokens_per_s_spread": [win_runs[0], win_runs[2]],
            "val_loss": _loss(WINNER_CFG),
            "speedup": round(win_runs[1] / base_runs[1], 3),
        },
        "trials": trials,
        "tolerance": {"value": 0.05, "mode": "absolute", "limit": limit},
        "hardware": {"gpus": 1, "cuda": True, "gpu": "NVIDIA H100 80GB HBM3", "gpu_mem_mb": 81559},
        "versions": {"python": "3.12.3", "torch": "2.11.0+cu130", "ray": "2.60.0", "optuna": "5.0.0"},
        "timings": {
            "hardware": 4.1,
            "baseline": 412.0,
            "probe": 35.0,
            "screen": 611.0,
            "loss_check": 1290.0,
            "remeasure": 240.0,
            "total": 2592.1,
        },  # fmt: skip
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
            "screen": "exclusive GPU (or the whole CPU share)",
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
    }


def without_telemetry(summary: dict) -> dict:
    """The same search as a CPU run records it: no GPU, no telemetry fields, no timelines."""
    out = copy.deepcopy(summary)
    out["hardware"] = {"gpus": 0, "cuda": False, "cpus": 2}
    out["telemetry"] = {"available": False, "notice": None, "timelines": {}}
    gpu_keys = set(_gpu_fields(random.Random(0), {}, 1.0))
    out["trials"] = [{k: v for k, v in t.items() if k not in gpu_keys} for t in out["trials"]]
    return out


def without_best(summary: dict) -> dict:
    out = copy.deepcopy(summary) | {"best": None}
    out["selection"] = {"reasons": ["no finalist beat the baseline beyond noise"], "rejected": {}}
    return out


# --- checks on the page -------------------------------------------------------------------------------------

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
SVG_LEAVES = {"circle", "rect", "line", "polyline", "polygon", "path"}  # may be self-closed in SVG


class StrictParser(html.parser.HTMLParser):
    """Fails on mismatched or unclosed tags and on any URL that would leave the file."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.tags: list[str] = []
        self.errors: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self._check(tag, attrs)
        self.tags.append(tag)
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self._check(tag, attrs)
        self.tags.append(tag)
        if tag not in VOID and tag not in SVG_LEAVES:
            self.errors.append(f"self-closed <{tag}/>")

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:]} at {self.getpos()}")
        else:
            self.stack.pop()

    def handle_data(self, data):
        self.text.append(data)

    def _check(self, tag, attrs):
        for name, value in attrs:
            if name in ("src", "href", "action", "xlink:href") or (value and "url(" in value):
                self.errors.append(f"<{tag} {name}={value!r}>: no external resources allowed")


def parse(page: str) -> StrictParser:
    parser = StrictParser()
    parser.feed(page)
    parser.close()
    assert parser.errors == [], parser.errors[:5]
    assert parser.stack == [], f"unclosed tags: {parser.stack}"
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.I)
    assert "@import" not in page and "url(" not in page
    return parser


def section(page: str, section_id: str) -> str:
    start = page.index(f'id="{section_id}"')
    return page[start : page.find("</section>", start)]


def table_rows(page: str) -> list[list[str]]:
    """The comparison table as text cells: [label, batch, workers, precision, ..., status]."""
    body = page.split('<table id="configs"', 1)[1].split("</table>", 1)[0]
    rows = []
    for tr in re.findall(r"<tr[^>]*>(.*?)</tr>", body.split("<tbody>", 1)[1], re.S):
        cells = re.findall(r"<td[^>]*>(.*?)</td>", tr, re.S)
        rows.append([re.sub(r"<span.*?</span>|<[^>]+>", "", c).strip() for c in cells])
    return rows


def cell_attr(page: str, label: str, column: int, attr: str) -> str:
    body = page.split('<table id="configs"', 1)[1].split("</table>", 1)[0]
    for tr in re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.S):
        cells = re.findall(r"<td([^>]*)>", tr)
        if cells and f'data-v="{label}"' in cells[0]:
            match = re.search(rf'{attr}="([^"]*)"', cells[column])
            return match.group(1) if match else ""
    raise AssertionError(f"no row {label}")


@pytest.fixture(scope="module")
def full() -> dict:
    return json.loads(json.dumps(synthetic_summary()))  # what a saved summary.json gives back


@pytest.fixture(scope="module")
def page(full) -> str:
    return render_html(full)


def test_page_is_self_contained_small_and_well_formed(page):
    parser = parse(page)
    assert len(page.encode()) < 1_000_000
    assert page.startswith("<!DOCTYPE html>") and '<meta charset="utf-8">' in page
    assert parser.tags.count("script") == 1 and "<script src" not in page
    assert parser.tags.count("svg") >= 7  # 2 scatter plots, 2 bar charts, 4 timeline panels (+ swatches)


def test_answer_names_winner_speedup_and_loss_against_the_limit(page, full):
    answer = section(page, "answer")
    best = full["best"]
    assert "<strong>screen-0</strong> is the fastest config within tolerance" in answer
    assert f"{best['speedup']:.2f}x the baseline" in answer and f"{best['speedup']:.2f}×" in answer
    assert "validation loss is 1.5400" in answer and "val loss 1.5400" in answer and "limit 1.5500" in answer
    assert (
        "batch_size: 8 → <strong>256</strong>" in answer
        and "kernels: torch → <strong>fused</strong>" in answer
    )
    assert "chose screen-0, the fastest" in answer  # the selection reasons
    assert "Telemetry changed the decision: <strong>No</strong>" in answer
    changed = copy.deepcopy(full)
    changed["selection"]["telemetry_changed_decision"] = True
    assert "Telemetry changed the decision: <strong>Yes</strong>" in render_html(changed)


def test_every_plot_is_drawn(page):
    for fig in ("plot-batch", "plot-pareto", "plot-speedup", "plot-energy"):
        assert re.search(rf'<figure id="{fig}"><h3>[^<]+</h3><svg ', page), fig
    for field in ("util_gpu", "power_w", "mem_used_mb", "temp_c"):
        assert re.search(rf'<figure id="timeline-{field}"><h3>[^<]+</h3><svg ', page), field
    pareto = page.split('id="plot-pareto"')[1].split("</figure>")[0]
    assert 'class="band"' in pareto and "limit 1.5500" in pareto and 'class="front"' in pareto
    assert ">winner</text>" in pareto and ">baseline</text>" in pareto
    batch = page.split('id="plot-batch"')[1].split("</figure>")[0]
    assert ">4096</text>" in batch and "screen-8" in batch  # the OOM config marked at its batch size
    assert "compile max-autotune" in batch and "bf16" in batch  # legend: colour and shape
    telemetry = section(page, "telemetry")
    assert "winner screen-0 (remeasure-3)" in telemetry and "baseline (remeasure-0)" in telemetry
    assert (
        "clocks throttled" in telemetry and "<td>8%</td>" in telemetry and "No GPU telemetry" not in telemetry
    )


def test_table_rows_values_and_order(page, full):
    rows = table_rows(page)
    labels = [r[0] for r in rows]
    assert labels[:2] == ["baseline", "screen-0"]
    assert labels[-3:] == ["screen-8", "screen-9", "screen-10"]  # failed last, in the order they ran
    assert len(labels) == 1 + len(SCREEN)  # one row per distinct config: runs of a config share it
    base, win = rows[0], rows[1]
    assert base[1:6] == ["8", "0", "fp32", "none", "torch"] and base[9] == "1.00×" and base[-1] == "baseline"
    assert win[1:6] == ["256", "0", "bf16", "default", "fused"] and win[-1] == "winner"
    assert win[6] == f"{full['best']['tokens_per_s']:,.0f}" and win[9] == f"{full['best']['speedup']:.2f}×"
    assert win[10].endswith("mJ")
    by_label = dict(zip(labels, rows))
    assert by_label["screen-2"][8] == "1.5560 (over limit)" and by_label["screen-2"][-1] == "infeasible"
    assert by_label["screen-8"][-1] == "oom" and by_label["screen-8"][7] == "79.2 GiB"
    assert by_label["screen-9"][-1] == "error" and by_label["screen-10"][-1] == "nan"
    assert by_label["screen-6"][-1] == "stopped" and by_label["screen-3"][-1] == "loss not checked"
    assert by_label["screen-4"][8] == "1.5000"  # changes speed knobs only: the baseline's loss stands


def test_every_number_says_how_it_was_measured(page):
    tps_how = cell_attr(page, "screen-0", 6, "title")
    assert "median of 3 exclusive re-measure runs (range" in tps_how and "20 timed steps" in tps_how
    assert "exclusive GPU (telemetry saw no other process)" in tps_how
    screen_how = cell_attr(page, "screen-3", 6, "title")
    assert screen_how.startswith("one speed-screen run (screen-3), 20 timed steps after 5 untimed warm-up")
    loss_how = cell_attr(page, "screen-1", 8, "title")
    assert "from loss-check run loss_check_0-1" in loss_how and "speed knobs" in loss_how
    assert "GPU shared with other loss runs (0.25 of a GPU each)" in cell_attr(page, "screen-0", 8, "title")
    assert "NVML energy" in cell_attr(page, "screen-0", 10, "title")
    assert "out of memory" in cell_attr(page, "screen-8", 11, "title")
    assert "BackendCompilerFailed: triton autotune &lt;failed&gt;" in cell_attr(page, "screen-9", 11, "title")
    measured = section(page, "measured")
    assert "20 steady-state steps" in measured and "3 exclusive runs" in measured
    assert "val loss &lt;= 1.5500" in measured
    assert 'class="how"' in section(page, "table")


def test_sortable_table_has_numeric_sort_keys(page, full):
    assert page.count('title="click to sort"') == 12 and "aria-sort" in page
    assert cell_attr(page, "screen-0", 6, "data-v") == str(full["best"]["tokens_per_s"])
    assert cell_attr(page, "screen-8", 6, "data-v") == ""  # no speed: sorts last


def test_without_best_the_baseline_stays(full):
    page = render_html(without_best(full))
    parse(page)
    answer = section(page, "answer")
    assert "No config beat the baseline within tolerance" in answer and "the baseline stays" in answer
    assert 'class="answer stays"' in page and "winner-changes" not in page
    assert ">winner</text>" not in page and '<tr class="winner">' not in page
    assert table_rows(page)[0][-1] == "baseline"
    assert "screen-0</strong>: re-measured at" in section(page, "rejected")


def test_without_telemetry_a_clear_note_and_no_energy_plot(full):
    page = render_html(without_telemetry(full))
    parse(page)
    note = re.search(r'<p class="note" id="no-telemetry">([^<]+)</p>', page)
    assert note and note.group(1) == "No GPU telemetry (the search ran on CPU: there is no GPU to sample)."
    assert 'id="plot-energy"' not in page and 'id="timeline-' not in page
    assert "there was no GPU telemetry" in section(page, "answer")
    assert "the whole CPU share" in cell_attr(page, "screen-0", 6, "title")
    contended = without_telemetry(full)
    for t in contended["trials"]:
        t["cpu_shared"] = True  # another process kept the CPU busy during every timed run
    title = cell_attr(render_html(contended), "screen-0", 6, "title")
    assert re.search(r"other processes used the CPU in (\d+) of \1 runs", title), title
    noticed = copy.deepcopy(full) | {
        "telemetry": {"available": False, "notice": "NVML not found", "timelines": {}}
    }
    assert "No GPU telemetry (NVML not found)." in render_html(noticed)
    legacy = {k: v for k, v in full.items() if k != "telemetry"}  # a summary from before telemetry
    assert "No GPU telemetry (this summary.json has no telemetry section)." in render_html(legacy)


def test_failed_trials_only_and_minimal_summaries_render():
    failed = {
        "baseline": {"config": BASE_CFG, "tokens_per_s": 30000.0, "val_loss": 1.5},
        "best": None,
        "trials": [
            _row("baseline-0", "baseline", BASE_CFG, tokens_per_s=30000.0, val_loss=1.5),
            _row("screen-0", "screen", {"batch_size": 4096}, "oom", feasible=False, peak_mem_mb=80000.0),
            _row("screen-1", "screen", {"precision": "fp16"}, "nan", feasible=False),
        ],
        "tolerance": {"value": 0.05, "mode": "absolute", "limit": 1.55},
    }
    page = render_html(failed)
    parse(page)
    assert [r[-1] for r in table_rows(page)] == ["baseline", "oom", "nan"]
    assert "No GPU telemetry" in page and 'id="plot-speedup"' in page
    minimal = render_html({"baseline": {"config": {}, "tokens_per_s": None, "val_loss": None}, "best": None})
    parse(minimal)
    assert "No config has both a batch size and a speed." in minimal


def test_every_string_is_escaped(full):
    evil = "<script>alert('x')</script>"
    summary = copy.deepcopy(full)
    summary["notices"].append(evil)
    summary["command"] += f" --set note={evil}"
    summary["selection"]["reasons"].append(evil)
    summary["hardware"]["gpu"] = evil
    summary["trials"][1]["config"] = dict(summary["trials"][1]["config"], precision=evil)
    summary["telemetry"]["notice"] = evil
    page = render_html(summary)
    parse(page)
    assert evil not in page and "<script>alert" not in page
    assert page.count("&lt;script&gt;") >= 5


def test_report_cli_rebuilds_both_files_and_fails_cleanly(tmp_path, full):
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.json").write_text(json.dumps(full))
    cli = [sys.executable, "-m", "tuner.report"]
    done = subprocess.run([*cli, str(out)], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (out / "report.md").read_text() == render_markdown(full)
    assert (out / "report.html").read_text() == render_html(full)
    assert str(out / "report.html") in done.stdout

    missing = subprocess.run(
        [*cli, str(tmp_path / "nope")], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr.strip().count("\n") == 0 and "summary.json" in missing.stderr
    (out / "summary.json").write_text("{not json")
    broken = subprocess.run([*cli, str(out)], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert (
        broken.returncode == 2 and broken.stderr.startswith("error: ") and "not valid JSON" in broken.stderr
    )


def test_write_reports_writes_the_html_next_to_the_markdown(tmp_path, full):
    written = write_reports(tmp_path, full)
    assert [p.name for p in written] == ["report.md", "report.html"]
    assert (tmp_path / "report.html").read_text() == render_html(full)


# --- a real browser ---------------------------------------------------------------------------------------


def chromium() -> str:
    """The Chromium binary, or a test failure that says how to get one (skip only when told to)."""
    found = os.environ.get("TUNER_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    reason = "no chromium on PATH: `apt-get install -y chromium`, or set TUNER_NO_BROWSER=1 to skip"
    if os.environ.get("TUNER_NO_BROWSER") == "1":
        pytest.skip(f"TUNER_NO_BROWSER=1: {reason}")
    pytest.fail(reason)


def run_chromium(binary: str, page: Path, profile: Path, *args: str) -> subprocess.CompletedProcess:
    flags = [
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={profile}",
    ]  # fmt: skip
    cmd = [binary, *flags, *args, page.resolve().as_uri()]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def screenshot(
    html_file: Path, png: Path, profile: Path, binary: str | None = None, size="1400,2400"
) -> None:
    done = run_chromium(
        binary or chromium(), html_file, profile, f"--screenshot={png}", f"--window-size={size}"
    )
    assert png.exists(), f"chromium wrote no screenshot (rc {done.returncode}): {done.stderr[-2000:]}"


def png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB(A) bytes) of an 8-bit truecolour PNG, filters undone."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        header = body if kind == b"IHDR" else header
        idat += body if kind == b"IDAT" else b""
        pos += 12 + length
    width, height, depth, color = struct.unpack(">IIBB", header[:10])
    assert depth == 8 and color in (2, 6), f"unexpected PNG format depth={depth} colour={color}"
    bpp = 3 if color == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up, up_left = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - up_left
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - up_left)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else up_left)) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, height, rows


def test_chromium_renders_the_plots_and_a_non_blank_screenshot(tmp_path, page):
    binary = chromium()
    report = tmp_path / "report.html"
    report.write_text(page)
    dom = run_chromium(binary, report, tmp_path / "profile", "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    for fig in ("plot-batch", "plot-pareto", "plot-speedup", "plot-energy", "timeline-power_w"):
        assert re.search(rf'<figure id="{fig}"><h3>[^<]+</h3><svg ', dom.stdout), f"{fig} not in the DOM"
    batch_plot = dom.stdout.split('<figure id="plot-batch">')[1].split("</figure>")[0]
    assert batch_plot.count("<g><title>") == 12  # 10 configs with a speed, 2 failed without one

    # The sort script: one click on Tok/s sorts ascending, configs without a speed last.
    clicked = tmp_path / "clicked.html"
    click = '<script>document.querySelectorAll("#configs th")[6].click()</script>'
    clicked.write_text(page.replace("</body>", click + "</body>"))
    dom = run_chromium(binary, clicked, tmp_path / "profile", "--dump-dom")
    speeds = [row[6] for row in table_rows(dom.stdout)]
    known = [float(s.replace(",", "")) for s in speeds if s != "—"]
    assert known == sorted(known) and len(known) == 10 and speeds[-2:] == ["—", "—"], speeds
    assert 'aria-sort="ascending"' in dom.stdout

    png = tmp_path / "shot.png"
    screenshot(report, png, tmp_path / "profile", binary)
    width, height, rows = png_pixels(png.read_bytes())
    assert (width, height) == (1400, 2400)
    bpp = len(rows[0]) // width
    colours = {row[x : x + 3] for row in rows[::8] for x in range(0, width * bpp, 8 * bpp)}
    orange = {c for c in colours if c[0] > 200 and 70 < c[1] < 130 and c[2] < 60}  # the winner's colour
    assert len(colours) > 50 and orange, f"screenshot looks blank: {len(colours)} distinct colours"


if __name__ == "__main__":  # regenerate docs/report-screenshot.png (and the page beside it, for a look)
    import tempfile

    target = Path(sys.argv[1] if len(sys.argv) > 1 else REPO / "docs" / "report-screenshot.png")
    with tempfile.TemporaryDirectory() as tmp:
        html_file = Path(tmp) / "report.html"
        html_file.write_text(render_html(synthetic_summary()))
        screenshot(html_file, target.resolve(), Path(tmp) / "profile", size="1400,4300")  # the whole page
    print(target)
