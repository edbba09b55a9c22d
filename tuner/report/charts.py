"""report.html's plots of the configs, drawn with matplotlib: one scatter or bar chart per view of them (the GPU
timelines are timelines.py's). Each returns a `Plot` whose SVG (canvas.py) is inlined into the page.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from markupsafe import Markup
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, MaxNLocator, NullLocator

from tuner.report import units
from tuner.report.canvas import Canvas, Spot, canvas, si
from tuner.report.entry import Entry
from tuner.report.fmt import DASH, fmt_jpt, fmt_loss, fmt_tps, is_num
from tuner.report.measured import Facts

# Colours: precision picks the hue, the role (winner / baseline) a ring; failures are red.
PRECISION_COLORS = {"fp32": "#1971c2", "tf32": "#7048e8", "bf16": "#e8590c", "fp16": "#2f9e44"}
SPARE_COLORS = ("#0c8599", "#c2255c", "#5c940d", "#862e9c", "#495057")
COMPILE_MARKERS = {
    "none": "o",
    "default": "s",
    "reduce-overhead": "^",
    "max-autotune": "D",
    "max-autotune-no-cudagraphs": "v",
}
SPARE_MARKERS = ("*", "P", "h")
WINNER, BASELINE, FEASIBLE, INFEASIBLE, UNKNOWN, FAILED = (
    "#e8590c",
    "#1971c2",
    "#4dabf7",
    "#ffa8a8",
    "#ced4da",
    "#c92a2a",
)
ROLE_COLORS = {"winner": WINNER, "baseline": BASELINE}
GREEN, GREY, INK = "#2b8a3e", "#868e96", "#212529"
MAX_BATCH_TICKS = 10  # more batch sizes than this and their labels would collide
BATCH_CAPTION = (
    "Tok/s per config: the median of its re-measure runs where it has them, else its one speed-screen run "
    "({timed_steps}; {timed_windows}). Colour: precision; shape: compile mode; faint lines join "
    "the fastest config per batch size of each precision and compile mode{crosses}. Hover a point for its "
    "config."
)
PARETO_CAPTION = (
    "Val loss at the {budget}: the baseline's own run, else the loss-check run of the config (or "
    "of one differing only in speed knobs), {shared_loss_runs}{twins}. Tok/s as in the table. Green band: baseline "
    "loss up to the tolerance limit; dashed: the Pareto front (no config is both faster and lower-loss than "
    "a point on it)."
)
SPEEDUP_CAPTION = (
    "Tok/s of each config ÷ the baseline's figure of the same kind: a re-measured median ÷ the baseline's "
    "({base_tps} tok/s, the median of its re-measure runs), a speed-screen run ÷ the baseline config's own "
    "screen run (no bar where the baseline config was not screened); the line marks 1×."
)
ENERGY_CAPTION = (
    "GPU energy (NVML energy counter, else integrated power) over each run's timed window ÷ the tokens "
    "processed in it; the median of the re-measure runs where there are some, else the screen "
    "run. Lower is better; the line marks the baseline. Runs on a shared GPU are not trusted (see the "
    "table's tooltips)."
)


@dataclass
class Plot:
    """One figure of the page: an id the page links to, its heading, the SVG (None: nothing to draw)."""

    id: str
    title: str
    empty: str = ""  # said instead of the plot when there is nothing to draw
    svg: Markup | None = None
    caption: str = ""


def _marker(marker: str, face: str, edge: str, label: str) -> Line2D:
    return Line2D([], [], ls="none", marker=marker, ms=7, mfc=face, mec=edge, label=label)


# --- scatter plots: one point per config --------------------------------------------------------------------


class Styles:
    """Colour per precision and marker per compile mode, the same in every plot of one page."""

    def __init__(self, entries: list[Entry]):
        precisions = dict.fromkeys(str(e.config.get("precision")) for e in entries)
        compiles = dict.fromkeys(str(e.config.get("compile")) for e in entries)
        spare_c, spare_m = itertools.cycle(SPARE_COLORS), itertools.cycle(SPARE_MARKERS)
        self.colors = {p: PRECISION_COLORS.get(p) or next(spare_c) for p in precisions}
        self.markers = {c: COMPILE_MARKERS.get(c) or next(spare_m) for c in compiles}

    def color(self, entry: Entry) -> str:
        return self.colors[str(entry.config.get("precision"))]

    def draw(self, c: Canvas, entry: Entry, x: float, y: float) -> None:
        """Filled unless its loss is over the limit (hollow); the winner and the baseline get a ring."""
        color, on_top = self.color(entry), 5 if entry.role != "other" else 3
        if entry.role != "other":
            ring = WINNER if entry.role == "winner" else INK
            c.ax.scatter([x], [y], s=300, facecolors="none", edgecolors=ring, linewidths=2.2, zorder=on_top)
            c.point_label(x, y, "winner" if entry.role == "winner" else entry.label)
        marker = self.markers[str(entry.config.get("compile"))]
        face = "#fff" if entry.feasible is False else color
        point = c.ax.scatter([x], [y], s=55, marker=marker, facecolors=face, edgecolors=color, zorder=on_top)
        c.tip(point, entry.tooltip)

    def legend(self, c: Canvas, *extra: Artist) -> None:
        """A row of precision colours, a row of compile shapes, the rest after those or in a row alone."""
        colors = [_marker("o", color, color, p) for p, color in self.colors.items()]
        shapes = [_marker(m, GREY, GREY, f"compile {k}") for k, m in self.markers.items()]
        rest = [_marker("o", "#fff", "#495057", "hollow: loss over the limit"), *extra]
        c.legend([colors, shapes + rest] if len(shapes + rest) <= 4 else [colors, shapes, rest])


def in_unit(text: str, entries: list[Entry]) -> str:
    """`text`, one of this module's titles, captions or axis labels, in the entries' unit (units.in_unit)."""
    return units.in_unit(text, entries[0].unit if entries else units.TOKENS)


def plot_batch(entries: list[Entry], styles: Styles, facts: Facts) -> Plot:
    fast = [(e, e.tps) for e in entries if e.tps is not None and is_num(e.config.get("batch_size"))]
    failed = [e for e in entries if e.failed and e.tps is None and is_num(e.config.get("batch_size"))]
    title = in_unit("Tokens/s against batch size", entries)
    plot = Plot("plot-batch", title, "No config has both a batch size and a speed.")
    if fast:
        plot.svg = _draw_batch(fast, failed, styles, plot)
        crosses = "; red crosses on the axis: configs that failed at that batch size" if failed else ""
        plot.caption = in_unit(
            BATCH_CAPTION.format(
                timed_steps=facts.timed_steps, timed_windows=facts.timed_windows, crosses=crosses
            ),
            entries,
        )
    return plot


def _draw_batch(fast: list[tuple[Entry, float]], failed: list[Entry], styles: Styles, plot: Plot) -> Markup:
    """`fast`: each config with a speed, and that speed."""
    timed = [e for e, _ in fast]
    with canvas(plot.id, 560, 400) as c:
        _batch_axes(c.ax, sorted({float(e.config["batch_size"]) for e in timed + failed}))
        c.ax.set(ylabel=in_unit("tokens/s", timed))
        c.ax.set_ylim(0, max(tps for _, tps in fast) * 1.15)
        _fastest_lines(c.ax, fast, styles)
        for e, tps in fast:
            styles.draw(c, e, float(e.config["batch_size"]), tps)
        _failed_crosses(c, failed)
        styles.legend(c, *([_marker("X", FAILED, FAILED, "failed (oom / nan / error)")] if failed else []))
        c.place_labels([(float(e.config["batch_size"]), e.tps or 0.0) for e in timed + failed])
        return c.svg(plot.title)


def _failed_crosses(c: Canvas, failed: list[Entry]) -> None:
    """No speed: a red cross on the axis at its batch size (where OOM starts shows)."""
    for e in failed:
        cross = c.ax.scatter([float(e.config["batch_size"])], [0], marker="X", s=70, color=FAILED)
        cross.set_clip_on(False)
        c.tip(cross, e.tooltip)


def _batch_axes(ax: Axes, batches: list[float]) -> None:
    """A tick at every batch size tried (matplotlib's ticks when too many to label), on a log2 axis when
    they span a factor of 4 or more."""
    log2 = batches[0] > 0 and batches[-1] / batches[0] >= 4
    if log2:
        ax.set_xscale("log", base=2)
        ax.set_xlim(batches[0] / 1.4, batches[-1] * 1.4)
    else:
        ax.margins(x=0.1)
    fallback = LogLocator(base=2) if log2 else MaxNLocator(integer=True)
    ax.xaxis.set_major_locator(FixedLocator(batches) if len(batches) <= MAX_BATCH_TICKS else fallback)
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_major_formatter(FuncFormatter(si))
    ax.set(xlabel="batch size", ylabel="tokens/s")


def _fastest_lines(ax: Axes, fast: list[tuple[Entry, float]], styles: Styles) -> None:
    """A faint line per precision and compile mode through its fastest config at each batch size."""
    groups: dict[tuple[str, str], dict[float, float]] = {}
    for e, tps in fast:
        group = groups.setdefault((str(e.config.get("precision")), str(e.config.get("compile"))), {})
        batch = float(e.config["batch_size"])
        group[batch] = max(group.get(batch, 0.0), tps)
    for (precision, _), best_at in groups.items():
        if len(best_at) > 1:
            xs, ys = zip(*sorted(best_at.items()))
            ax.plot(xs, ys, color=styles.colors[precision], alpha=0.35, lw=1.5, zorder=2)


def _pareto_front(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other point beats on both speed (higher) and loss (lower), fastest first."""
    front, best_loss = [], math.inf
    for tps, loss in sorted(points, key=lambda p: (-p[0], p[1])):
        if loss < best_loss:
            front.append((tps, loss))
            best_loss = loss
    return front


def plot_pareto(entries: list[Entry], styles: Styles, facts: Facts) -> Plot:
    shown = [(e, e.tps, e.loss) for e in entries if e.tps is not None and e.loss is not None]
    title = in_unit("Validation loss against tokens/s (the Pareto view)", entries)
    plot = Plot("plot-pareto", title, "No config has both a speed and a checked loss.")
    if shown:
        plot.svg = _draw_pareto(shown, styles, facts, plot)
        twins = ", each trained with the fastest execution screened for its loss knobs (the table says which)"
        plot.caption = in_unit(
            PARETO_CAPTION.format(
                budget=facts.budget,
                shared_loss_runs=facts.shared_loss_runs,
                twins=twins if facts.twins else "",
            ),
            entries,
        )
    return plot


def _draw_pareto(shown: list[tuple[Entry, float, float]], styles: Styles, facts: Facts, plot: Plot) -> Markup:
    """`shown`: each config with both figures, and its speed and loss."""
    with canvas(plot.id, 560, 400) as c:
        _limit_band(c, [v for v in (facts.base_loss, facts.limit) if is_num(v)], facts)
        _front_line(c, _pareto_front([(tps, loss) for _, tps, loss in shown]))
        for e, tps, loss in shown:
            styles.draw(c, e, tps, loss)
        _pareto_axes(c.ax, [tps for _, tps, _ in shown])
        c.ax.set(xlabel=in_unit("tokens/s", [e for e, _, _ in shown]))
        styles.legend(c)
        c.place_labels([(tps, loss) for _, tps, loss in shown])
        return c.svg(plot.title)


def _front_line(c: Canvas, front: list[tuple[float, float]]) -> None:
    """The front as a staircase: each point on it holds its loss until the next, slower one."""
    if len(front) > 1:
        xs = [t for (t, _), nxt in zip(front, front[1:] + front[-1:]) for t in (t, nxt[0])]
        ys = [v for _, v in front for v in (v, v)]
        (line,) = c.ax.plot(xs, ys, color="#495057", lw=1.2, ls=(0, (3, 3)), zorder=2)
        c.mark(line, "front")


def _pareto_axes(ax: Axes, speeds: list[float]) -> None:
    ax.margins(x=0.12, y=0.15)
    if min(speeds) < 0.5 * max(speeds):  # from zero, unless that would squash the points into a corner
        ax.set_xlim(left=0)
    ax.xaxis.set_major_formatter(FuncFormatter(si))
    ax.yaxis.set_major_formatter(FuncFormatter(si))
    ax.set(xlabel="tokens/s", ylabel="val loss")


def _limit_band(c: Canvas, band: list[float], facts: Facts) -> None:
    """Green from the baseline's loss up to the limit, the limit itself a dashed line."""
    if len(band) != 2:
        return
    c.mark(c.ax.axhspan(min(band), max(band), color="#d3f9d8", lw=0, zorder=0), "band")
    c.mark(c.ax.axhline(max(band), color=GREEN, lw=1.4, ls=(0, (5, 3)), zorder=1), "limit")
    top = max(band)  # its label on the line, at the right end unless a point sits there
    spots: list[Spot] = [((1, top), -4, 4, "right"), ((0, top), 4, 4, "left"), ((1, top), -4, -13, "right")]
    c.label(f"limit {fmt_loss(facts.limit)}", spots, ("axes fraction", "data"), color=GREEN)


# --- bar charts: one bar per config -------------------------------------------------------------------------


def role_color(entry: Entry) -> str:
    if entry.failed:
        return FAILED
    by_verdict: dict[bool | None, str] = {True: FEASIBLE, False: INFEASIBLE}
    return ROLE_COLORS.get(entry.role) or by_verdict.get(entry.feasible, UNKNOWN)


ROLE_LEGEND = {
    WINNER: "winner",
    BASELINE: "baseline",
    FEASIBLE: "loss within the limit",
    INFEASIBLE: "loss over the limit",
    UNKNOWN: "loss not checked / stopped early",
    FAILED: "failed (oom / nan / error)",
}


def _role_legend(c: Canvas, shown: list[Entry]) -> None:
    """What the bar colours mean, for the colours the bars use."""
    used = {role_color(e) for e in shown}
    c.legend([[Patch(color=color, label=text) for color, text in ROLE_LEGEND.items() if color in used]])


@dataclass(frozen=True)
class _BarAxis:
    plot: Plot
    label: str  # the x axis's
    tick: Callable[[float], str]
    reference: float | None  # a dashed line at 1× or at the baseline's value


def _hbars(
    rows: Sequence[tuple[Entry, float | None]], show: Callable[[float], str], axis: _BarAxis
) -> Markup:
    """Horizontal bars, one per config, labelled with its id and main knobs."""
    values = [v for _, v in rows if v is not None] + [axis.reference or 0.0]
    with canvas(axis.plot.id, 1120, 70 + 22 * len(rows)) as c:
        c.ax.set_yticks(range(len(rows)), [_bar_label(e) for e, _ in rows])
        c.ax.set_ylim(len(rows) - 0.5, -0.5)
        c.ax.set_xlim(0, (max(values) or 1.0) * 1.18)
        for i, (entry, value) in enumerate(rows):
            _bar(c, i, entry, value, show)
        if axis.reference:
            c.mark(c.ax.axvline(axis.reference, color=GREEN, lw=1.4, ls=(0, (5, 3))), "limit")
        c.ax.grid(axis="y", visible=False)
        c.ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: axis.tick(v)))
        c.ax.set_xlabel(axis.label)
        _role_legend(c, [e for e, value in rows if value is not None])
        return c.svg(axis.plot.title)


def _bar_label(entry: Entry) -> str:
    knobs = (entry.config[k] for k in ("batch_size", "precision", "compile"))
    return f"{entry.label}  " + " · ".join(DASH if v is None else str(v) for v in knobs)


def _bar(c: Canvas, i: int, entry: Entry, value: float | None, show: Callable[[float], str]) -> None:
    """Row i: the config's bar and its value, or in red its status where it has no value (failed)."""
    if entry.role == "winner":
        c.ax.get_yticklabels()[i].set_fontweight("bold")
    if value is None:
        c.ax.text(0, i, f" {entry.verdict}", va="center", color=FAILED, weight="bold")
        return
    c.tip(c.ax.barh(i, value, height=0.72, color=role_color(entry)).patches[0], entry.tooltip)
    c.ax.text(value, i, f" {show(value)}", va="center", fontsize=10)


def plot_speedup(entries: list[Entry], facts: Facts) -> Plot:
    plot = Plot("plot-speedup", "Speed-up against the baseline")
    axis = _BarAxis(plot, in_unit("× baseline tokens/s", entries), lambda v: f"{v:g}×", reference=1.0)
    plot.svg = _hbars([(e, e.speedup) for e in entries], lambda v: f"{v:.2f}×", axis)
    plot.caption = in_unit(SPEEDUP_CAPTION.format(base_tps=fmt_tps(facts.base_tps)), entries)
    return plot


def plot_energy(entries: list[Entry]) -> Plot | None:
    """None without any energy figure (a CPU search): the page then leaves the plot out."""
    rows = [(e, e.jpt) for e in entries if e.jpt is not None]
    if not rows:
        return None
    plot = Plot("plot-energy", in_unit("Energy per token", entries), caption=in_unit(ENERGY_CAPTION, entries))
    plot.svg = _hbars(
        rows, fmt_jpt, _BarAxis(plot, in_unit("energy per token", entries), fmt_jpt, entries[0].jpt)
    )
    return plot
