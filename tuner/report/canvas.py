"""A matplotlib figure on its way into report.html: drawn in the page's style, saved as SVG text, trimmed.

Trimming keeps the page one small file that points at nothing, not even inside itself: no XML header or
metadata, no clip paths, each <use> of a marker replaced by its path, coordinates rounded to 0.1 px.
Artists tagged on a canvas come out as <g><title>tooltip</title>… or <g class="…">, the hooks the page
and its tests look for.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import matplotlib
from markupsafe import Markup, escape
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.text import Annotation

matplotlib.use("Agg")  # no display: the search runs headless and only ever writes files
import matplotlib.pyplot as plt  # noqa: E402  (pyplot picks its backend when first imported)

RC = {
    "svg.fonttype": "none",  # text stays text: small, selectable, escaped by matplotlib
    "svg.hashsalt": "hybrid-tuner",  # the same SVG for the same summary
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
NO_METADATA = {"Creator": None, "Date": None, "Format": None, "Type": None}
# Where a point's label may go, first choice first: (dx, dy) in points from the point, alignment.
POINT_SPOTS = ((11, 7, "left"), (11, -16, "left"), (-11, 7, "right"), (-11, -16, "right"), (0, 13, "center"))
Spot = tuple[tuple[float, float], float, float, str]  # (anchor, dx, dy, alignment)


_DEF = re.compile(r'<path id="(?P<id>[^"]+)" d="(?P<d>[^"]*)"(?: style="(?P<style>[^"]*)")?\s*/>')
_USE = re.compile(
    r'<use xlink:href="#(?P<id>[^"]+)" x="(?P<x>[^"]+)" y="(?P<y>[^"]+)"(?: style="(?P<style>[^"]*)")?\s*/>'
)
_COORDS = re.compile(r'(\s(?:d|x|y|width|height|transform)=")([^"]*)"')


def _style(*styles: str | None) -> str:
    """CSS declarations merged; a later one of a property replaces an earlier one."""
    pairs = (d.split(":", 1) for s in styles if s for d in s.split(";") if ":" in d)
    return "; ".join(f"{k}: {v}" for k, v in {k.strip(): v.strip() for k, v in pairs}.items())


def _inline_uses(svg: str) -> str:
    """Each <use> of a marker definition becomes the marker's own path, moved into place."""
    defs = {m["id"]: m for m in _DEF.finditer(svg)}

    def path(use: re.Match) -> str:
        marker = defs[use["id"]]
        style = _style(use["style"], marker["style"])  # as with <use>: the definition's own paint wins
        return f'<path d="{marker["d"]}" transform="translate({use["x"]} {use["y"]})" style="{style}"/>'

    return _DEF.sub("", _USE.sub(path, svg))


def _round(attr: re.Match) -> str:
    value = re.sub(r"-?\d+\.\d+", lambda n: f"{float(n[0]):.1f}".removesuffix(".0"), attr[2])
    return f'{attr[1]}{" ".join(value.split())}"'


def _drop_bare_groups(svg: str) -> str:
    """Drops each <g> without attributes (matplotlib nests them deep), unless it holds a tooltip."""
    tokens, out, kept = re.split(r"(<g\b[^>]*>|</g>)", svg), [], []
    for i, token in enumerate(tokens):
        if token == "</g>":
            out += [token] if kept.pop() else []
        elif token.startswith("<g"):
            kept.append(token != "<g>" or tokens[i + 1].startswith("<title>"))
            out += [token] if kept[-1] else []
        else:
            out.append(token)
    return "".join(out)


def _inline_svg(svg: str, label: str, tags: dict[str, str]) -> Markup:
    """matplotlib's SVG file as an element for the page: see the module's docstring."""
    width, height = re.search(r'viewBox="0 0 ([\d.]+) ([\d.]+)"', svg).groups()
    svg = _inline_uses(svg[svg.index("<svg") :])
    svg = re.sub(r"<clipPath .*?</clipPath>|<style .*?</style>|<metadata>.*?</metadata>", "", svg, flags=re.S)
    svg = re.sub(r' clip-path="[^"]*"| transform="rotate\(-0 [^)]*\)"', "", svg)
    svg = re.sub(r'<g id="([^"]*)">', lambda g: tags.get(g[1], "<g>"), svg)
    svg = re.sub(r"<(g|defs)[^>]*/>", "", _COORDS.sub(_round, svg))
    svg = re.sub(r">\s+<", "><", svg.replace("\n", " ").strip())
    svg = _drop_bare_groups(re.sub(r"<defs></defs>", "", svg))
    head = f'<svg viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
    head += f'aria-label="{escape(label)}"><title>{escape(label)}</title>'
    return Markup(head + svg[svg.index(">") + 1 :])  # matplotlib escaped its text, we the labels


class Canvas:
    """A figure on its way to inline SVG; artists tagged here get a tooltip or a CSS class in it."""

    def __init__(self, fig: Figure, ax: Axes | None):
        self.fig, self.ax = fig, ax
        self._tags: dict[str, str] = {}
        self._labels: list[tuple[Annotation, list[Spot]]] = []

    def _tag(self, artist: Artist, opening: str) -> None:
        gid = f"tag{len(self._tags)}"
        artist.set_gid(gid)
        self._tags[gid] = opening

    def tip(self, artist: Artist, text: str) -> None:
        self._tag(artist, f"<g><title>{escape(text)}</title>")

    def css(self, artist: Artist, cls: str) -> None:
        self._tag(artist, f'<g class="{cls}">')

    def legend(self, rows: list[list[Artist]]) -> None:
        """A legend below the plot that reads row by row (matplotlib fills a legend column by column)."""
        columns = max(len(row) for row in rows)
        grid = [row + [Line2D([], [], ls="none", label="")] * (columns - len(row)) for row in rows]
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
        renderer, pad = self.fig.canvas.get_renderer(), 7 * self.fig.dpi / 72
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

    def svg(self, label: str, **save: Any) -> Markup:
        out = io.StringIO()
        self.fig.savefig(out, format="svg", metadata=NO_METADATA, **save)
        return _inline_svg(out.getvalue(), label, self._tags)


@contextmanager
def canvas(width: float, height: float, *, axes: bool = True) -> Iterator[Canvas]:
    """A figure `width` x `height` px (1 SVG pt shown as 1 px) in the page's style, closed on exit."""
    with plt.rc_context(RC):
        fig = plt.figure(figsize=(width / 72, height / 72), layout="constrained")
        try:
            yield Canvas(fig, fig.add_subplot() if axes else None)
        finally:
            plt.close(fig)


def si(value: float, _pos: Any = None) -> str:
    """Axis numbers: 30K, 1.2M, 0.25."""
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= div:
            return f"{value / div:.3g}{unit}"
    return f"{round(value, 9):g}"
