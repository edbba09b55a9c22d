"""report.html: sections and plots on the realistic synthetic summary of tests/factories.py (and variants of
it), self-containment, escaping, the `python -m tuner.report OUT` rebuild, and a real headless Chromium
rendering it (DOM and screenshot).

`python tests/test_report_html.py docs/report-screenshot.png` regenerates the screenshot in docs/.
"""

from __future__ import annotations

import copy
import html.parser
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from factories import (  # as `factories`, not `tests.factories`: this file also runs as a script (below)
    BASE_CFG,
    NODE_ID,
    PLANNED,
    SCREEN,
    legacy_summary,
    on_two_gpus,
    search_row,
    synthetic_summary,
    without_best,
    without_telemetry,
)

from trainables.workloads.flops import peak_flops
from tuner.report import fmt_seconds, render_html, render_markdown, write_reports
from tuner.report.__main__ import main as rebuild_reports
from tuner.report.fmt import fmt_loss

REPO = Path(__file__).resolve().parents[1]


# --- checks on the page -------------------------------------------------------------------------------------

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class StrictParser(html.parser.HTMLParser):
    """Fails on mismatched or unclosed tags and on any URL that would leave the file; keeps the ids and the
    in-page references (a chart's <use> of its marker) for `parse` to check."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.tags: list[str] = []
        self.errors: list[str] = []
        self.text: list[str] = []
        self.ids: list[str] = []
        self.refs: list[str] = []

    def handle_starttag(self, tag, attrs):
        self._check(tag, attrs)
        self.tags.append(tag)
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self._check(tag, attrs)
        self.tags.append(tag)
        if tag not in VOID and "svg" not in self.stack:  # HTML honours "/>" only inside <svg>
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
            self.ids += [value] if name == "id" else []
            if name == "xlink:href" and value.startswith("#"):
                self.refs.append(value[1:])
            elif name in ("src", "href", "action", "xlink:href") or (value and "url(" in value):
                self.errors.append(f"<{tag} {name}={value!r}>: no external resources allowed")


def parse(page: str) -> StrictParser:
    parser = StrictParser()
    parser.feed(page)
    parser.close()
    assert parser.errors == [], parser.errors[:5]
    assert parser.stack == [], f"unclosed tags: {parser.stack}"
    assert len(set(parser.ids)) == len(parser.ids), "ids repeat: the page's SVGs share one id space"
    assert set(parser.refs) <= set(parser.ids), set(parser.refs) - set(parser.ids)
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.I)
    assert "@import" not in page and "url(" not in page
    return parser


CHART = r'<div class="chart" role="img" aria-label="[^"]+" title="[^"]+" style="width:\d+px" data-tips="[^"]*"><svg '


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
    return render_html(full)  # rendered once for the module: its charts are most of a render's time


@pytest.fixture(scope="module")
def cpu_page(full) -> str:
    return render_html(without_telemetry(full))


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
        assert re.search(rf'<figure id="{fig}"><h3>[^<]+</h3>{CHART}', page), fig
    for field in ("util_gpu", "power_w", "mem_used_mb", "temp_c"):
        assert re.search(rf'<figure id="timeline-{field}"><h3>[^<]+</h3>{CHART}', page), field
    pareto = page.split('id="plot-pareto"')[1].split("</figure>")[0]
    assert 'id="plot-pareto-band"' in pareto and 'id="plot-pareto-front"' in pareto  # marked on the canvas
    assert "limit 1.5500" in pareto and ">winner</text>" in pareto and ">baseline</text>" in pareto
    batch = page.split('id="plot-batch"')[1].split("</figure>")[0]
    assert ">4096</text>" in batch and "screen-8" in batch  # the OOM config marked at its batch size
    tips = json.loads(html.unescape(re.search(r'data-tips="([^"]*)"', batch)[1]))  # the script's <title>s
    assert len(tips) == 12 and all(f'<g id="{gid}">' in batch for gid in tips)  # 10 with a speed, 2 failed
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
    assert base[1:6] == ["8", "0", "fp32", "none", "torch"] and base[10] == "1.00×" and base[-1] == "baseline"
    assert win[1:6] == ["256", "0", "bf16", "default", "fused"] and win[-1] == "winner"
    assert win[6] == f"{full['best']['tokens_per_s']:,.0f}" and win[10] == f"{full['best']['speedup']:.2f}×"
    assert win[11].endswith("mJ")
    by_label = dict(zip(labels, rows))
    assert by_label["screen-2"][9] == "1.5560 (over limit)" and by_label["screen-2"][-1] == "infeasible"
    assert by_label["screen-8"][-1] == "oom" and by_label["screen-8"][8] == "79.2 GiB"
    assert by_label["screen-9"][-1] == "error" and by_label["screen-10"][-1] == "nan"
    assert by_label["screen-6"][-1] == "stopped" and by_label["screen-3"][-1] == "loss not checked"
    assert by_label["screen-4"][9] == "1.5000"  # changes speed knobs only: the baseline's loss stands


def test_every_number_says_how_it_was_measured(page):
    tps_how = cell_attr(page, "screen-0", 6, "title")
    assert "median of 3 re-measure runs (range" in tps_how and "20 timed steps" in tps_how
    assert "telemetry saw no process outside the search on the GPU" in tps_how
    screen_how = cell_attr(page, "screen-3", 6, "title")
    assert screen_how.startswith("one speed-screen run (screen-3), 20 timed steps after 5 untimed warm-up")
    loss_how = cell_attr(page, "screen-1", 9, "title")
    assert "from loss-check run loss_check_0-1" in loss_how and "speed knobs" in loss_how
    assert "GPU shared with other loss runs (0.25 of a GPU each)" in cell_attr(page, "screen-0", 9, "title")
    assert "NVML energy" in cell_attr(page, "screen-0", 11, "title")
    assert "out of memory" in cell_attr(page, "screen-8", 12, "title")
    assert "BackendCompilerFailed: triton autotune &lt;failed&gt;" in cell_attr(page, "screen-9", 12, "title")
    measured = section(page, "measured")
    assert "20 steady-state steps" in measured and "3 runs asked of each" in measured
    assert "val loss &lt;= the limit 1.5500 = baseline " in measured
    assert 'class="how"' in section(page, "table")


def cell_note(page: str, label: str, column: int) -> str:
    """The small print under a table cell's value (the knobs no column shows, the loss's execution)."""
    body = page.split('<table id="configs"', 1)[1].split("</table>", 1)[0]
    for tr in re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.S):
        cells = re.findall(r"<td[^>]*>(.*?)</td>", tr, re.S)
        if cells and re.search(rf"^{re.escape(label)}(<|$)", cells[0]):
            note = re.search(r'<span class="changes">(.*?)</span>', cells[column])
            return note.group(1) if note else ""
    raise AssertionError(f"no row {label}")


def plain_table(html_text: str, table_id: str) -> list[list[str]]:
    body = html_text.split(f'id="{table_id}"', 1)[1].split("</table>", 1)[0].split("<tbody>", 1)[1]
    return [
        [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", tr, re.S)]
        for tr in re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.S)
    ]


def test_table_shows_warm_up_and_which_execution_trained_each_loss(page):
    by_label = {r[0]: r for r in table_rows(page)}
    assert [by_label[k][7] for k in ("baseline", "screen-0", "screen-1", "screen-3", "screen-8")] == [
        "2.0s", "14s", "2.0s", "3m 32s", "—"
    ]  # fmt: skip
    assert "median of 3 re-measure runs, the search&#39;s compile caches warm" in cell_attr(
        page, "screen-0", 7, "title"
    )
    assert "its speed-screen run (screen-3), the search&#39;s first compile" in cell_attr(
        page, "screen-3", 7, "title"
    )
    base_exec = "trained with compile=default, num_workers=4 (as screen-4 runs)"
    assert cell_note(page, "baseline", 9) == base_exec
    assert cell_note(page, "screen-0", 9) == "trained with compile=default, kernels=fused"  # its own
    assert cell_note(page, "screen-1", 9) == "trained with compile=default, kernels=fused (as screen-0 runs)"
    assert cell_note(page, "screen-5", 9) == "trained with the baseline config&#39;s execution"
    assert cell_note(page, "screen-3", 9) == ""  # never loss-checked
    base_how = cell_attr(page, "baseline", 9, "title")
    assert "the baseline&#39;s loss run: full token budget, GPU shared with other loss runs" in base_how
    assert base_exec in base_how
    screen_how = cell_attr(page, "screen-3", 6, "title")
    assert "no other run timed on its GPU at the same time (timing gate" in screen_how
    assert "no other run compiled on its GPU during any timed window" in cell_attr(
        page, "screen-0", 6, "title"
    )
    assert "trained with the execution named under it" in section(page, "table")


def test_what_the_planned_run_costs(page, full):
    costs = section(page, "costs")
    assert "<h2>What the planned run costs</h2>" in costs and "The planned run is 200,000,000 tokens" in costs
    finalists = {f["id"]: f for f in full["finalists"]}
    assert plain_table(costs, "finalist-costs") == [
        ["screen-0 (winner)", "744,554", "50s", "14s", fmt_seconds(finalists["screen-0"]["time_to_train_s"])],
        ["screen-1", "644,146", "2.0s", "2.0s", fmt_seconds(finalists["screen-1"]["time_to_train_s"])],
        ["baseline", "26,734", "—", "2.0s", fmt_seconds(finalists["baseline"]["time_to_train_s"])],
    ]
    assert '<tr class="winner"><td class="text">screen-0 (winner)' in costs
    even = full["break_even"][0]
    cold, warm = even["tokens_cold"], even["tokens_warm"]
    assert plain_table(costs, "break-even") == [
        [
            "default", "screen-0", "754,975", "screen-1: 628,702 tok/s", "50s / 14s",
            f"{cold:,.0f} tokens ({cold / PLANNED:.3g}× the planned run)",
            f"{warm:,.0f} tokens ({warm / PLANNED:.3g}× the planned run)",
        ]
    ]  # fmt: skip
    answer = section(page, "answer")
    ttt = fmt_seconds(full["best"]["time_to_train_s"])
    assert f"<b>{ttt}</b><span>to train 200,000,000 tokens, compile + warm-up included</span>" in answer
    assert (
        f"The planned run (200,000,000 tokens) takes ~{ttt} with screen-0, 14s of it compile + warm-up."
        in answer
    )
    assert (
        "the winner&#39;s was trained with compile=default, kernels=fused, the baseline&#39;s was trained with "
        "compile=default, num_workers=4 (as screen-4 runs)"
    ) in answer


def test_run_it_and_the_measurement_say_what_is_true_now(page):
    run_it = section(page, "run")
    assert '<p id="compile-cache">best.yaml names the search&#39;s compile cache' in run_it
    assert "<code>compile_cache: out/h100/compile-cache</code>" in run_it and "reuses" in run_it
    assert "exclusive" not in page and "alone on a whole GPU" not in page
    measured = section(page, "measured")
    assert "their timed windows take turns, one per GPU at a time" in measured
    assert "other runs compiled on the GPU during" in measured  # the screen's compiles overlap
    assert "each timed window also waited until no other run on its GPU was compiling" in measured
    assert "no other run compiled on its GPU during any timed window" in measured


def test_summaries_from_before_the_gate_and_the_costs_render(full):
    legacy = legacy_summary(full)
    page = render_html(legacy)
    parse(page)
    assert 'id="costs"' not in page and 'id="compile-cache"' not in page and "trained with" not in page
    assert "exclusive GPU (or the whole CPU share)" in section(page, "measured")  # its own, then true
    assert "timing gate" not in page
    assert table_rows(page)[1][:2] == ["screen-0", "256"]
    assert "## What the planned run costs" not in render_markdown(legacy)
    example = json.loads((REPO / "docs/examples/gpu-search-h200/summary.json").read_text())
    for render in (render_html, render_markdown):  # a real summary.json from before these fields
        assert "screen-0" in render(example)


def test_sortable_table_has_numeric_sort_keys(page, full):
    assert page.count('title="click to sort"') == 13 and "aria-sort" in page
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


def test_without_telemetry_a_clear_note_and_no_energy_plot(full, cpu_page):
    page = cpu_page
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
            search_row("baseline-0", "baseline", BASE_CFG, tokens_per_s=30000.0, val_loss=1.5),
            search_row(
                "screen-0", "screen", {"batch_size": 4096}, "oom", feasible=False, peak_mem_mb=80000.0
            ),
            search_row("screen-1", "screen", {"precision": "fp16"}, "nan", feasible=False),
        ],
        "tolerance": {"value": 0.05, "mode": "absolute", "limit": 1.55},  # as before the loss limit
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


def test_report_cli_rebuilds_both_files_and_fails_cleanly(tmp_path, full, page, capsys):
    """As a user runs it (a subprocess), then its failures through the same `main` in this process (a
    subprocess's imports were most of this test): the same exit codes and lines."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.json").write_text(json.dumps(full))
    cli = [sys.executable, "-m", "tuner.report"]
    done = subprocess.run([*cli, str(out)], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (out / "report.md").read_text() == render_markdown(full)
    assert (out / "report.html").read_text() == page
    assert str(out / "report.html") in done.stdout

    capsys.readouterr()
    assert rebuild_reports([str(tmp_path / "nope")]) == 2
    missing = capsys.readouterr()
    assert missing.out == ""
    assert missing.err.strip().count("\n") == 0 and "summary.json" in missing.err
    (out / "summary.json").write_text("{not json")
    assert rebuild_reports([str(out)]) == 2
    broken = capsys.readouterr().err
    assert broken.startswith("error: ") and "not valid JSON" in broken


def test_a_summary_json_that_named_its_loss_limit_loss_gate_rebuilds_the_same_reports(tmp_path, full, page):
    out = tmp_path / "out"
    out.mkdir()
    older = {k: v for k, v in full.items() if k != "loss_limit"} | {"loss_gate": full["loss_limit"]}
    (out / "summary.json").write_text(json.dumps(older))  # as searches wrote it before the rename
    assert rebuild_reports([str(out)]) == 0
    markdown = (out / "report.md").read_text()
    assert markdown == render_markdown(full) and (out / "report.html").read_text() == page
    limit = fmt_loss(full["loss_limit"]["limit"])
    assert f"Feasible: val loss <= the limit {limit} = baseline " in markdown and "limit —" not in markdown


def test_write_reports_writes_the_html_next_to_the_markdown(tmp_path, full, page):
    written = write_reports(tmp_path, full)
    assert [p.name for p in written] == ["report.md", "report.html"]
    assert (tmp_path / "report.html").read_text() == page


# --- issue #10: CPU searches, node ids; issue #12: the GPUs section ------------------------------------------


def column_heads(page: str) -> list[str]:
    return re.findall(r'<th scope="col"[^>]*>([^<]+)</th>', page)


def test_a_cpu_search_has_no_vram_or_energy_columns(page, cpu_page):
    cpu = cpu_page
    parse(cpu)
    heads = column_heads(cpu)
    assert "VRAM" not in heads and "J/token" not in heads and len(heads) == 11
    assert all(len(row) == 11 for row in table_rows(cpu)) and table_rows(cpu)[0][8:] == [
        "1.5000", "1.00×", "baseline"
    ]  # fmt: skip
    assert "VRAM" not in section(cpu, "table")
    assert column_heads(page)[8] == "VRAM" and column_heads(page)[11] == "J/token"  # a GPU search keeps them


def test_a_node_id_is_cut_short_and_said_once(full):
    notice = f"GPU telemetry unavailable on node {NODE_ID}: nvmlInit failed (NVMLError); carrying on"
    failed = {"notices": [notice], "telemetry": {"available": False, "notice": notice, "timelines": {}}}
    cpu = render_html(without_telemetry(full) | failed)
    assert NODE_ID not in cpu and cpu.count(NODE_ID[:8]) == 1
    assert "No GPU telemetry (the search ran on CPU: there is no GPU to sample)." in cpu
    gpu = render_html(copy.deepcopy(full) | failed | {"gpu_usage": []})
    assert NODE_ID not in gpu and gpu.count(NODE_ID[:8]) == 1
    assert "No GPU telemetry (see Notices)." in gpu


def test_the_gpus_section_says_how_busy_each_gpu_was_and_whether_they_agree(page, full, cpu_page):
    one = section(page, "gpus")
    assert f"How busy each GPU on node {NODE_ID[:8]} was in each phase" in one
    assert plain_table(one, "gpu-usage")[1] == [
        "screen",
        "GPU 0",
        "9 (+2 failed)",
        "86%",
        "90%",
        "8.8 GiB",
        "9.7 GiB",
        "3,055",
    ]
    assert "gpu-population" not in one  # one GPU: nothing to compare
    apart = render_html(on_two_gpus(full, gpu1_factor=1.05))
    parse(apart)
    gpus = section(apart, "gpus")
    assert (
        '<p class="note">GPUs 0 and 1 differ beyond the noise: the same configs ran 4.8% faster on GPU 1'
        in gpus
    )
    assert plain_table(gpus, "gpu-population-1")[-1] == [
        "all finalists (each vs its GPUs&#39; mean)", "-2.4% (5 runs)", "+2.4% (4 runs)", "4.8%", "2.5%", "differ"
    ]  # fmt: skip
    assert "but the search pools their runs as one population: see GPUs." in section(apart, "notices")
    alike = section(render_html(on_two_gpus(full)), "gpus")
    assert '<p class="how">GPUs 0 and 1: one population.' in alike
    assert 'id="gpus"' not in cpu_page


# --- a real browser ---------------------------------------------------------------------------------------


def chromium() -> str:
    """The Chromium binary. Without one this test skips on a developer's machine (the README's test command
    must pass on a fresh one) and fails where TUNER_REQUIRE_BROWSER=1 says it must run (CI sets it)."""
    found = os.environ.get("TUNER_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    reason = "no chromium on PATH (`apt-get install -y chromium` to run this test)"
    if os.environ.get("TUNER_REQUIRE_BROWSER") == "1":
        pytest.fail(f"TUNER_REQUIRE_BROWSER=1: {reason}")
    pytest.skip(reason)


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
        assert re.search(rf'<figure id="{fig}"><h3>[^<]+</h3>{CHART}', dom.stdout), f"{fig} not in the DOM"
    batch_plot = dom.stdout.split('<figure id="plot-batch">')[1].split("</figure>")[0]
    tips = re.findall(r'<g id="plot-batch-tip\d+"><title>', batch_plot)  # put in by the page's script
    assert len(tips) == 12  # 10 configs with a speed, 2 failed without one

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


def test_chromium_renders_the_gpus_section_and_a_cpu_table(tmp_path, full):
    binary = chromium()
    for name, summary in (("gpus", on_two_gpus(full, gpu1_factor=1.05)), ("cpu", without_telemetry(full))):
        report = tmp_path / f"{name}.html"
        report.write_text(render_html(summary))
        dom = run_chromium(binary, report, tmp_path / "profile", "--dump-dom")
        assert dom.returncode == 0, dom.stderr[-2000:]
        if name == "gpus":
            gpus = section(dom.stdout, "gpus")
            assert (
                len(plain_table(gpus, "gpu-usage")) == 10 and len(plain_table(gpus, "gpu-population-1")) == 4
            )
            assert '<p class="note">GPUs 0 and 1 differ beyond the noise' in gpus
        else:
            assert len(column_heads(dom.stdout)) == 11 and 'id="gpus"' not in dom.stdout


if __name__ == "__main__":  # regenerate docs/report-screenshot.png (and the page beside it, for a look)
    import tempfile

    target = Path(sys.argv[1] if len(sys.argv) > 1 else REPO / "docs" / "report-screenshot.png")
    with tempfile.TemporaryDirectory() as tmp:
        html_file = Path(tmp) / "report.html"
        html_file.write_text(render_html(synthetic_summary()))
        screenshot(html_file, target.resolve(), Path(tmp) / "profile", size="1400,4300")  # the whole page
    print(target)


def test_mfu_sits_beside_tok_s_in_the_table_the_cards_and_the_finalists(full):
    gpu = full["hardware"]["gpu"]  # an H100 SXM: CI has no GPU, so the rows carry its figures
    counted = copy.deepcopy(full)
    for t in counted["trials"]:
        precision = {**BASE_CFG, **t["config"]}["precision"]
        t |= {"flops_per_token": 2e7, "flops_source": "workload", "peak_flops": peak_flops(gpu, precision)}
        t["train"] = {**(t.get("train") or {}), "precision": precision}
    page = render_html(counted)
    parse(page)
    assert column_heads(page)[6:8] == ["Tok/s", "MFU"]
    best = counted["best"]["tokens_per_s"]
    expected = f"{best * 2e7 / peak_flops(gpu, 'bf16'):.1%}"  # the winner trains in bf16
    win = table_rows(page)[1]
    assert win[0] == "screen-0" and win[7] == expected
    how = cell_attr(page, "screen-0", 7, "title")
    assert "training FLOPs per token (workload)" in how and "the GPU&#39;s dense bf16 peak" in how
    assert f"· {expected} MFU</span>" in section(page, "answer")  # the speed card
    costs = plain_table(section(page, "costs"), "finalist-costs")
    assert costs[0][:3] == ["screen-0 (winner)", f"{best:,.0f}", expected]
    assert "the workload&#39;s own count (its flops_per_token(model))" in section(page, "measured")
