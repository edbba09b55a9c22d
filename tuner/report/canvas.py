"""A matplotlib figure on its way into report.html: drawn in the page's style, saved as SVG, inlined as is.

Several SVGs share one page, so one id space: each chart names its artists' groups (gids) and salts
matplotlib's marker ids with its own name, which keeps every id unique on the page and the same each run.
A tooltip is text the page's script puts into the named group as its <title> (matplotlib writes none).
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

import matplotlib
from markupsafe import Markup, escape
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.text import Annotation

matplotlib.use("Agg")  # no display: the search runs headless and only ever writes files
import matplotlib.pyplot as plt  # noqa: E402  (pyplot picks its backend when first imported)

if TYPE_CHECKING:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.typing import RcKeyType

RC: dict[RcKeyType, Any] = {
    "svg.fonttype": "none",  # text stays text: small, selectable, escaped by matplotlib
    "text.parse_math": False,  # a "$" in a config value is text, not TeX
    "font.family": "DejaVu Sans",  # the font matplotlib measures with; the page asks for it too
    "font.size": 11,
    "axes.labelsize": 11,
    "axes.edgecolor": "#adb5bd",
    "axes.grid": True,
    "axes.axisbelow": True,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "grid.color": "#e9ecef",
    "text.color": "#343a40",
    "xtick.color": "#495057",
    "ytick.color": "#495057",
    "legend.frameon": False,
    "legend.fontsize": 10,
}
NO_METADATA = {"Creator": None, "Date": None, "Format": None, "Type": None}  # then no <metadata> at all
# Where a point's label may go, first choice first: (dx, dy) in points from the point, alignment.
POINT_SPOTS = ((11, 7, "left"), (11, -16, "left"), (-11, 7, "right"), (-11, -16, "right"), (0, 13, "center"))
Spot = tuple[tuple[float, float], float, float, str]  # (anchor, dx, dy, alignment)


class Canvas:
    """A figure on its way to inline SVG, named `name` (unique on the page); artists marked here get an id
    or a tooltip in it."""

    def __init__(self, name: str, fig: Figure, ax: Axes | None):
        self.name, self.fig, self._ax = name, fig, ax
        self._tips: dict[str, str] = {}  # group id -> tooltip
        self._labels: list[tuple[Annotation, list[Spot]]] = []

    @property
    def ax(self) -> Axes:
        """The plot's axes; a canvas made with axes=False has none to draw on."""
        if self._ax is None:
            raise ValueError(f"chart {self.name!r} was made without axes")
        return self._ax

    def mark(self, artist: Artist, key: str) -> str:
        """`artist`'s group gets the id "<name>-<key>" (a hook for the page's script and tests)."""
        gid = f"{self.name}-{key}"
        artist.set_gid(gid)
        return gid

    def tip(self, artist: Artist, text: str) -> None:
        self._tips[self.mark(artist, f"tip{len(self._tips)}")] = text

    def legend(self, rows: Sequence[Sequence[Artist]]) -> None:
        """A legend below the plot that reads row by row (matplotlib fills a legend column by column)."""
        columns = max(len(row) for row in rows)
        grid = [[*row, *[_blank()] * (columns - len(row))] for row in rows]
        handles = [row[col] for col in range(columns) for row in grid]
        self.fig.legend(handles=handles, loc="outside lower center", ncols=columns)

    def label(self, text: str, spots: list[Spot], xycoords: Any = "data", **style: Any) -> None:
        """A bold label at one of `spots`, first choice first; `place_labels` picks the one to use."""
        anchor, dx, dy, align = spots[0]
        note = self.ax.annotate(text, anchor, (dx, dy), xycoords, "offset points", ha=align, **style)
        note.set(weight="bold", zorder=6, in_layout=False)
        self._labels.append((note, spots))

    def point_label(self, x: float, y: float, text: str) -> None:
        self.label(text, [((x, y), dx, dy, align) for dx, dy, align in POINT_SPOTS])

    def place_labels(self, points: list[tuple[float, float]]) -> None:
        """Each label at its first spot inside the axes that covers none of `points` and no other text."""
        if not self._labels:
            return
        self.fig.canvas.draw()  # settles the layout: positions on screen are final from here
        renderer = cast("FigureCanvasAgg", self.fig.canvas).get_renderer()  # Agg: the backend set above
        pad = 7 * self.fig.dpi / 72
        dots = self.ax.transData.transform(points)
        notes = [note for note, _ in self._labels]
        taken = [t.get_window_extent(renderer) for t in self.ax.texts if t not in notes]
        area = self.ax.bbox
        for note, spots in self._labels:
            for anchor, dx, dy, align in (*spots, spots[0]):  # none free: the first
                note.xy = anchor
                note.set(x=dx, y=dy, horizontalalignment=align)
                box = note.get_window_extent(renderer)
                inside = area.x0 <= box.x0 and box.x1 <= area.x1 and area.y0 <= box.y0 and box.y1 <= area.y1
                free = not any(box.overlaps(t) for t in taken) and not box.padded(pad).count_contains(dots)
                if inside and free:
                    break
            taken.append(note.get_window_extent(renderer))

    def shrink_to(self, artist: Artist, pad: float) -> None:
        """The figure cut down to `artist` plus `pad` px around it. (savefig's bbox_inches="tight" does the
        same, but leaves the page not knowing the size to show the SVG at.)"""
        self.fig.draw_without_rendering()
        box = artist.get_window_extent().padded(pad * self.fig.dpi / 72)
        self.fig.set_size_inches(box.width / self.fig.dpi, box.height / self.fig.dpi)

    def svg(self, label: str) -> Markup:
        """The chart for the page: matplotlib's <svg> element in a box showing 1 SVG pt as 1 px."""
        self._name_groups()
        out = io.StringIO()
        with plt.rc_context({"svg.hashsalt": self.name}):  # marker ids: unique on the page, the same each run
            self.fig.savefig(out, format="svg", metadata=NO_METADATA)
        svg = out.getvalue()
        svg = svg[svg.index("<svg") :]  # an element in HTML takes no XML prolog; matplotlib always writes one
        width = self.fig.get_figwidth() * 72  # in pt in the SVG; the page's CSS fits it to this box
        box = f'<div class="chart" role="img" aria-label="{escape(label)}" title="{escape(label)}" '
        box += f'style="width:{width:g}px" data-tips="{escape(json.dumps(self._tips))}">'
        return Markup(f"{box}{svg}</div>")  # matplotlib escaped its text, we the label and tips

    def _name_groups(self) -> None:
        """Each artist's group gets an id of this chart (matplotlib's own, figure_1 and the like, would repeat
        in every chart of the page). Clipping is off: the axes' limits already hold what is drawn, the
        failed configs' crosses sit on the axis line, and a clip path would be one more id to keep unique."""
        self.fig.draw_without_rendering()  # makes the ticks the saved figure will have
        for n, artist in enumerate(self.fig.findobj()):
            artist.set_gid(artist.get_gid() or f"{self.name}-{n}")
            artist.set_clip_on(False)


def _blank() -> Line2D:
    """A legend entry that fills a place and draws nothing (not even an empty group)."""
    blank = Line2D([], [], ls="none", label="")
    blank.set_visible(False)
    return blank


@contextmanager
def canvas(name: str, width: float, height: float, *, axes: bool = True) -> Iterator[Canvas]:
    """A figure `width` x `height` px (1 SVG pt shown as 1 px) in the page's style, closed on exit; `name`
    is unique on the page (its figure's id, say)."""
    with plt.rc_context(RC):
        fig = plt.figure(figsize=(width / 72, height / 72), layout="constrained")
        try:
            yield Canvas(name, fig, fig.add_subplot() if axes else None)
        finally:
            plt.close(fig)


def si(value: float, _pos: Any = None) -> str:
    """Axis numbers: 30K, 1.2M, 0.25."""
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= div:
            return f"{value / div:.3g}{unit}"
    return f"{round(value, 9):g}"
