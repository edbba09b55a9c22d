"""report.html from summary.json: report.md's answer and evidence, with plots, in one static file.

Self-contained so it opens offline and can be attached anywhere: inline CSS, SVG plots drawn here in
Python, and a few lines of vanilla JS that sort the table (the page reads the same without them). It reads
only the summary dict, and takes its rows, reasons and wording from tuner.report, so the two reports never
disagree. Every string from the summary goes through html.escape.
"""

from __future__ import annotations

import html
import math
import re
import statistics
from dataclasses import dataclass
from typing import Any

from tuner import report as md
from tuner.report import COLUMN_KNOBS, DASH, fmt_loss, fmt_mem, fmt_seconds, fmt_tps, phase_of
from tuner.select import BASELINE_ID, FAILED_STATUSES, SPEED_ONLY_KNOBS

# Colours: precision picks the hue, the role (winner / baseline) a ring; failures are red.
PRECISION_COLORS = {"fp32": "#1971c2", "tf32": "#7048e8", "bf16": "#e8590c", "fp16": "#2f9e44"}
SPARE_COLORS = ("#0c8599", "#c2255c", "#5c940d", "#862e9c", "#495057")
COMPILE_SHAPES = {
    "none": "circle",
    "default": "square",
    "reduce-overhead": "triangle",
    "max-autotune": "diamond",
    "max-autotune-no-cudagraphs": "triangle-down",
}
SPARE_SHAPES = ("star", "cross")
WINNER, BASELINE, FEASIBLE, INFEASIBLE, UNKNOWN, FAILED = (
    "#e8590c",
    "#1971c2",
    "#4dabf7",
    "#ffa8a8",
    "#ced4da",
    "#c92a2a",
)
TIMELINE_PANELS = (  # (point field, title, unit)
    ("util_gpu", "GPU utilisation", "%"),
    ("power_w", "Power", "W"),
    ("mem_used_mb", "Memory used", "MiB"),
    ("temp_c", "Temperature", "°C"),
)
TABLE_HEAD = (*md.TABLE_COLUMNS, "J/token", "Status")


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _num(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _inline(markdown: str) -> str:
    """The markdown report's inline emphasis, escaped: **x** -> <strong>, `x` -> <code>."""
    text = _e(markdown)
    text = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", text)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", text)


def _si(value: float) -> str:
    """Axis numbers: 30K, 1.2M, 0.25."""
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= div:
            return f"{value / div:.3g}{unit}"
    return f"{round(value, 9):g}"


def _jpt(value: Any) -> str:
    return f"{value * 1e3:.3g} mJ" if _num(value) else DASH


# --- what the page knows about each config --------------------------------------------------------------


@dataclass
class _Facts:
    """How the search measured: the numbers every caption and tooltip quotes."""

    steps: Any
    warmup: Any
    repeats: Any
    fraction: Any
    on_gpu: bool
    limit: float | None
    base_loss: float | None
    base_tps: float | None

    @classmethod
    def of(cls, summary: dict) -> _Facts:
        m = summary.get("measurement") or {}
        hw = summary.get("hardware") or {}
        base = summary.get("baseline") or {}
        return cls(
            steps=m.get("screen_steps"),
            warmup=m.get("timing_warmup_steps"),
            repeats=m.get("repeats"),
            fraction=m.get("loss_check_gpu_fraction"),
            on_gpu=bool(hw.get("gpus") or hw.get("cuda")),
            limit=(summary.get("tolerance") or {}).get("limit"),
            base_loss=base.get("val_loss"),
            base_tps=base.get("tokens_per_s"),
        )

    @property
    def timed_steps(self) -> str:
        steps = f"{self.steps} timed steps" if self.steps else "a few timed steps"
        return steps + (f" after {self.warmup} untimed warm-up steps" if self.warmup else "")

    @property
    def shared_loss_runs(self) -> str:
        if not self.on_gpu:
            return "CPU, run beside other loss runs"
        share = f" ({self.fraction:g} of a GPU each)" if _num(self.fraction) else ""
        return f"GPU shared with other loss runs{share}"


def _runs(trials: list[dict], key: str) -> list[dict]:
    """The runs that give a config's `key`: its exclusive re-measurements, else its screen/baseline run
    (the same preference as tuner.report's Tok/s; shared loss-check runs never count for speed)."""
    for phases in (("remeasure",), ("screen", "baseline")):
        runs = [t for t in trials if phase_of(t) in phases and _num(t.get(key))]
        if runs:
            return runs
    return []


def _exclusivity(runs: list[dict], facts: _Facts) -> str:
    if not facts.on_gpu:
        cpu_shared = sum(1 for r in runs if r.get("cpu_shared"))
        if cpu_shared:
            return (
                f"the whole CPU share, but other processes used the CPU in {cpu_shared} of {len(runs)} runs"
            )
        return "exclusive: the whole CPU share (no GPU)"
    shared = sum(1 for r in runs if r.get("shared"))
    untrusted = sorted({str(r["telemetry_note"]) for r in runs if r.get("telemetry_note")})
    if shared:
        text = f"GPU shared with another process in {shared} of {len(runs)} runs (telemetry)"
    elif any("shared" in r for r in runs):
        text = "exclusive GPU (telemetry saw no other process)"
    else:
        text = "exclusive GPU by scheduling (no telemetry to confirm it)"
    return text + (f"; telemetry untrusted: {'; '.join(untrusted)}" if untrusted else "")


def _how(runs: list[dict], key: str, facts: _Facts, show: Any) -> str:
    """One line on how a config's `key` was measured: which runs, how many, their spread, exclusivity."""
    if not runs:
        return "not measured"
    values = [r[key] for r in runs]
    phase = phase_of(runs[0])
    if phase == "remeasure":
        spread = f" (range {show(min(values))}–{show(max(values))})" if len(values) > 1 else ""
        text = f"median of {len(runs)} exclusive re-measure runs{spread}, {facts.timed_steps} each"
    elif phase == "screen":
        text = f"one speed-screen run ({runs[0].get('id')}), {facts.timed_steps}"
    else:
        text = "the baseline's full run at the token budget"
    return f"{text}; {_exclusivity(runs, facts)}"


def _loss_how(trials: list[dict], role: str, facts: _Facts) -> str:
    if role == "baseline":
        return "the baseline's own full run at the token budget"
    own = next((t for t in trials if phase_of(t) == "loss_check" and _num(t.get("val_loss"))), None)
    if own:
        return f"loss-check run {own.get('id')}: full token budget, {facts.shared_loss_runs}"
    via = next((t.get("loss_checked_by") for t in trials if t.get("loss_checked_by")), None)
    knobs = ", ".join(sorted(SPEED_ONLY_KNOBS))
    if via == BASELINE_ID:
        return f"the baseline's loss: this config differs from it only in speed knobs ({knobs})"
    if via:
        return f"from loss-check run {via}, whose config differs from this one only in speed knobs ({knobs})"
    return "not loss-checked: the loss check ran for faster configs only"


@dataclass
class _Entry:
    """One distinct config as the page shows it: its values, how each was measured, and its verdict."""

    label: str
    role: str  # "baseline", "winner" or "other"
    config: dict  # every table knob, the baseline's where the config leaves it out
    changes: dict  # knob -> (baseline value, this value), over all knobs
    status: str
    feasible: bool | None
    tps: float | None
    loss: float | None
    mem: float | None
    jpt: float | None
    speedup: float | None
    how: dict  # "tps", "loss", "mem", "jpt" -> how that number was measured
    reason: str  # why it lost ("" for the winner and a baseline that stays)
    same_as: list[str]  # other screen trials that proposed this same config

    @property
    def failed(self) -> bool:
        return self.status in FAILED_STATUSES

    @property
    def verdict(self) -> str:
        if self.role != "other" or self.failed or self.status == "stopped":
            return self.role if self.role != "other" else self.status
        return {True: "feasible", False: "infeasible", None: "loss not checked"}[self.feasible]

    @property
    def color(self) -> str:
        if self.failed:
            return FAILED
        return {"winner": WINNER, "baseline": BASELINE}.get(self.role) or {
            True: FEASIBLE,
            False: INFEASIBLE,
        }.get(self.feasible, UNKNOWN)

    @property
    def tooltip(self) -> str:
        changes = ", ".join(f"{k}: {old} → {new}" for k, (old, new) in self.changes.items())
        parts = [self.label, changes or "the baseline's config", f"{fmt_tps(self.tps)} tok/s"]
        parts += [f"val loss {fmt_loss(self.loss)}", self.verdict]
        parts.append(f"same config as {', '.join(self.same_as)}" if self.same_as else "")
        return " · ".join(p for p in parts if p)


def _entries(summary: dict, facts: _Facts) -> list[_Entry]:
    """Baseline first, then the winner, the rest by speed, failed configs last (tuner.report's order)."""
    base = summary.get("baseline") or {}
    base_cfg = base.get("config") or {}
    best = summary.get("best") or {}
    baseline_row, rows, winner = md._rows(summary)
    out = []
    for row in [baseline_row, *rows]:
        role = "baseline" if row is baseline_row else "winner" if row is winner else "other"
        tps, loss, speedup = row.tokens_per_s, row.val_loss, None
        if role == "baseline":
            tps, loss, speedup = base.get("tokens_per_s", tps), base.get("val_loss", loss), 1.0
        elif role == "winner":
            tps, loss, speedup = (
                best.get("tokens_per_s", tps),
                best.get("val_loss", loss),
                best.get("speedup"),
            )
        if not _num(speedup) and _num(tps) and _num(facts.base_tps) and facts.base_tps > 0:
            speedup = tps / facts.base_tps
        speed_runs, energy_runs = _runs(row.trials, "tokens_per_s"), _runs(row.trials, "joules_per_token")
        energy = [r["joules_per_token"] for r in energy_runs]
        how = {
            "tps": _how(speed_runs, "tokens_per_s", facts, fmt_tps),
            "loss": _loss_how(row.trials, role, facts),
            "mem": "peak over all runs of this config: "
            + ("torch.cuda.max_memory_allocated" if facts.on_gpu else "process peak RSS"),
            "jpt": _how(energy_runs, "joules_per_token", facts, _jpt)
            + "; NVML energy over the timed window ÷ tokens processed in it",
        }
        stays = role == "baseline" and winner is None
        out.append(
            _Entry(
                label=BASELINE_ID if role == "baseline" else row.label,
                role=role,
                config={k: row.config.get(k, base_cfg.get(k)) for k in COLUMN_KNOBS},
                changes=md._changed(row.config, base_cfg),
                status=row.status,
                feasible=True if role == "baseline" else row.feasible,
                tps=tps if _num(tps) else None,
                loss=loss if _num(loss) else None,
                mem=row.peak_mem_mb,
                jpt=statistics.median(energy) if energy else None,
                speedup=speedup if _num(speedup) else None,
                how=how,
                reason="" if role == "winner" or stays else md._rejection(row, summary),
                same_as=[str(t["id"]) for t in row.trials[1:] if phase_of(t) == "screen"],
            )
        )
    return out


# --- SVG drawing -------------------------------------------------------------------------------------------


def _ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round-numbered ticks covering [lo, hi]."""
    raw = (hi - lo) / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw * (1 - 1e-9))
    first = math.ceil(lo / step - 1e-9) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


def _span(values: list[float], *, zero: bool = False, pad: float = 0.08) -> tuple[float, float]:
    lo, hi = (0.0 if zero else min(values)), max(values)
    if hi <= lo:
        widen = abs(hi) * 0.05 or 1.0
        return (lo if zero else lo - widen), hi + widen
    extra = (hi - lo) * pad
    return (lo if zero else lo - extra), hi + extra


def _marker(shape: str, x: float, y: float, fill: str, stroke: str, size: float = 6.0, width=1.3) -> str:
    s = size
    paint = f'fill="{fill}" stroke="{stroke}" stroke-width="{width}"'
    if shape == "circle":
        return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{s:.1f}" {paint}/>'
    if shape == "square":
        return f'<rect x="{x - s * 0.9:.1f}" y="{y - s * 0.9:.1f}" width="{s * 1.8:.1f}" height="{s * 1.8:.1f}" {paint}/>'
    points = {
        "triangle": ((0, -1.2), (1.1, 0.8), (-1.1, 0.8)),
        "triangle-down": ((0, 1.2), (1.1, -0.8), (-1.1, -0.8)),
        "diamond": ((0, -1.3), (1.1, 0), (0, 1.3), (-1.1, 0)),
        "star": (
            (0, -1.3),
            (0.35, -0.4),
            (1.25, -0.4),
            (0.5, 0.15),
            (0.8, 1.1),
            (0, 0.5),
            (-0.8, 1.1),
            (-0.5, 0.15),
            (-1.25, -0.4),
            (-0.35, -0.4),
        ),
        "cross": ((-1, -1), (1, 1), (0, 0), (1, -1), (-1, 1), (0, 0)),
    }[shape]
    path = " ".join(f"{x + dx * s:.1f},{y + dy * s:.1f}" for dx, dy in points)
    return f'<polygon points="{path}" {paint} stroke-linejoin="round"/>'


class _Chart:
    """One plot: data ranges mapped onto a pixel box, axes with ticks, and the SVG elements drawn into it."""

    def __init__(
        self,
        x_range: tuple[float, float],
        y_range: tuple[float, float],
        *,
        width: int = 560,
        height: int = 320,
        left: int = 64,
        right: int = 18,
        top: int = 14,
        bottom: int = 44,
        log2_x: bool = False,
    ):
        self.width, self.height, self.log2_x = width, height, log2_x
        self.box = (left, top, width - right, height - bottom)  # x0, y0, x1, y1
        scale = math.log2 if log2_x else float
        self.x_lo, self.x_hi = scale(x_range[0]), scale(x_range[1])
        self.y_lo, self.y_hi = y_range
        self.parts: list[str] = []

    def px(self, x: float) -> float:
        x0, _, x1, _ = self.box
        value = math.log2(x) if self.log2_x else x
        return x0 + (value - self.x_lo) / (self.x_hi - self.x_lo) * (x1 - x0)

    def py(self, y: float) -> float:
        _, y0, _, y1 = self.box
        return y1 - (y - self.y_lo) / (self.y_hi - self.y_lo) * (y1 - y0)

    def add(self, *parts: str) -> None:
        self.parts.extend(parts)

    def text(self, x: float, y: float, text: Any, anchor: str = "start", cls: str = "") -> None:
        klass = f' class="{cls}"' if cls else ""
        self.add(f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{klass}>{_e(text)}</text>')

    def point(self, shape: str, x: float, y: float, fill: str, stroke: str, title: str, **kw) -> None:
        marker = _marker(shape, self.px(x), self.py(y), fill, stroke, **kw)
        self.add(f"<g><title>{_e(title)}</title>{marker}</g>")

    def axes(self, x_ticks, y_ticks, x_fmt, y_fmt, x_label: str, y_label: str) -> None:
        x0, y0, x1, y1 = self.box
        for y in y_ticks:
            py = self.py(y)
            self.add(f'<line x1="{x0}" y1="{py:.1f}" x2="{x1}" y2="{py:.1f}" class="grid"/>')
            self.text(x0 - 6, py + 4, y_fmt(y), "end", "tick")
        for x in x_ticks:
            px = self.px(x)
            self.add(f'<line x1="{px:.1f}" y1="{y1}" x2="{px:.1f}" y2="{y1 + 4}" class="axis"/>')
            self.text(px, y1 + 17, x_fmt(x), "middle", "tick")
        self.add(f'<rect x="{x0}" y="{y0}" width="{x1 - x0}" height="{y1 - y0}" class="frame"/>')
        self.text((x0 + x1) / 2, self.height - 6, x_label, "middle", "label")
        self.add(
            f'<text transform="translate(14 {(y0 + y1) / 2:.1f}) rotate(-90)" text-anchor="middle" '
            f'class="label">{_e(y_label)}</text>'
        )

    def svg(self, label: str) -> str:
        body = "".join(self.parts)
        return (
            f'<svg viewBox="0 0 {self.width} {self.height}" '
            f'width="{self.width}" height="{self.height}" role="img" aria-label="{_e(label)}">'
            f"<title>{_e(label)}</title>{body}</svg>"
        )


def _swatch(shape: str, fill: str, stroke: str) -> str:
    return f'<svg width="14" height="14" viewBox="0 0 14 14" aria-hidden="true">{_marker(shape, 7, 7, fill, stroke, 4.5)}</svg>'


def _legend(items: list[tuple[str, str]]) -> str:
    return '<div class="legend">' + "".join(f"<span>{sw}{_e(text)}</span>" for sw, text in items) + "</div>"


def _figure(fig_id: str, title: str, body: str, caption: str, legend: str = "") -> str:
    return (
        f'<figure id="{fig_id}"><h3>{_e(title)}</h3>{body}{legend}'
        f'<figcaption class="how">{_e(caption)}</figcaption></figure>'
    )


def _empty(text: str) -> str:
    return f'<p class="note">{_e(text)}</p>'


class _Styles:
    """Colour per precision and shape per compile mode, stable across plots within one page."""

    def __init__(self, entries: list[_Entry]):
        precisions = dict.fromkeys(str(e.config.get("precision")) for e in entries)
        compiles = dict.fromkeys(str(e.config.get("compile")) for e in entries)
        spare_c, spare_s = iter(SPARE_COLORS * 4), iter(SPARE_SHAPES * 8)
        self.colors = {p: PRECISION_COLORS.get(p) or next(spare_c) for p in precisions}
        self.shapes = {c: COMPILE_SHAPES.get(c) or next(spare_s) for c in compiles}

    def color(self, entry: _Entry) -> str:
        return self.colors[str(entry.config.get("precision"))]

    def shape(self, entry: _Entry) -> str:
        return self.shapes[str(entry.config.get("compile"))]

    def draw(self, chart: _Chart, entry: _Entry, x: float, y: float) -> None:
        """Filled unless its loss is over the limit (hollow); the winner and the baseline get a ring."""
        color = self.color(entry)
        fill = "#fff" if entry.feasible is False else color
        if entry.role != "other":
            ring = WINNER if entry.role == "winner" else "#212529"
            chart.add(
                f'<circle cx="{chart.px(x):.1f}" cy="{chart.py(y):.1f}" r="11" fill="none" '
                f'stroke="{ring}" stroke-width="2.2"/>'
            )
            chart.text(
                chart.px(x) + 13,
                chart.py(y) - 8,
                entry.label if entry.role == "baseline" else "winner",
                cls="mark",
            )
        chart.point(self.shape(entry), x, y, fill, color, entry.tooltip)

    def legend(self, *extra: tuple[str, str]) -> str:
        items = [(_swatch("circle", c, c), p) for p, c in self.colors.items()]
        items += [(_swatch(s, "#868e96", "#868e96"), f"compile {c}") for c, s in self.shapes.items()]
        items.append((_swatch("circle", "#fff", "#495057"), "hollow: loss over the limit"))
        return _legend(items + list(extra))


# --- plots ------------------------------------------------------------------------------------------------


def _plot_batch(entries: list[_Entry], styles: _Styles, facts: _Facts) -> str:
    title = "Tokens/s against batch size"
    fast = [e for e in entries if e.tps is not None and _num(e.config.get("batch_size"))]
    failed = [e for e in entries if e.failed and e.tps is None and _num(e.config.get("batch_size"))]
    if not fast:
        return _figure("plot-batch", title, _empty("No config has both a batch size and a speed."), "")
    batches = sorted({float(e.config["batch_size"]) for e in fast + failed})
    log2 = batches[0] > 0 and batches[-1] / batches[0] >= 4
    lo, hi = (batches[0] / 1.4, batches[-1] * 1.4) if log2 else _span(batches)
    chart = _Chart((lo, hi), _span([e.tps for e in fast], zero=True), log2_x=log2)
    chart.axes(batches, _ticks(chart.y_lo, chart.y_hi), "{:g}".format, _si, "batch size", "tokens/s")
    # A faint line per precision and compile mode through its fastest config at each batch size.
    groups: dict[tuple, dict[float, float]] = {}
    for e in fast:
        group = groups.setdefault((str(e.config.get("precision")), str(e.config.get("compile"))), {})
        batch = float(e.config["batch_size"])
        group[batch] = max(group.get(batch, 0.0), e.tps)
    for (precision, _), best_at in groups.items():
        if len(best_at) > 1:
            path = " ".join(f"{chart.px(b):.1f},{chart.py(t):.1f}" for b, t in sorted(best_at.items()))
            chart.add(
                f'<polyline points="{path}" fill="none" stroke="{styles.colors[precision]}" '
                'stroke-opacity="0.35" stroke-width="1.5"/>'
            )
    for e in sorted(fast, key=lambda e: e.role != "other"):  # winner and baseline drawn on top
        styles.draw(chart, e, float(e.config["batch_size"]), e.tps)
    for e in failed:  # no speed: a red cross on the axis at its batch size (where OOM starts shows here)
        chart.point(
            "cross", float(e.config["batch_size"]), chart.y_lo, FAILED, FAILED, e.tooltip, size=5, width=2
        )
    legend = styles.legend(
        *([(_swatch("cross", FAILED, FAILED), "failed (oom / nan / error)")] if failed else [])
    )
    caption = (
        f"Tok/s per config: the median of its exclusive re-measure runs where it has them, else its one "
        f"exclusive speed-screen run ({facts.timed_steps}). Colour: precision; shape: compile mode; faint "
        "lines join the fastest config per batch size of each precision and compile mode. Hover a point for "
        "its config."
    )
    return _figure("plot-batch", title, chart.svg(title), caption, legend)


def _pareto_front(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other point beats on both speed (higher) and loss (lower), fastest first."""
    front, best_loss = [], math.inf
    for tps, loss in sorted(points, key=lambda p: (-p[0], p[1])):
        if loss < best_loss:
            front.append((tps, loss))
            best_loss = loss
    return front


def _plot_pareto(entries: list[_Entry], styles: _Styles, facts: _Facts) -> str:
    title = "Validation loss against tokens/s (the Pareto view)"
    shown = [e for e in entries if e.tps is not None and e.loss is not None]
    if not shown:
        return _figure("plot-pareto", title, _empty("No config has both a speed and a checked loss."), "")
    band = [v for v in (facts.base_loss, facts.limit) if _num(v)]
    speeds = [e.tps for e in shown]
    # From zero unless the speeds sit far from it (then zero would squash them into a corner).
    near_zero = min(speeds) < 0.5 * max(speeds)
    chart = _Chart(_span(speeds, zero=near_zero, pad=0.12), _span([e.loss for e in shown] + band, pad=0.15))
    chart.axes(
        _ticks(chart.x_lo, chart.x_hi), _ticks(chart.y_lo, chart.y_hi, 4), _si, _si, "tokens/s", "val loss"
    )
    x0, _, x1, _ = chart.box
    if len(band) == 2:
        top, bottom = chart.py(max(band)), chart.py(min(band))
        chart.parts.insert(
            0, f'<rect x="{x0}" y="{top:.1f}" width="{x1 - x0}" height="{bottom - top:.1f}" class="band"/>'
        )
        chart.add(f'<line x1="{x0}" y1="{top:.1f}" x2="{x1}" y2="{top:.1f}" class="limit"/>')
        chart.text(x1 - 4, top - 4, f"limit {fmt_loss(facts.limit)}", "end", "mark")
    front = _pareto_front([(e.tps, e.loss) for e in shown])
    if len(front) > 1:
        steps = []
        for (t1, l1), (t2, _) in zip(front, front[1:]):
            steps += [(t1, l1), (t2, l1)]
        steps.append(front[-1])
        path = " ".join(f"{chart.px(t):.1f},{chart.py(v):.1f}" for t, v in steps)
        chart.add(f'<polyline points="{path}" fill="none" class="front"/>')
    for e in sorted(shown, key=lambda e: e.role != "other"):
        styles.draw(chart, e, e.tps, e.loss)
    caption = (
        "Val loss at the full token budget: the baseline's own run, else the loss-check run of the config "
        f"(or of one differing only in speed knobs), {facts.shared_loss_runs}. Tok/s as in the table. Green "
        "band: baseline loss up to the tolerance limit; dashed: the Pareto front (no config is both faster "
        "and lower-loss than a point on it)."
    )
    return _figure("plot-pareto", title, chart.svg(title), caption, styles.legend())


def _hbars(rows: list[tuple[_Entry, float | None]], show, x_label: str, title: str, reference=None) -> str:
    """Horizontal bars, one per config, labelled with its id and main knobs; configs without a value
    (failed) get their status instead of a bar."""
    values = [v for _, v in rows if v is not None] + ([reference] if reference else [])
    labels = [
        f"{e.label}  {e.config.get('batch_size')} · {e.config.get('precision')} · {e.config.get('compile')}"
        for e, _ in rows
    ]
    left = min(300, 16 + 6.6 * max(len(s) for s in labels))
    chart = _Chart(
        _span(values or [1.0], zero=True, pad=0.18),
        (len(rows), 0),
        width=1120,
        height=34 + 22 * len(rows) + 34,
        left=int(left),
        top=8,
        bottom=40,
    )
    chart.axes(_ticks(chart.x_lo, chart.x_hi, 8), [], show, str, x_label, "")
    for i, ((entry, value), label) in enumerate(zip(rows, labels)):
        y = chart.py(i + 0.5)
        chart.text(chart.box[0] - 8, y + 4, label, "end", "tick bold" if entry.role == "winner" else "tick")
        if value is None:
            chart.text(chart.box[0] + 6, y + 4, entry.verdict, cls="fail")
            continue
        x0, width = chart.px(0), chart.px(value) - chart.px(0)
        chart.add(
            f'<g><title>{_e(entry.tooltip)}</title><rect x="{x0:.1f}" y="{y - 8:.1f}" width="{width:.1f}" '
            f'height="16" fill="{entry.color}" rx="2"/></g>'
        )
        chart.text(x0 + width + 5, y + 4, show(value), cls="tick")
    if reference:
        x = chart.px(reference)
        chart.add(f'<line x1="{x:.1f}" y1="{chart.box[1]}" x2="{x:.1f}" y2="{chart.box[3]}" class="limit"/>')
    return chart.svg(title)


def _role_legend() -> str:
    items = [
        (WINNER, "winner"),
        (BASELINE, "baseline"),
        (FEASIBLE, "loss within the limit"),
        (INFEASIBLE, "loss over the limit"),
        (UNKNOWN, "loss not checked / stopped early"),
    ]
    return _legend([(_swatch("square", color, color), text) for color, text in items])


def _plot_speedup(entries: list[_Entry], facts: _Facts) -> str:
    title = "Speed-up against the baseline"
    rows = [(e, e.speedup) for e in entries]
    caption = (
        f"Tok/s of each config ÷ the baseline's {fmt_tps(facts.base_tps)} tok/s (the median of its exclusive "
        "re-measure runs). Re-measured configs use their median, the others their one speed-screen run; "
        "the line marks 1×."
    )
    svg = _hbars(rows, lambda v: f"{v:.2f}×", "× baseline tokens/s", title, reference=1.0)
    return _figure("plot-speedup", title, svg, caption, _role_legend())


def _plot_energy(entries: list[_Entry]) -> str:
    title = "Energy per token"
    rows = [(e, e.jpt) for e in entries if e.jpt is not None]
    base = entries[0].jpt
    caption = (
        "GPU energy (NVML energy counter, else integrated power) over each run's timed window ÷ the tokens "
        "processed in it; the median of the exclusive re-measure runs where there are some, else the screen "
        "run. Lower is better; the line marks the baseline. Runs on a shared GPU are not trusted (see the "
        "table's tooltips)."
    )
    svg = _hbars(rows, _jpt, "energy per token", title, reference=base)
    return _figure("plot-energy", title, svg, caption, _role_legend())


# --- telemetry --------------------------------------------------------------------------------------------


def _points(timeline: Any) -> list[dict]:
    """A timeline's samples: the search stores the sampler's {"points": [...]}; a bare list is accepted."""
    points = timeline.get("points") if isinstance(timeline, dict) else timeline
    return [p for p in points or [] if isinstance(p, dict) and _num(p.get("t"))]


def _no_telemetry_reason(summary: dict, facts: _Facts) -> str:
    telemetry = summary.get("telemetry")
    if isinstance(telemetry, dict) and telemetry.get("notice"):
        return str(telemetry["notice"])
    if not facts.on_gpu:
        return "the search ran on CPU: there is no GPU to sample"
    if not isinstance(telemetry, dict):
        return "this summary.json has no telemetry section"
    if not telemetry.get("available"):
        return "GPU telemetry was unavailable"
    return "no timeline was recorded for the winner's or the baseline's re-measure runs"


def _timeline_owner(trial_id: str, trials: dict[str, dict], best_id: Any) -> tuple[str, str]:
    """(whose run it is: 'winner', 'baseline' or the finalist id, display name)."""
    trial = trials.get(trial_id) or {}
    finalist = str(trial.get("finalist") or trial_id.split("/")[0])
    if finalist == BASELINE_ID:
        return "baseline", f"baseline ({trial_id})"
    if best_id is not None and finalist == str(best_id):
        return "winner", f"winner {finalist} ({trial_id})"
    return finalist, f"{finalist} ({trial_id})"


def _throttled_spans(points: list[dict]) -> list[tuple[float, float]]:
    """(start, end) times of the runs of consecutive samples with clock throttling."""
    spans: list[tuple[float, float]] = []
    for i, p in enumerate(points):
        if not (_num(p.get("throttled")) and p["throttled"] > 0):
            continue
        gap = (
            (points[i + 1]["t"] - p["t"])
            if i + 1 < len(points)
            else (p["t"] - points[i - 1]["t"] if i else 0)
        )
        if spans and p["t"] - spans[-1][1] <= gap * 1.5:
            spans[-1] = (spans[-1][0], p["t"] + gap / 2)
        else:
            spans.append((p["t"] - gap / 2, p["t"] + gap / 2))
    return spans


def _timeline_panel(key: str, label: str, unit: str, lines: list[tuple]) -> str:
    """One metric of every run, overlaid; a strip per run along the top marks where its clocks throttled."""
    values = [p[key] for *_, pts in lines for p in pts if _num(p.get(key))]
    if not values:
        return _figure(f"timeline-{key}", label, _empty(f"no {label.lower()} samples"), "")
    scale, unit = (1 / 1024, "GiB") if unit == "MiB" and max(values) >= 1024 else (1, unit)
    y_range = (0.0, 100.0) if unit == "%" else _span([v * scale for v in values], zero=unit != "°C", pad=0.2)
    t_max = max(p["t"] for *_, pts in lines for p in pts) or 1.0
    chart = _Chart((0.0, t_max), y_range, height=220, bottom=40)
    seconds = "seconds since the run's first sample"
    chart.axes(_ticks(0, t_max), _ticks(*y_range, 4), _si, _si, seconds, f"{label} ({unit})")
    for k, (name, color, _, pts) in enumerate(lines):
        path = " ".join(
            f"{chart.px(p['t']):.1f},{chart.py(p[key] * scale):.1f}" for p in pts if _num(p.get(key))
        )
        chart.add(
            f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.6">'
            f"<title>{_e(name)}</title></polyline>"
        )
        for t0, t1 in _throttled_spans(pts):
            x0, x1 = chart.px(max(0.0, t0)), chart.px(min(t_max, t1))
            chart.add(
                f'<rect x="{x0:.1f}" y="{chart.box[1] + 2 + 6 * k}" width="{max(1.5, x1 - x0):.1f}" '
                f'height="4" fill="{color}"><title>{_e(name)}: clocks throttled</title></rect>'
            )
    return f'<figure id="timeline-{key}"><h3>{_e(label)}</h3>{chart.svg(f"{label} over time")}</figure>'


def _timeline_stats(lines: list[tuple]) -> str:
    """Per run: what its timeline shows in numbers, and whether the search trusted its telemetry."""
    head = (
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
    body = []
    for name, _, trial, pts in lines:

        def values(key, pts=pts):
            return [p[key] for p in pts if _num(p.get(key))]

        def mean(key, unit):
            return f"{statistics.fmean(values(key)):.0f}{unit}" if values(key) else DASH

        trusted = trial.get("telemetry_trusted")
        verdict = (
            "trusted"
            if trusted
            else trial.get("telemetry_note") or ("untrusted" if trusted is False else DASH)
        )
        throttled = values("throttled")
        cells = [
            name,
            len(pts),
            fmt_seconds(pts[-1]["t"]),
            mean("util_gpu", "%"),
            mean("util_mem", "%"),
            mean("power_w", " W"),
            fmt_mem(max(values("mem_used_mb"), default=None)),
            f"{max(values('temp_c')):.0f} °C" if values("temp_c") else DASH,
            f"{statistics.fmean(throttled):.0%}" if throttled else DASH,
            max(values("processes"), default=DASH),
            _jpt(trial.get("joules_per_token")),
            verdict,
        ]
        body.append("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in cells) + "</tr>")
    header = "".join(f"<th>{_e(h)}</th>" for h in head)
    return f'<table class="plain" id="timeline-stats"><thead><tr>{header}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _telemetry(summary: dict, facts: _Facts) -> str:
    telemetry = summary.get("telemetry") if isinstance(summary.get("telemetry"), dict) else {}
    series = {str(k): _points(v) for k, v in (telemetry.get("timelines") or {}).items()}
    series = {k: v for k, v in series.items() if v}
    if not series:
        reason = _e(_no_telemetry_reason(summary, facts))
        return f'<p class="note" id="no-telemetry">No GPU telemetry ({reason}).</p>'
    trials = {str(t.get("id")): t for t in summary.get("trials") or []}
    best_id = (summary.get("best") or {}).get("id")
    owners = {trial_id: _timeline_owner(trial_id, trials, best_id) for trial_id in series}
    spare = iter(SPARE_COLORS * 4)
    lines = []  # (name, colour, trial row, points with t in seconds since the run's first sample)
    for trial_id in sorted(
        series, key=lambda tid: (owners[tid][0] != "winner", owners[tid][0] != "baseline", tid)
    ):
        owner, name = owners[trial_id]
        points = series[trial_id]
        color = {"winner": WINNER, "baseline": BASELINE}.get(owner) or next(spare)
        lines.append(
            (name, color, trials.get(trial_id) or {}, [{**p, "t": p["t"] - points[0]["t"]} for p in points])
        )
    panels = "".join(_timeline_panel(key, label, unit, lines) for key, label, unit in TIMELINE_PANELS)
    legend = _legend([(_swatch("square", color, color), name) for name, color, *_ in lines])
    caption = (
        "NVML samples of the GPU each run used, over its timed window, averaged into at most 200 points per "
        "run; one exclusive re-measure run each of the winner and the baseline. Strips along the top of a "
        "panel: where that run's clocks were throttled (thermal or power). Processes: the most compute "
        "processes seen on the GPU at once (more than 1: it was shared)."
    )
    return f'<div class="grid timelines">{panels}</div>{legend}{_timeline_stats(lines)}<p class="how">{_e(caption)}</p>'


# --- sections ---------------------------------------------------------------------------------------------


def _cards(summary: dict, entries: list[_Entry], facts: _Facts) -> str:
    winner = next((e for e in entries if e.role == "winner"), None)
    base = entries[0]
    lo_hi = (summary.get("best") or {}).get("tokens_per_s_spread") or []
    spread = f"range {fmt_tps(lo_hi[0])}–{fmt_tps(lo_hi[1])}" if len(lo_hi) == 2 else ""
    pick = winner or base
    cards = [
        (pick.label if winner else "the baseline stays", "answer"),
        (f"{fmt_tps(pick.tps)} tok/s", spread or f"baseline {fmt_tps(base.tps)} tok/s"),
        (
            f"{pick.speedup:.2f}×" if winner and pick.speedup else "1.00×",
            f"vs baseline {fmt_tps(base.tps)} tok/s",
        ),
        (
            f"val loss {fmt_loss(pick.loss)}",
            f"limit {fmt_loss(facts.limit)} · baseline {fmt_loss(facts.base_loss)}",
        ),
    ]
    if pick.jpt is not None:
        cards.append((_jpt(pick.jpt) + "/token", f"baseline {_jpt(base.jpt)}/token"))
    return (
        '<div class="cards">'
        + "".join(f'<div class="card"><b>{_e(v)}</b><span>{_e(s)}</span></div>' for v, s in cards)
        + "</div>"
    )


def _decision(summary: dict, facts: _Facts) -> str:
    selection = summary.get("selection") or {}
    reasons = "".join(f"<li>{_inline(str(r))}</li>" for r in selection.get("reasons") or [])
    telemetry = summary.get("telemetry") if isinstance(summary.get("telemetry"), dict) else {}
    has_energy = any(_num(t.get("joules_per_token")) for t in summary.get("trials") or [])
    if selection.get("telemetry_changed_decision"):
        line = "<strong>Yes</strong>: GPU energy per token (J/token) changed the decision; see the reasons above."
    elif has_energy or telemetry.get("available"):
        line = (
            "<strong>No</strong>: speed and simplicity decided; energy per token did not change the choice."
        )
    else:
        line = (
            f"<strong>No</strong>: there was no GPU telemetry ({_e(_no_telemetry_reason(summary, facts))})."
        )
    out = f"<h2>How the winner was chosen</h2><ul>{reasons}</ul>" if reasons else ""
    return out + f'<p id="telemetry-decision">Telemetry changed the decision: {line}</p>'


def _table(entries: list[_Entry], facts: _Facts) -> str:
    head = "".join(
        f'<th scope="col" class="{"text" if i == 0 or h in ("Precision", "Compile", "Kernels", "Status") else ""}" '
        f'title="click to sort">{_e(h)}</th>'
        for i, h in enumerate(TABLE_HEAD)
    )
    rows = []
    for e in entries:
        other = {k: v for k, v in e.changes.items() if k not in COLUMN_KNOBS}
        extra = ", ".join(f"{k}={new}" for k, (_, new) in other.items())
        label = f"{_e(e.label)}" + (f'<span class="changes">{_e(extra)}</span>' if extra else "")
        over = e.loss is not None and _num(facts.limit) and e.loss > facts.limit
        loss_text = fmt_loss(e.loss) + (" (over limit)" if over else "")
        cells = [
            (label, e.label, e.tooltip, "text"),
            *(
                (
                    _e(e.config.get(k, DASH)),
                    e.config.get(k),
                    None,
                    "" if k in ("batch_size", "num_workers") else "text",
                )
                for k in COLUMN_KNOBS
            ),
            (_e(fmt_tps(e.tps)), e.tps, e.how["tps"], ""),
            (_e(fmt_mem(e.mem)), e.mem, e.how["mem"], ""),
            (_e(loss_text), e.loss, e.how["loss"], ""),
            (_e(f"{e.speedup:.2f}×" if e.speedup is not None else DASH), e.speedup, e.how["tps"], ""),
            (_e(_jpt(e.jpt)), e.jpt, e.how["jpt"] if e.jpt is not None else None, ""),
            (_e(e.verdict), e.verdict, e.reason or None, "text"),
        ]
        tds = []
        for shown, sort_key, title, cls in cells:
            attrs = f' data-v="{_e("" if sort_key is None else sort_key)}"'
            attrs += f' title="{_e(title)}"' if title else ""
            attrs += f' class="{cls}"' if cls else ""
            tds.append(f"<td{attrs}>{shown}</td>")
        klass = e.role if e.role != "other" else ("failed" if e.failed else "")
        rows.append(f'<tr class="{klass}">' + "".join(tds) + "</tr>")
    return f'<div class="scroll"><table id="configs" class="sortable"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'


def _list_section(section_id: str, title: str, items: list[str]) -> str:
    if not items:
        return ""
    return (
        f'<section id="{section_id}"><h2>{_e(title)}</h2><ul>'
        + "".join(f"<li>{i}</li>" for i in items)
        + "</ul></section>"
    )


def _key_values(section_id: str, title: str, values: dict | None, show=str) -> str:
    if not values:
        return ""
    rows = "".join(
        f'<tr><th class="text">{_e(k)}</th><td class="text">{_e(show(v))}</td></tr>'
        for k, v in values.items()
    )
    return f'<section id="{section_id}"><h3>{_e(title)}</h3><table class="plain">{rows}</table></section>'


STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:#212529;
 margin:0;background:#f8f9fa}
main{max-width:1180px;margin:0 auto;padding:18px 26px 40px}
h1{font-size:24px;margin:0 0 2px}h2{font-size:18px;margin:26px 0 8px;border-bottom:1px solid #dee2e6;
 padding-bottom:3px}h3{font-size:15px;margin:0 0 6px}
.sub{color:#495057;font-size:12px;margin:0 0 12px}
.answer{background:#fff;border:1px solid #dee2e6;border-left:6px solid #2b8a3e;padding:12px 18px;
 border-radius:6px}.answer.stays{border-left-color:#868e96}.answer p{margin:4px 0;font-size:15px}
.cards{display:flex;gap:10px;flex-wrap:wrap;margin:10px 0 4px}
.card{background:#f1f3f5;border-radius:6px;padding:6px 14px;min-width:140px}
.card b{display:block;font-size:19px}.card span{color:#495057;font-size:12px}
table{border-collapse:collapse;background:#fff;width:100%;font-variant-numeric:tabular-nums}
th,td{border-bottom:1px solid #e9ecef;padding:4px 8px;text-align:right;vertical-align:top}
.sortable th{cursor:pointer;background:#f1f3f5;user-select:none;white-space:nowrap}
th[aria-sort=ascending]::after{content:" \\25B2"}th[aria-sort=descending]::after{content:" \\25BC"}
.text{text-align:left}td[title]{cursor:help}
tr.winner td{background:#fff4e6;font-weight:600}tr.baseline td{background:#e7f5ff}tr.failed td{color:#c92a2a}
.scroll{overflow-x:auto}#configs td{white-space:nowrap}
.changes{display:block;color:#868e96;font-size:11px;font-weight:normal;white-space:normal}
table.plain{width:auto;font-size:13px}table.plain th{background:#f1f3f5}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(540px,1fr));gap:14px}
figure{margin:0 0 14px;background:#fff;border:1px solid #dee2e6;border-radius:6px;padding:10px 12px}
svg{display:block;max-width:100%;height:auto}
svg text{font-size:11px;fill:#343a40}svg .label{font-size:12px;fill:#212529}svg .mark{font-weight:600}
svg .bold{font-weight:700}svg .fail{fill:#c92a2a;font-weight:600}
svg .grid{stroke:#e9ecef}svg .axis{stroke:#868e96}svg .frame{fill:none;stroke:#adb5bd}
svg .band{fill:#d3f9d8}svg .limit{stroke:#2b8a3e;stroke-width:1.4;stroke-dasharray:5 3}
svg .front{stroke:#495057;stroke-width:1.2;stroke-dasharray:3 3}
.how{color:#495057;font-size:12px;margin:6px 0 0}
.legend{font-size:12px;color:#343a40;display:flex;flex-wrap:wrap;gap:3px 14px;margin-top:4px}
.legend svg{display:inline-block;vertical-align:-2px;margin-right:4px}
.note{background:#fff9db;border:1px solid #ffe066;padding:8px 12px;border-radius:6px}
code,pre{font-family:ui-monospace,"DejaVu Sans Mono",monospace;font-size:12px}
pre{background:#f1f3f5;padding:8px;white-space:pre-wrap;word-break:break-all}
#timeline-stats td:first-child,#timeline-stats th:first-child{text-align:left}
.meta{display:flex;gap:24px;flex-wrap:wrap;align-items:flex-start}
"""

# Click a header to sort by it (again to reverse); cells sort by data-v, numbers as numbers, blanks last.
SORT_JS = """
document.querySelectorAll("table.sortable th").forEach((th, col) => th.addEventListener("click", () => {
  const body = th.closest("table").tBodies[0];
  const dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
  th.parentNode.querySelectorAll("th").forEach((h) => h.removeAttribute("aria-sort"));
  th.setAttribute("aria-sort", dir > 0 ? "ascending" : "descending");
  const key = (row) => row.cells[col].dataset.v;
  body.append(...[...body.rows].sort((a, b) => {
    const x = key(a), y = key(b);
    if (x === "" || y === "") return (x === "") - (y === "");
    const nx = Number(x), ny = Number(y);
    return dir * (isNaN(nx) || isNaN(ny) ? x.localeCompare(y) : nx - ny);
  }));
}));
"""


def render_html(summary: dict) -> str:
    """The whole report as one self-contained HTML page."""
    facts = _Facts.of(summary)
    entries = _entries(summary, facts)
    styles = _Styles(entries)
    winner = next((e for e in entries if e.role == "winner"), None)
    _, _, winner_row = md._rows(summary)
    hardware = summary.get("hardware") or {}
    device = hardware.get("gpu") or hardware.get("gpu_name") or ("GPU" if facts.on_gpu else "CPU")

    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>Tuning report: {_e(winner.label if winner else 'the baseline stays')}</title>",
        f"<style>{STYLE}</style></head><body><main>",
        "<h1>Tuning report</h1>",
        f'<p class="sub">{_e(device)} · {len(summary.get("trials") or [])} runs · generated from summary.json '
        "(rebuild with <code>python -m tuner.report OUT</code>)</p>",
        f'<section id="answer" class="answer{"" if winner else " stays"}">',
        f"<p>{_inline(md._answer(summary, winner_row))}</p>",
        _cards(summary, entries, facts),
    ]
    diff = md._changed(
        (summary.get("best") or {}).get("config") or {}, (summary.get("baseline") or {}).get("config") or {}
    )
    if winner and diff:
        changes = ", ".join(
            f"{_e(k)}: {_e(old)} → <strong>{_e(new)}</strong>" for k, (old, new) in diff.items()
        )
        parts.append(f'<p id="winner-changes">The winner changes {changes}.</p>')
    parts += [_decision(summary, facts), "</section>"]

    parts += [
        '<section id="table"><h2>Configs compared</h2>',
        _table(entries, facts),
        f'<p class="how">One row per distinct config. Tok/s: the median of its exclusive re-measure runs '
        f"({_e(facts.repeats or 'several')} repeats) where it has them, else its one exclusive speed-screen run "
        f"({_e(facts.timed_steps)}); loss: at the full token budget, {_e(facts.shared_loss_runs)}; VRAM: peak "
        "over its runs. Hover a cell for how that number was measured, a status for why the config lost; "
        "click a header to sort.</p></section>",
        '<section id="plots"><h2>Plots</h2><div class="grid">',
        _plot_batch(entries, styles, facts),
        _plot_pareto(entries, styles, facts),
        "</div>",
        _plot_speedup(entries, facts),
    ]
    if any(e.jpt is not None for e in entries):
        parts.append(_plot_energy(entries))
    parts += ["</section>", '<section id="telemetry"><h2>GPU telemetry: winner and baseline</h2>']
    parts += [_telemetry(summary, facts), "</section>"]

    parts.append(
        _list_section(
            "rejected",
            "Why others were rejected",
            [f"<strong>{_e(e.label)}</strong>: {_e(e.reason)}" for e in entries[1:] if e.reason],
        )
    )
    parts.append(_list_section("notices", "Notices", [_e(n) for n in summary.get("notices") or []]))
    measured = [_inline(line.removeprefix("- ")) for line in md._measurement(summary)]
    parts.append(_list_section("measured", "How each number was measured", measured))
    best_yaml = summary.get("best_yaml") or "OUT/best.yaml"
    parts.append(
        f'<section id="run"><h2>Run it</h2><pre>python -m trainables.train --config {_e(best_yaml)}</pre>'
    )
    if summary.get("command"):
        parts.append(f"<p>The search that produced this report:</p><pre>{_e(summary['command'])}</pre>")
    parts.append("</section>")
    parts.append('<div class="meta">')
    parts.append(_key_values("timings", "Time per phase", summary.get("timings"), fmt_seconds))
    parts.append(_key_values("hardware", "Hardware", hardware))
    parts.append(_key_values("versions", "Versions", summary.get("versions")))
    parts.append("</div>")
    parts += ["</main>", f"<script>{SORT_JS}</script>", "</body></html>"]
    return "\n".join(p for p in parts if p) + "\n"
