"""report.html: report.md's answer and evidence, with plots, a sortable table and GPU timelines.

One self-contained file, so it opens offline and can be attached anywhere: templates/report.html.j2 with
static/report.css, static/report.js and the plots' SVG inlined. The template autoescapes, so every string
from the summary is escaped; only this package's own CSS, JS, SVG and emphasis go in as Markup.
"""

from __future__ import annotations

import itertools
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup, escape

import tuner.report.charts as charts
import tuner.report.timelines as timelines
from trainables.common.progress import metrics_text
from tuner.report.cost_section import BREAK_EVEN_HEAD, FINALIST_HEAD, costs, planned_cost
from tuner.report.entry import COLUMN_KNOBS, Entry, loss_cell, speedup_text, tps_text, trust_notes
from tuner.report.fmt import (
    DASH,
    fmt_jpt,
    fmt_loss,
    fmt_mem,
    fmt_seconds,
    fmt_tps,
    fmt_warmup,
    is_num,
    one_run_text,
    short_ids,
)
from tuner.report.gpu_section import USAGE_HEAD
from tuner.report.measured import Facts, measurement_notes
from tuner.report.mfu import fmt_mfu
from tuner.report.profile import answer_line
from tuner.report.recipe_section import recipe_line
from tuner.report.units import in_unit
from tuner.report.view import TABLE_COLUMNS, View
from tuner.state.records import BASELINE_ID, Summary, TrialRow

HERE = Path(__file__).parent
TABLE_HEAD = (*TABLE_COLUMNS, "J/token", "Status")
TEXT_COLUMNS = ("Config", "Precision", "Compile", "Kernels", "Status")
TIMELINE_PANELS = (  # (point field, title, unit)
    ("util_gpu", "GPU utilisation", "%"),
    ("power_w", "Power", "W"),
    ("mem_used_mb", "Memory used", "MiB"),
    ("temp_c", "Temperature", "°C"),
)
STATS_HEAD = (
    "Run",
    "Samples",
    "Duration",
    "GPU util",
    "Mem util",
    "Power",
    "Peak memory",
    "Max temp",
    "Throttled",
    "Processes",
    "J/token",
    "Telemetry",
)


def _inline(text: str) -> Markup:
    """The reports' inline emphasis, escaped: **x** -> <strong>, `x` -> <code>."""
    html = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", str(escape(text)))
    return Markup(re.sub(r"`(.+?)`", r"<code>\1</code>", html))


_ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(HERE / "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
_ENV.filters["inline"] = _inline
_ENV.filters["in_unit"] = in_unit  # the report's own sentences in the workload's unit (tuner/report/units.py)


# --- the table ----------------------------------------------------------------------------------------------


@dataclass
class Cell:
    shown: Any  # what the cell says
    key: Any  # data-v: what the sort script compares ("" sorts last)
    title: str | None = None  # hover text: how the number was measured, or why the config lost
    cls: str = ""
    note: str = ""  # small print under the label: the knobs no column shows


@dataclass
class Row:
    cls: str
    cells: list[Cell] = field(default_factory=list)


def _sort_key(value: Any) -> str:
    return "" if value is None else str(value)


def _row(e: Entry, facts: Facts, columns: tuple[str, ...]) -> Row:
    """The entry's cells under `columns` (of TABLE_HEAD)."""
    extra = e.changed_knobs(leave_out=COLUMN_KNOBS)
    loss, trained = loss_cell(e, facts)
    speedup = speedup_text(e, "×")
    knobs = [
        Cell(DASH if e.config[k] is None else e.config[k], _sort_key(e.config[k]), cls=_knob_class(k))
        for k in COLUMN_KNOBS
    ]
    cells = [
        Cell(e.label, e.label, e.tooltip, "text", extra),
        *knobs,
        Cell(tps_text(e), _sort_key(e.tps), e.how["tps"]),  # how["tps"] says how many runs were contended
        Cell(fmt_mfu(e.mfu), _sort_key(e.mfu), e.how["mfu"]),
        Cell(fmt_warmup(e.warmup), _sort_key(e.warmup), e.how["warmup"]),
        Cell(fmt_mem(e.mem), _sort_key(e.mem), e.how["mem"]),
        Cell(loss, _sort_key(e.loss), e.how["loss"], "loss", trained),
        Cell(speedup, _sort_key(e.speedup), e.how["speedup"]),
        Cell(fmt_jpt(e.jpt), _sort_key(e.jpt), e.how["jpt"] if e.jpt is not None else None),
        Cell(e.verdict, e.verdict, e.reason or None, "text"),
    ]
    for cell in cells:  # the hover texts in the workload's unit
        cell.title = in_unit(cell.title, e.unit) if cell.title else cell.title
    by_column = dict(zip(TABLE_HEAD, cells))
    return Row(
        e.role if e.role != "other" else ("failed" if e.failed else ""), [by_column[c] for c in columns]
    )


def _knob_class(knob: str) -> str:
    return "" if knob in ("batch_size", "num_workers") else "text"


# --- the answer ---------------------------------------------------------------------------------------------


def _cards(view: View) -> list[tuple[str, str]]:
    """The answer in four or five numbers: the pick, its speed, speed-up, loss and energy per token."""
    base, winner, facts = view.baseline, view.winner, view.facts
    lo_hi = view.summary.best.tokens_per_s_spread if view.summary.best else []
    spread = f"range {fmt_tps(lo_hi[0])}–{fmt_tps(lo_hi[1])}" if len(lo_hi) == 2 else ""
    pick = winner or base
    cards = [
        (pick.label if winner else "the baseline stays", "answer"),
        (
            f"{fmt_tps(pick.tps)} {pick.per_s}",
            _speed_note(spread or f"baseline {fmt_tps(base.tps)} {base.per_s}", pick),
        ),
        (
            f"{pick.speedup:.2f}×" if winner and pick.speedup else "1.00×",
            " · ".join(
                filter(
                    None, [f"vs baseline {fmt_tps(base.tps)} {base.per_s}", one_run_text(view.summary.best)]
                )
            ),
        ),
        (
            f"val loss {fmt_loss(pick.loss)}{metrics_text(_metrics_of(view, pick))}",
            facts.loss_limit.sentence(seeds=False) if facts.loss_limit else "limit —",
        ),
    ]
    if pick.jpt is not None:
        per = view.heading("J/token").removeprefix("J")  # /token, or the workload's unit: /image
        cards.append((f"{fmt_jpt(pick.jpt)}{per}", f"baseline {fmt_jpt(base.jpt)}{per}"))
    _, seconds, _ = planned_cost(view.summary)
    if seconds is not None:
        tokens = view.summary.planned_tokens
        run = f"{tokens:,} {view.summary.unit}" if tokens else "the planned run"
        cards.append((fmt_seconds(seconds), f"to train {run}, compile + warm-up included"))
    return cards


def _metrics_of(view: View, pick: Entry) -> dict[str, float] | None:
    """The workload's own val figures (accuracy, ...) of the answer: the winner's, else the baseline's."""
    best = view.summary.best
    return best.val_metrics if pick.role == "winner" and best else view.summary.baseline.val_metrics


def _speed_note(note: str, pick: Entry) -> str:
    """The speed card's small print: its range (or the baseline's speed), and its MFU where it has one."""
    return f"{note} · {fmt_mfu(pick.mfu)} MFU" if pick.mfu is not None else note


def _no_telemetry_reason(summary: Summary, facts: Facts) -> str:
    """Why there is no telemetry, said once: a telemetry notice also listed under Notices is pointed to."""
    notice = summary.telemetry.notice
    if not facts.on_gpu:
        return "the search ran on CPU: there is no GPU to sample"
    if notice:
        return "see Notices" if notice in summary.notices else short_ids(notice)
    if "telemetry" not in summary.model_fields_set:
        return "this summary.json has no telemetry section"
    if not summary.telemetry.available:
        return "GPU telemetry was unavailable"
    return "no timeline was recorded for the winner's or the baseline's re-measure runs"


def _decision(summary: Summary, facts: Facts) -> tuple[str, str]:
    """Whether GPU telemetry changed the decision: (Yes / No, why)."""
    if summary.selection.telemetry_changed_decision:
        return "Yes", "GPU energy per token (J/token) changed the decision; see the reasons above."
    if summary.telemetry.available or any(t.joules_per_token is not None for t in summary.trials):
        return "No", "speed and simplicity decided; energy per token did not change the choice."
    return "No", f"there was no GPU telemetry ({_no_telemetry_reason(summary, facts)})."


# --- GPU telemetry ------------------------------------------------------------------------------------------


def _owner(trial_id: str, trial: TrialRow | None, best_id: str | None) -> tuple[str, str]:
    """(whose run it is: 'winner', 'baseline' or the finalist's id; the name the page gives it)."""
    finalist = (trial.finalist if trial else None) or trial_id.split("/")[0]
    if finalist == BASELINE_ID:
        return "baseline", f"baseline ({trial_id})"
    if finalist == best_id:
        return "winner", f"winner {finalist} ({trial_id})"
    return finalist, f"{finalist} ({trial_id})"


def _timelines(summary: Summary) -> list[timelines.Timeline]:
    """The recorded timelines, winner first, then the baseline; times from each run's first sample."""
    trials = {t.id: t for t in summary.trials}
    best_id = summary.best.id if summary.best else None
    owned = []
    for trial_id, samples in summary.telemetry.timelines.items():
        points = [p for p in samples if is_num(p.get("t"))]
        if points:
            owned.append((*_owner(trial_id, trials.get(trial_id), best_id), trial_id, points))
    owned.sort(key=lambda o: (o[0] != "winner", o[0] != "baseline", o[2]))
    spare = itertools.cycle(charts.SPARE_COLORS)
    return [
        timelines.Timeline(
            name, charts.ROLE_COLORS.get(role) or next(spare), trials.get(tid), _since_first(points)
        )
        for role, name, tid, points in owned
    ]


def _since_first(points: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [{**p, "t": p["t"] - points[0]["t"]} for p in points]


def _stats(line: timelines.Timeline) -> list[Any]:
    """What one run's timeline shows in numbers, and whether the search trusted its telemetry."""

    def mean(key: str, unit: str) -> str:
        values = line.values(key)
        return f"{statistics.fmean(values):.0f}{unit}" if values else DASH

    trial, temps, throttled = line.trial, line.values("temp_c"), line.values("throttled")
    trusted = trial.telemetry_trusted if trial else None
    note = trial.telemetry_note if trial else None
    return [
        line.name,
        len(line.points),
        fmt_seconds(line.points[-1]["t"]),
        mean("util_gpu", "%"),
        mean("util_mem", "%"),
        mean("power_w", " W"),
        fmt_mem(max(line.values("mem_used_mb"), default=None)),
        f"{max(temps):.0f} °C" if temps else DASH,
        f"{statistics.fmean(throttled):.0%}" if throttled else DASH,
        max(line.values("processes"), default=DASH),
        fmt_jpt(trial.joules_per_token if trial else None),
        "trusted" if trusted else note or ("untrusted" if trusted is False else DASH),
    ]


def _telemetry(summary: Summary, facts: Facts) -> dict[str, Any]:
    lines = _timelines(summary)
    if not lines:
        return {"panels": [], "no_telemetry": _no_telemetry_reason(summary, facts)}
    return {
        "panels": [timelines.timeline_panel(key, label, unit, lines) for key, label, unit in TIMELINE_PANELS],
        "timeline_legend": timelines.timeline_legend(lines),
        "stats_head": STATS_HEAD,
        "stats": [_stats(line) for line in lines],
    }


# --- the page -----------------------------------------------------------------------------------------------


def _plots(view: View) -> dict[str, list[charts.Plot]]:
    styles, entries, facts = charts.Styles(view.entries), view.entries, view.facts
    bars = [charts.plot_speedup(entries, facts), charts.plot_energy(entries)]
    return {
        "scatter_plots": [
            charts.plot_batch(entries, styles, facts),
            charts.plot_pareto(entries, styles, facts),
        ],
        "bar_plots": [p for p in bars if p],
    }


def _sections(view: View) -> dict[str, Any]:
    """The lists and key/value tables below the plots."""
    summary = view.summary
    rejected = [
        Markup("<strong>{}</strong>: {}").format(e.label, in_unit(e.reason, e.unit))
        for e in view.entries[1:]
        if e.reason
    ]
    return {
        "rejected": rejected,
        "notices": view.notices,
        "gpus": view.gpus,
        "usage_head": USAGE_HEAD,
        "measured": [_inline(in_unit(line, summary.unit)) for line in measurement_notes(summary)],
        "run_command": view.run_command,
        "cache_note": _inline(view.cache_note) if view.cache_note else "",
        "command": summary.command,
        "timings": [(phase, fmt_seconds(s)) for phase, s in summary.timings.items()],
        "hardware": view.hardware,
        "versions": list(summary.versions.items()),
    }


def _answer(view: View) -> dict[str, Any]:
    """The page's head and its answer section."""
    summary, facts = view.summary, view.facts
    hardware = summary.hardware  # free-form: the GPU's name is under either key
    return {
        "device": hardware.get("gpu") or hardware.get("gpu_name") or ("GPU" if facts.on_gpu else "CPU"),
        "runs": len(summary.trials),
        "winner": view.winner,
        "answer": view.answer,
        "profile": answer_line(summary),
        "recipe": recipe_line(summary),
        "loss_check_note": view.loss_check_note,
        "cards": _cards(view),
        "changes": view.changes,
        "reasons": summary.selection.reasons,
        "decision": _decision(summary, facts),
    }


def render_html(summary: Summary | Mapping[str, Any]) -> str:
    """The whole report as one self-contained HTML page."""
    view = View.of(summary)
    columns = view.columns(TABLE_HEAD)
    found = costs(view.summary, times="×")
    return _ENV.get_template("report.html.j2").render(
        css=Markup((HERE / "static" / "report.css").read_text()),
        js=Markup((HERE / "static" / "report.js").read_text()),
        head=[(view.heading(h), "text" if h in TEXT_COLUMNS else "") for h in columns],
        rows=[_row(e, view.facts, columns) for e in view.entries],
        trust_notes=trust_notes(view.entries),
        facts=view.facts,
        unit=view.summary.unit,
        **_answer(view),
        **_plots(view),
        **_telemetry(view.summary, view.facts),
        **_sections(view),
        costs=found,
        finalist_head=found.head if found else FINALIST_HEAD,
        break_even_head=BREAK_EVEN_HEAD,
    )
