"""report.md: the answer, the evidence table, what the planned run costs, why the rest lost, and how each
number was measured."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import tuner.report.view as view
from tuner.report.cost_section import BREAK_EVEN_HEAD, costs
from tuner.report.entry import COLUMN_KNOBS, Entry, loss_cell, speedup_text, tps_text, trust_notes
from tuner.report.fmt import DASH, fmt_mem, fmt_seconds, fmt_warmup
from tuner.report.gpu_section import USAGE_HEAD
from tuner.report.horizon_section import HEAD as HORIZON_HEAD
from tuner.report.horizon_section import horizon_lines
from tuner.report.measured import measurement_notes
from tuner.report.mfu import fmt_mfu
from tuner.report.profile import answer_lines
from tuner.report.recipe_section import recipe_lines
from tuner.report.units import in_unit
from tuner.state.records import Summary


def _cell(value: Any) -> str:
    return DASH if value is None else str(value).replace("|", "\\|")


def _label(e: Entry) -> str:
    if e.role == "winner":
        return f"**{e.label}** (winner)"
    return e.label if e.role == "baseline" or e.status == "ok" else f"{e.label} ({e.status})"


def _cells(e: Entry, report: view.View) -> dict[str, Any]:
    """The entry's cell under each of view.TABLE_COLUMNS."""
    loss, trained = loss_cell(e, report.facts)
    ratio = speedup_text(e)
    knobs = [e.config[k] for k in COLUMN_KNOBS]
    cells = [_label(e), *knobs, tps_text(e), fmt_mfu(e.mfu), fmt_warmup(e.warmup), fmt_mem(e.mem)]
    return dict(zip(view.TABLE_COLUMNS, [*cells, f"{loss}, {trained}" if trained else loss, ratio]))


def _row(cells: list[Any]) -> str:
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _grid(head: tuple[str, ...], rows: list[list[Any]]) -> list[str]:
    return [_row(list(head)), "|" + "---|" * len(head), *(_row(r) for r in rows)]


def _table(report: view.View) -> list[str]:
    columns = report.columns(view.TABLE_COLUMNS)
    rows = [_cells(e, report) for e in report.entries]
    notes = [line for note in trust_notes(report.entries) for line in ("", note)]
    head = tuple(report.heading(c) for c in columns)  # in the workload's unit: Images/s
    return _grid(head, [[cells[c] for c in columns] for cells in rows]) + notes


def _changes(report: view.View) -> list[str]:
    """Under the table: every knob each config sets otherwise than the baseline (columns show only some)."""
    lines = [f"- {_label(e)}: {e.changed_knobs() or 'the baseline config'}" for e in report.entries[1:]]
    return ["", "Knobs each config changes from the baseline:", "", *lines] if lines else []


def _gpus(report: view.View) -> list[str]:
    found = report.gpus
    if found is None:
        return []
    lines = [found.intro, ""] + (_grid(USAGE_HEAD, found.usage) + [""] if found.usage else [])
    for population in found.populations:
        lines += [population.sentence, "", *_grid(tuple(population.head), population.rows), ""]
    return _section("GPUs", lines[:-1])


def _section(title: str, lines: list[str]) -> list[str]:
    return [f"## {title}", "", *lines, ""] if lines else []


def _bullets(title: str, items: list[Any]) -> list[str]:
    return _section(title, [f"- {item}" for item in items])


def _chosen(summary: Summary) -> list[str]:
    reasons = list(summary.selection.reasons)
    if reasons and summary.selection.telemetry_changed_decision:
        reasons.append("GPU energy telemetry (J/token) changed the decision.")
    return _bullets("How the winner was chosen", reasons)


def _costs(summary: Summary) -> list[str]:
    found = costs(summary)
    if found is None:
        return []
    finalists = [
        [f"**{r.label}** (winner)" if r.role == "winner" else r.label, *r.cells] for r in found.finalists
    ]
    lines = [found.intro, ""] + (_grid(found.head, finalists) if finalists else [])
    if found.break_even:
        lines += ["", "### Break-even", "", found.break_even_intro, ""]
        lines += _grid(BREAK_EVEN_HEAD, found.break_even)
    return _section("What the planned run costs", lines)


def _run_it(report: view.View) -> list[str]:
    out = _section("Run it", ["```", report.run_command, "```"])
    if report.cache_note:
        out += [report.cache_note, ""]
    if report.summary.command:
        out += ["The search that produced this report:", "", "```", report.summary.command, "```", ""]
    return out


def _timings(summary: Summary) -> list[str]:
    rows = [f"| {phase} | {fmt_seconds(seconds)} |" for phase, seconds in summary.timings.items()]
    return _section("Time per phase", ["| Phase | Time |", "|---|---|", *rows]) if rows else []


def render_markdown(summary: Summary | Mapping[str, Any]) -> str:
    report = view.View.of(summary)
    summary = report.summary

    def said(lines: list[str]) -> list[str]:  # the report's own sentences, in the workload's unit
        return [in_unit(line, summary.unit) for line in lines]

    out = ["# Tuning report", "", *said([report.answer, "", *answer_lines(summary), *recipe_lines(summary)])]
    out += [report.loss_check_note, ""] if report.loss_check_note else []
    out += _section("Configs compared", said(_table(report)) + _changes(report))
    out += _bullets(HORIZON_HEAD, said(horizon_lines(summary)))
    changes = [f"{k}: {old} -> {new}" for k, (old, new) in report.changes.items()]
    out += _bullets("What the winner changes", changes) + said(_chosen(summary) + _costs(summary))
    out += _bullets("Why others were rejected", said([f"{e.label}: {e.reason}" for e in report.losers]))
    out += _bullets("Notices", report.notices) + _gpus(report)
    out += _bullets("How each number was measured", said(measurement_notes(summary)))
    out += _run_it(report) + _timings(summary)
    out += _bullets("Hardware", [f"{key}: {value}" for key, value in report.hardware])
    out += _bullets("Versions", [f"{key}: {value}" for key, value in summary.versions.items()])
    return "\n".join(out).rstrip() + "\n"
