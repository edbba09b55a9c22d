"""report.md from summary.json: the answer, the evidence table, why the rest lost, and how it was measured.

Reads only the summary dict (so a report can be re-rendered from a saved summary.json); `write_reports` is
the one entry point the search calls, and the place where other formats plug in.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from pathlib import Path
from typing import Any

from tuner.select import BASELINE_ID, FAILED_STATUSES, RUN_ONLY_FIELDS, SPEED_ONLY_KNOBS, freeze, knob_diff

TABLE_COLUMNS = (
    "Config",
    "Batch",
    "Workers",
    "Precision",
    "Compile",
    "Kernels",
    "Tok/s",
    "VRAM",
    "Loss",
    "vs baseline",
)
# Knob shown in each table column after "Config".
COLUMN_KNOBS = ("batch_size", "num_workers", "precision", "compile", "kernels")
PHASES = ("baseline", "screen", "loss_check", "remeasure")
DASH = "—"


# --- formatting -------------------------------------------------------------------------------------------


def _num(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def fmt_tps(value: Any) -> str:
    return f"{value:,.0f}" if _num(value) else DASH


def fmt_mem(mb: Any) -> str:
    if not _num(mb):
        return DASH
    return f"{mb:,.0f} MiB" if mb < 1024 else f"{mb / 1024:.1f} GiB"


def fmt_loss(value: Any) -> str:
    return f"{value:.4f}" if _num(value) else DASH


def fmt_seconds(seconds: Any) -> str:
    if not _num(seconds):
        return DASH
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h {minutes:02d}m {secs:02d}s"
    return f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"


def phase_of(trial: dict) -> str | None:
    """A trial's phase without its round number: the search records loss checks as loss_check_0, _1, ..."""
    phase = trial.get("phase")
    return re.sub(r"_\d+$", "", phase) if isinstance(phase, str) else phase


def _cell(value: Any) -> str:
    return DASH if value is None else str(value).replace("|", "\\|")


# --- one row per distinct config ----------------------------------------------------------------------------


class _Row:
    """Every trial of one config across the phases, reduced to the numbers the report shows."""

    def __init__(self, config: dict):
        self.config = config
        self.trials: list[dict] = []

    @property
    def ids(self) -> list[str]:
        return [str(t["id"]) for t in self.trials]

    @property
    def label(self) -> str:
        return self.ids[0]

    @property
    def failure(self) -> dict | None:
        """The first trial of this config that ran out of memory, went NaN or errored."""
        return next((t for t in self.trials if t.get("status") in FAILED_STATUSES), None)

    @property
    def status(self) -> str:
        if self.failure:
            return self.failure["status"]
        statuses = [t.get("status") for t in self.trials]
        return "ok" if "ok" in statuses or not statuses else statuses[0]

    @property
    def failed(self) -> bool:
        return self.failure is not None

    @property
    def feasible(self) -> bool | None:
        verdicts = [t.get("feasible") for t in self.trials]
        return False if False in verdicts else (True if True in verdicts else None)

    def _values(self, key: str, phases: tuple[str, ...]) -> list[float]:
        return [t[key] for t in self.trials if phase_of(t) in phases and _num(t.get(key))]

    @property
    def tokens_per_s(self) -> float | None:
        # Exclusive re-measurements beat the brief screen; loss-check runs share a GPU: their speed is noise.
        for phases in (("remeasure",), ("screen", "baseline")):
            values = self._values("tokens_per_s", phases)
            if values:
                return statistics.median(values)
        return None

    @property
    def val_loss(self) -> float | None:
        for phases in (("loss_check", "baseline"), PHASES):
            values = self._values("val_loss", phases)
            if values:
                return values[0]
        return None

    @property
    def peak_mem_mb(self) -> float | None:
        values = self._values("peak_mem_mb", PHASES)
        return max(values) if values else None

    def first(self, key: str) -> Any:
        return next((t[key] for t in self.trials if t.get(key) not in (None, "")), None)


def _identity(config: dict, baseline: dict) -> Any:
    full = {**baseline, **config}
    return freeze({k: v for k, v in full.items() if k not in RUN_ONLY_FIELDS})


def _rows(summary: dict) -> tuple[_Row, list[_Row], _Row | None]:
    """(baseline row, other rows in report order: winner, the rest by speed, failed last; winner row)."""
    base_cfg = (summary.get("baseline") or {}).get("config") or {}
    best = summary.get("best")
    rows: dict[Any, _Row] = {_identity(base_cfg, base_cfg): _Row(base_cfg)}
    for trial in summary.get("trials") or []:
        key = _identity(trial.get("config") or {}, base_cfg)
        rows.setdefault(key, _Row(trial.get("config") or {})).trials.append(trial)
    baseline = rows.pop(_identity(base_cfg, base_cfg))
    winner = None
    if best:
        winner = next((r for r in rows.values() if best.get("id") in r.ids), None)
        winner = winner or rows.get(_identity(best.get("config") or {}, base_cfg))
    others = [r for r in rows.values() if r is not winner]
    speed = lambda r: -(r.tokens_per_s if r.tokens_per_s is not None else -math.inf)  # noqa: E731
    ordered = sorted((r for r in others if not r.failed), key=speed) + [r for r in others if r.failed]
    return baseline, ([winner] if winner else []) + ordered, winner


# --- sections -----------------------------------------------------------------------------------------------


def _answer(summary: dict, winner: _Row | None) -> str:
    base = summary.get("baseline") or {}
    best = summary.get("best")
    tol = summary.get("tolerance") or {}
    mode, value = tol.get("mode", "absolute"), tol.get("value", DASH)
    limit = f"limit {fmt_loss(tol.get('limit'))}: {mode} tolerance {value}"
    base_tps, base_loss = fmt_tps(base.get("tokens_per_s")), fmt_loss(base.get("val_loss"))
    if not best or not _changed(best.get("config") or {}, base.get("config") or {}):
        return (
            "No config beat the baseline within tolerance; the baseline "
            f"({base_tps} tok/s, val loss {base_loss}) stays the answer ({limit})."
        )
    name = best.get("id") or (winner.label if winner else "the best config")
    speedup = best.get("speedup")
    lo_hi = best.get("tokens_per_s_spread") or []
    spread = f" (range {fmt_tps(lo_hi[0])}–{fmt_tps(lo_hi[1])})" if len(lo_hi) == 2 else ""
    versus = f"{speedup:.2f}x the baseline's" if _num(speedup) else "against the baseline's"
    return (
        f"**{name}** is the fastest config within tolerance: "
        f"{fmt_tps(best.get('tokens_per_s'))} tok/s{spread}, "
        f"{versus} {base_tps} tok/s. Its validation loss is {fmt_loss(best.get('val_loss'))} against the "
        f"baseline's {base_loss} ({limit})."
    )


def _changed(config: dict, baseline: dict) -> dict:
    return {k: v for k, v in knob_diff(config, baseline).items() if k not in RUN_ONLY_FIELDS}


def _table(summary: dict, baseline: _Row, rows: list[_Row], winner: _Row | None) -> list[str]:
    base = summary.get("baseline") or {}
    base_cfg = base.get("config") or {}
    best = summary.get("best") or {}
    limit = (summary.get("tolerance") or {}).get("limit")
    base_tps = base.get("tokens_per_s")

    def line(label: str, row: _Row, tps: Any, loss: Any, ratio: Any) -> str:
        knobs = [row.config.get(k, base_cfg.get(k)) for k in COLUMN_KNOBS]
        loss_text = fmt_loss(loss)
        if _num(loss) and _num(limit) and loss > limit:
            loss_text += " (over limit)"
        if not _num(ratio) and _num(tps) and _num(base_tps) and base_tps > 0:
            ratio = tps / base_tps
        cells = [label, *knobs, fmt_tps(tps), fmt_mem(row.peak_mem_mb), loss_text]
        cells.append(f"{ratio:.2f}x" if _num(ratio) else DASH)
        return "| " + " | ".join(_cell(c) for c in cells) + " |"

    out = ["| " + " | ".join(TABLE_COLUMNS) + " |", "|" + "---|" * len(TABLE_COLUMNS)]
    out.append(line(BASELINE_ID, baseline, base_tps, base.get("val_loss"), 1.0))
    for row in rows:
        if row is winner:
            tps = best.get("tokens_per_s", row.tokens_per_s)
            out.append(
                line(
                    f"**{row.label}** (winner)",
                    row,
                    tps,
                    best.get("val_loss", row.val_loss),
                    best.get("speedup"),
                )
            )
            continue
        label = row.label if row.status == "ok" else f"{row.label} ({row.status})"
        out.append(line(label, row, row.tokens_per_s, row.val_loss, None))
    return out


def _rejection(row: _Row, summary: dict) -> str:
    """Why `row` lost, most decisive cause first."""
    limit = (summary.get("tolerance") or {}).get("limit")
    rejected = (summary.get("selection") or {}).get("rejected") or {}
    if row.failure:
        where = {"loss_check": " in its loss check", "remeasure": " while re-measured"}.get(
            phase_of(row.failure), ""
        )
        if row.status == "oom":
            peak = f" (peak {fmt_mem(row.peak_mem_mb)})" if row.peak_mem_mb else ""
            return f"out of memory{where}{peak}"
        if row.status == "nan":
            return f"the loss became NaN{where}"
        lines = str(row.failure.get("error") or "").strip().splitlines()
        return f"error{where}: {lines[-1] if lines else 'no message'}"
    checked_by = row.first("loss_checked_by")
    via = f" (loss run of {checked_by})" if checked_by and checked_by not in row.ids else ""
    if row.feasible is False:
        loss = row.val_loss
        if _num(loss) and _num(limit) and loss > limit:
            return f"val loss {fmt_loss(loss)} over the limit {fmt_loss(limit)} by {loss - limit:.4f}{via}"
        return f"loss check failed{via}"
    for trial_id in row.ids:
        if trial_id in rejected:
            return rejected[trial_id]
    if row.status == "stopped":
        return f"stopped early: slower than the early-stop threshold ({fmt_tps(row.tokens_per_s)} tok/s)"
    if row.feasible is None:
        return f"slower ({fmt_tps(row.tokens_per_s)} tok/s in the screen): its loss was never checked"
    if any(phase_of(t) == "remeasure" for t in row.trials):
        return f"re-measured at {fmt_tps(row.tokens_per_s)} tok/s but not chosen"
    return f"slower ({fmt_tps(row.tokens_per_s)} tok/s in the screen): not among the re-measured finalists"


def _measurement(summary: dict) -> list[str]:
    m = dict(summary.get("measurement") or {})
    tol = summary.get("tolerance") or {}
    steps, repeats = m.pop("screen_steps", None), m.pop("repeats", None)
    speed_knobs = ", ".join(sorted(SPEED_ONLY_KNOBS))
    out = [
        "- Baseline: the seed config trained to the full token budget.",
        f"- Speed screen: each config ran {steps or 'a few'} steady-state steps alone on a whole GPU "
        "(exclusive); warm-up and compile steps are not timed; the loss is not judged here.",
        "- Loss check: the fastest config per set of loss-relevant knobs trained to the full token budget "
        "on a shared GPU (its speed is not used). Its val loss stands for every config that differs from it "
        f"only in speed knobs ({speed_knobs}).",
        f"- Re-measure: the top feasible configs and the baseline, {repeats or 'several'} exclusive runs "
        "each; Tok/s is their median, and configs whose ranges overlap count as tied.",
        "- Tok/s in the table: the re-measured median where there is one, else the screen's number.",
        f"- Feasible: val loss <= {fmt_loss(tol.get('limit'))} (baseline + {tol.get('mode', 'absolute')} "
        f"tolerance {tol.get('value', DASH)}).",
    ]
    out += [f"- {key}: {value}" for key, value in m.items()]
    return out


def _mapping(title: str, values: dict | None) -> list[str]:
    if not values:
        return []
    return [f"## {title}", "", *(f"- {key}: {value}" for key, value in values.items()), ""]


def render_markdown(summary: dict) -> str:
    base_cfg = (summary.get("baseline") or {}).get("config") or {}
    best = summary.get("best")
    baseline, rows, winner = _rows(summary)
    out = ["# Tuning report", "", _answer(summary, winner), "", "## Configs compared", ""]
    out += _table(summary, baseline, rows, winner)
    out.append("")

    diff = _changed(best.get("config") or {}, base_cfg) if best else {}
    if diff:
        out += ["## What the winner changes", ""]
        out += [f"- {name}: {old} -> {new}" for name, (old, new) in diff.items()]
        out.append("")

    selection = summary.get("selection") or {}
    if selection.get("reasons"):
        out += ["## How the winner was chosen", "", *(f"- {reason}" for reason in selection["reasons"])]
        if selection.get("telemetry_changed_decision"):
            out.append("- GPU energy telemetry (J/token) changed the decision.")
        out.append("")

    losers = [r for r in rows if r is not winner]
    if losers:
        out += ["## Why others were rejected", ""]
        out += [f"- {row.label}: {_rejection(row, summary)}" for row in losers]
        out.append("")

    if summary.get("notices"):
        out += ["## Notices", "", *(f"- {notice}" for notice in summary["notices"]), ""]
    out += ["## How each number was measured", "", *_measurement(summary), ""]

    best_yaml = summary.get("best_yaml") or "OUT/best.yaml"
    out += ["## Run it", "", "```", f"python -m trainables.train --config {best_yaml}", "```", ""]
    if summary.get("command"):
        out += ["The search that produced this report:", "", "```", summary["command"], "```", ""]

    timings = summary.get("timings") or {}
    if timings:
        out += ["## Time per phase", "", "| Phase | Time |", "|---|---|"]
        out += [f"| {phase} | {fmt_seconds(seconds)} |" for phase, seconds in timings.items()]
        out.append("")
    out += _mapping("Hardware", summary.get("hardware"))
    out += _mapping("Versions", summary.get("versions"))
    return "\n".join(out).rstrip() + "\n"


def write_reports(out_dir: str | Path, summary: dict) -> list[Path]:
    """Write report.md (and report.html once tuner.report_html exists); return the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    md = out / "report.md"
    md.write_text(render_markdown(summary))
    written = [md]
    try:
        from tuner.report_html import render_html
    except ModuleNotFoundError as err:
        if err.name != "tuner.report_html":  # a missing dependency inside it is a real error
            raise
    else:
        html = out / "report.html"
        html.write_text(render_html(summary))
        written.append(html)
    return written


def main(argv: list[str] | None = None) -> int:
    """`python -m tuner.report OUT`: rebuild OUT/report.md and OUT/report.html from OUT/summary.json."""
    parser = argparse.ArgumentParser(
        prog="python -m tuner.report",
        description="Rebuild report.md and report.html from OUT/summary.json without rerunning the search.",
    )
    parser.add_argument("out", help="the search's output directory (holds summary.json)")
    args = parser.parse_args(argv)
    path = Path(args.out) / "summary.json"
    try:
        summary = json.loads(path.read_text())
    except OSError as err:
        print(f"error: cannot read {path}: {err.strerror or err}", file=sys.stderr)
        return 2
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError
        print(f"error: {path} is not valid JSON: {err}", file=sys.stderr)
        return 2
    if not isinstance(summary, dict):
        print(f"error: {path} holds a JSON {type(summary).__name__}, not a summary object", file=sys.stderr)
        return 2
    for written in write_reports(args.out, summary):
        print(written)
    return 0


if __name__ == "__main__":
    sys.exit(main())
