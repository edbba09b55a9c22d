"""report.html's GPU telemetry panels, drawn with matplotlib: one metric of every recorded run over time per
panel, with strips where its clocks throttled, and the runs' legend once for all panels."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from markupsafe import Markup
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FixedLocator, FuncFormatter

from tuner.report.canvas import canvas, si
from tuner.report.charts import GREY, Plot
from tuner.report.fmt import is_num
from tuner.state.records import TrialRow


@dataclass
class Timeline:
    """One run's GPU samples as the telemetry panels draw them; t in seconds since its first sample."""

    name: str
    color: str
    trial: TrialRow | None
    points: list[dict[str, Any]] = field(default_factory=list)

    def values(self, key: str) -> list[float]:
        return [p[key] for p in self.points if is_num(p.get(key))]


def _throttled_spans(points: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """(start, end) times of the runs of consecutive samples with clock throttling."""
    spans: list[tuple[float, float]] = []
    for i, p in enumerate(points):
        if not (is_num(p.get("throttled")) and p["throttled"] > 0):
            continue
        after = points[i + 1]["t"] - p["t"] if i + 1 < len(points) else None
        gap = after if after is not None else (p["t"] - points[i - 1]["t"] if i else 0)
        if spans and p["t"] - spans[-1][1] <= gap * 1.5:
            spans[-1] = (spans[-1][0], p["t"] + gap / 2)
        else:
            spans.append((p["t"] - gap / 2, p["t"] + gap / 2))
    return spans


def timeline_panel(key: str, label: str, unit: str, lines: list[Timeline]) -> Plot:
    """One metric of every run, overlaid; a strip per run along the top marks where its clocks throttled."""
    plot = Plot(f"timeline-{key}", label, f"no {label.lower()} samples")
    values = [v for line in lines for v in line.values(key)]
    if not values:
        return plot
    scale, unit = (1 / 1024, "GiB") if unit == "MiB" and max(values) >= 1024 else (1, unit)
    t_max = max(p["t"] for line in lines for p in line.points) or 1.0
    with canvas(plot.id, 560, 250) as c:
        for k, line in enumerate(lines):
            pts = [(p["t"], p[key] * scale) for p in line.points if is_num(p.get(key))]
            if pts:
                c.tip(c.ax.plot(*zip(*pts), color=line.color, lw=1.6)[0], line.name)
            for t0, t1 in _throttled_spans(line.points):
                strip = c.ax.axvspan(max(0.0, t0), min(t_max, t1), 0.975 - 0.03 * k, 0.995 - 0.03 * k)
                strip.set(color=line.color, lw=0)
                c.tip(strip, f"{line.name}: clocks throttled")
        _timeline_axes(c.ax, f"{label} ({unit})", unit, t_max)
        plot.svg = c.svg(f"{label} over time")
    return plot


def _timeline_axes(ax: Axes, y_label: str, unit: str, t_max: float) -> None:
    ax.margins(y=0.2)
    if unit == "%":  # room above 100 for the throttling strips
        ax.set_ylim(0, 112)
        ax.yaxis.set_major_locator(FixedLocator(range(0, 101, 20)))
    elif unit != "°C":  # temperatures sit far from zero; the rest start there
        ax.set_ylim(bottom=0)
    ax.set_xlim(0, t_max)
    ax.yaxis.set_major_formatter(FuncFormatter(si))
    ax.set(xlabel="seconds since the run's first sample", ylabel=y_label)


def timeline_legend(lines: list[Timeline]) -> Markup:
    """The runs' colours, once for all four panels."""
    handles: list[Artist] = [Line2D([], [], color=line.color, lw=2.5, label=line.name) for line in lines]
    if any(_throttled_spans(line.points) for line in lines):
        handles.append(Patch(color=GREY, label="strip along the top: that run's clocks throttled"))
    with canvas("timeline-legend", 1000, 26, axes=False) as c:
        c.shrink_to(c.fig.legend(handles=handles, loc="center", ncols=len(handles)), pad=1.5)
        return c.svg("runs shown in the GPU telemetry panels")
