"""report.md: the answer, the evidence table, why the rest lost, and how each number was measured."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import tuner.report.view as view
from tuner.records import Summary


def _cell(value: Any) -> str:
    return view.DASH if value is None else str(value).replace("|", "\\|")


def _label(e: view.Entry) -> str:
    if e.role == "winner":
        return f"**{e.label}** (winner)"
    return e.label if e.role == "baseline" or e.status == "ok" else f"{e.label} ({e.status})"


def _line(e: view.Entry, facts: view.Facts) -> str:
    loss = view.fmt_loss(e.loss) + (" (over limit)" if facts.over_limit(e.loss) else "")
    ratio = f"{e.speedup:.2f}x" if e.speedup is not None else view.DASH
    cells = [_label(e), *(e.config[k] for k in view.COLUMN_KNOBS), view.fmt_tps(e.tps), view.fmt_mem(e.mem)]
    return "| " + " | ".join(_cell(c) for c in [*cells, loss, ratio]) + " |"


def _table(report: view.View) -> list[str]:
    columns = view.TABLE_COLUMNS
    head = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return head + [_line(e, report.facts) for e in report.entries]


def _section(title: str, lines: list[str]) -> list[str]:
    return [f"## {title}", "", *lines, ""] if lines else []


def _bullets(title: str, items: list[Any]) -> list[str]:
    return _section(title, [f"- {item}" for item in items])


def _chosen(summary: Summary) -> list[str]:
    reasons = list(summary.selection.reasons)
    if reasons and summary.selection.telemetry_changed_decision:
        reasons.append("GPU energy telemetry (J/token) changed the decision.")
    return _bullets("How the winner was chosen", reasons)


def _run_it(report: view.View) -> list[str]:
    out = _section("Run it", ["```", report.run_command, "```"])
    if report.summary.command:
        out += ["The search that produced this report:", "", "```", report.summary.command, "```", ""]
    return out


def _timings(summary: Summary) -> list[str]:
    rows = [f"| {phase} | {view.fmt_seconds(seconds)} |" for phase, seconds in summary.timings.items()]
    return _section("Time per phase", ["| Phase | Time |", "|---|---|", *rows]) if rows else []


def render_markdown(summary: Summary | Mapping[str, Any]) -> str:
    report = view.View.of(summary)
    summary = report.summary
    out = ["# Tuning report", "", view.answer(summary), "", *_section("Configs compared", _table(report))]
    changes = [f"{k}: {old} -> {new}" for k, (old, new) in report.changes.items()]
    out += _bullets("What the winner changes", changes) + _chosen(summary)
    out += _bullets("Why others were rejected", [f"{e.label}: {e.reason}" for e in report.losers])
    out += _bullets("Notices", summary.notices)
    out += _bullets("How each number was measured", view.measurement_notes(summary))
    out += _run_it(report) + _timings(summary)
    out += _bullets("Hardware", [f"{key}: {value}" for key, value in summary.hardware.items()])
    out += _bullets("Versions", [f"{key}: {value}" for key, value in summary.versions.items()])
    return "\n".join(out).rstrip() + "\n"
