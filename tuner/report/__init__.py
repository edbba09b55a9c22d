"""The search's reports, rebuilt from summary.json alone: report.md and a self-contained report.html.

view.py reduces the summary to what both show (with rows.py's one row per config, entry.py's how each
config is shown, answer.py's first sentences, measured.py's how each number was measured, cost_section.py's
what the planned run costs, gpu_section.py's GPU use per phase and whether a host's GPUs agree, fmt.py's
formatting); markdown.py and html.py render it (html.py with charts.py's matplotlib plots of the configs and
timelines.py's GPU telemetry panels). `write_reports` is the one entry point the search calls.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tuner.report.fmt import as_summary, fmt_jpt, fmt_loss, fmt_mem, fmt_seconds, fmt_tps
from tuner.report.html import render_html
from tuner.report.markdown import render_markdown
from tuner.state.records import Summary

__all__ = [
    "fmt_jpt",
    "fmt_loss",
    "fmt_mem",
    "fmt_seconds",
    "fmt_tps",
    "render_html",
    "render_markdown",
    "write_reports",
]


def write_reports(out_dir: str | Path, summary: Summary | Mapping[str, Any]) -> list[Path]:
    """Write report.md and report.html into `out_dir`; return the paths written."""
    summary = as_summary(summary)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, render in (("report.md", render_markdown), ("report.html", render_html)):
        path = out / name
        path.write_text(render(summary))
        written.append(path)
    return written
