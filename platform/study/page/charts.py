"""The report's bar charts, laid out to print: one row of bars per system (many systems make the figure taller,
never its labels smaller), a size computed from the number of bars, the legend outside the data, and a blank
(a system without a result) labelled rather than left out. page.save_figure shows each chart at the width it
was laid out for, so its text is FONT_PT at page.DPI on the page. The quality-against-cost chart places each label
where it covers no other label and no marker (label_overlaps checks a figure for that)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from evalctl.study.page.document import plt_module

FONT_PT = 9  # the smallest text a chart draws (about 14 px at page.DPI)
WIDTH_IN = 9.0  # every chart's width: at page.DPI 990 px, which the page (1,100 px wide) shows unshrunk
BAR_IN = 0.24  # one bar's thickness
GAP_IN = 0.18  # between two systems' groups of bars
MARGIN_IN = 1.2  # legend above, axis label below


@dataclass(frozen=True)
class Bar:
    mean: float
    lo: float  # its 95% CI
    hi: float


@dataclass(frozen=True)
class Series:
    """One colour of bars (a view, a domain): a bar per category, None where the category has no result."""

    label: str
    bars: tuple[Bar | None, ...]


def grouped_bars(categories: Sequence[str], series: Sequence[Series], xlabel: str, blank: str):
    """Horizontal bars with their CIs as error bars, a group per category (top to bottom, in order) and a bar
    per series; a missing bar is the text `blank` where it would be. Returns the figure."""
    plt = plt_module()
    n, k = len(categories), len(series)
    fig, ax = plt.subplots(figsize=(WIDTH_IN, MARGIN_IN + n * (k * BAR_IN + GAP_IN)), layout="constrained")
    step = k * BAR_IN + GAP_IN  # one group, in inches: the y axis counts inches so bars keep their thickness
    for j, s in enumerate(series):
        y = np.arange(n) * step + (j - (k - 1) / 2) * BAR_IN
        done = [i for i, b in enumerate(s.bars) if b is not None]
        means = np.array([s.bars[i].mean for i in done])
        err = np.array([[s.bars[i].mean - s.bars[i].lo for i in done], [s.bars[i].hi - s.bars[i].mean for i in done]])
        ax.barh(y[done], means, height=BAR_IN * 0.9, xerr=err.reshape(2, -1), capsize=3, label=s.label,
                color=f"C{j}", error_kw={"elinewidth": 1})
        for i in set(range(n)) - set(done):
            ax.text(0, y[i], f" {blank}", va="center", ha="left", fontsize=FONT_PT, color="#555", style="italic")
    ax.set_yticks(np.arange(n) * step, list(categories), fontsize=FONT_PT + 1)
    ax.set_ylim(n * step - step / 2, -step / 2)  # first category on top
    ax.set_xlim(left=0)
    ax.set_xlabel(xlabel, fontsize=FONT_PT + 1)
    ax.tick_params(axis="x", labelsize=FONT_PT)
    ax.grid(axis="x", alpha=0.3)
    fig.legend(loc="outside upper left", ncols=max(1, k), fontsize=FONT_PT + 1, frameon=False)
    return fig


def difference_plot(differences: Sequence[float], ylabel: str, title: str):
    """Per-unit differences (B - A per query), sorted, one bar each: where B wins, ties and loses at a glance."""
    plt = plt_module()
    d = np.sort(np.asarray(differences, dtype=float))[::-1]
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 3.6), layout="constrained")
    colours = np.where(d > 0, "C2", np.where(d < 0, "C3", "#999"))
    ax.bar(np.arange(len(d)), d, width=1.0, color=colours)
    ax.axhline(0, color="#333", linewidth=0.8)
    ax.set_xlim(-0.5, len(d) - 0.5)
    ax.set_xlabel("queries, sorted by the difference", fontsize=FONT_PT + 1)
    ax.set_ylabel(ylabel, fontsize=FONT_PT + 1)
    ax.tick_params(labelsize=FONT_PT)
    ax.set_title(title, fontsize=FONT_PT + 1)
    return fig


@dataclass(frozen=True)
class Point:
    """One system in a quality-against-cost chart: its cost, its score with the score's 95% CI, and, where the cost
    was measured with a spread, the cost's own interval (cost_lo, cost_hi; drawn as a horizontal error bar)."""

    label: str
    cost: float
    score: float
    lo: float
    hi: float
    optimal: bool  # on the Pareto front: no other system is as cheap or cheaper and scores more
    cost_lo: float | None = None
    cost_hi: float | None = None


MARKER_PT = 7  # a point's marker
RINGS_PT = (3, 12, 24, 40, 60)  # a label's gap to its marker, nearest first; past the first ring a leader line
DIRECTIONS = ((1, 0), (1, 1), (0, 1), (-1, 1), (-1, 0), (-1, -1), (0, -1), (1, -1))  # right of the point first
ALIGN = ({1: "left", 0: "center", -1: "right"}, {1: "bottom", 0: "center", -1: "top"})  # text side facing the point
# a leader runs from the text's corner (or side) facing the point (its anchor: relpos) to the marker's edge
LEADER = {"arrowstyle": "-", "color": "#888", "linewidth": 0.6, "shrinkA": 0, "shrinkB": MARKER_PT / 2}


def pareto_chart(points: Sequence[Point], xlabel: str, ylabel: str):
    """Score against cost, one labelled point per system with its CI (and its cost's, where given); the
    Pareto-optimal ones filled and joined by the front's steps, the others hollow. A cost axis spanning over 20x
    (CI ends included) is logarithmic. No label covers another, a marker or the axes' edge (_label_points).
    Returns the figure."""
    plt = plt_module()
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 5.0), layout="constrained")
    styles = {False: {"mfc": "white", "color": "#777", "marker": "o"},
              True: {"mfc": "C3", "color": "C3", "marker": "D"}}
    legend = {False: "dominated (another is cheaper and better)", True: "Pareto-optimal"}  # each said once
    for p in sorted(points, key=lambda p: p.optimal):  # one call a point: each has its own cost CI or none
        lo, hi = (p.cost if c is None else c for c in (p.cost_lo, p.cost_hi))
        ax.errorbar([p.cost], [p.score], xerr=None if lo == hi == p.cost else [[p.cost - lo], [hi - p.cost]],
                    yerr=[[p.score - p.lo], [p.hi - p.score]], linestyle="none", capsize=3, markersize=MARKER_PT,
                    elinewidth=1, label=legend.pop(p.optimal, None), **styles[p.optimal])
    front = sorted((p for p in points if p.optimal), key=lambda p: p.cost)
    if len(front) > 1:
        ax.step([p.cost for p in front], [p.score for p in front], where="post", color="C3", alpha=0.5, linewidth=1)
    costs = [c for p in points for c in (p.cost, p.cost_lo, p.cost_hi) if c is not None and c > 0]
    if costs and max(costs) / min(costs) > 20:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel, fontsize=FONT_PT + 1)
    ax.set_ylabel(ylabel, fontsize=FONT_PT + 1)
    ax.tick_params(labelsize=FONT_PT)
    ax.margins(x=0.15)  # room for the labels right of the last points
    ax.grid(alpha=0.3)
    fig.legend(loc="outside upper left", ncols=2, fontsize=FONT_PT + 1, frameon=False)
    _label_points(fig, ax, points)
    return fig


class _Spot(NamedTuple):
    """Where a label goes: direction (dx, dy) of DIRECTIONS on ring RINGS_PT[ring] around its point; the text's box
    and its leader line (None on the nearest ring) in display pixels."""

    ring: int
    dx: int
    dy: int
    box: object
    leader: object


def _label_points(fig, ax, points: Sequence[Point]) -> None:
    """Each point's label at the first free spot around it (DIRECTIONS on RINGS_PT, nearest first): inside the
    axes, over no marker, no other label and no other label's leader line, its own leader crossing no label. A point
    with no free spot for its label gets a number instead, its label given in a key below the axes."""
    fig.canvas.draw()  # constrained layout places the axes at draw time: measure only once it has
    fig.set_layout_engine("none")  # and keep it from moving them under the placed labels
    renderer = fig.canvas.get_renderer()
    drawn, placed, key = _Drawn(_marker_boxes(ax, renderer), _line_paths(ax)), [], []
    order = sorted(points, key=lambda p: (-p.score, p.cost, p.label))  # stable: the best points choose first
    # a spot for every point's number first, so that the long labels placed before it cannot leave it without one
    widest = "9" * len(str(len(points)))
    kept = [_spot(ax, renderer, p, widest, drawn, placed) for p in order]  # each joins placed as it is found
    for p, own in zip(order, kept):
        if own is not None:
            placed.remove(own)  # free for its own label
        spot, text = _spot(ax, renderer, p, p.label, drawn, placed), p.label
        if spot is None:
            key.append(f"{len(key) + 1}: {p.label}")
            # without a kept spot (no room at all), beside the point all the same: label_overlaps reports it
            text, spot = str(len(key)), own or _Spot(0, 1, 0, None, None)
        if spot.box is not None:
            placed.append(spot)
        ax.annotate(text, (p.cost, p.score), xytext=_offset(spot.ring, spot.dx, spot.dy), textcoords="offset points",
                    fontsize=FONT_PT, ha=ALIGN[0][spot.dx], va=ALIGN[1][spot.dy],
                    arrowprops={**LEADER, "relpos": ((1 - spot.dx) / 2, (1 - spot.dy) / 2)} if spot.ring else None)
    if key:
        _add_key(fig, ax, key)


def _offset(ring: int, dx: int, dy: int) -> tuple[float, float]:  # in points, from the point to the text's anchor
    return dx * (MARKER_PT / 2 + RINGS_PT[ring]), dy * (MARKER_PT / 2 + RINGS_PT[ring])


class _Drawn(NamedTuple):
    """In display pixels: what a label never covers (the markers' boxes) and what it stays off where a spot as near
    allows (the error bars and the front's line, paths)."""

    markers: list
    lines: list


def _spot(ax, renderer, p: Point, text: str, drawn: _Drawn, placed: list) -> _Spot | None:
    """The first free spot for text around p, added to placed; None where there is none. On each ring a spot off
    every drawn line comes before one across a line."""
    from matplotlib.path import Path

    frame, xy = ax.get_window_extent(renderer), ax.transData.transform((p.cost, p.score))
    probe = ax.annotate(text, (p.cost, p.score), xytext=(0, 0), textcoords="offset points", fontsize=FONT_PT)
    try:
        for ring, off_lines, (dx, dy) in itertools.product(range(len(RINGS_PT)), (True, False), DIRECTIONS):
            offset = _offset(ring, dx, dy)
            probe.set(x=offset[0], y=offset[1], ha=ALIGN[0][dx], va=ALIGN[1][dy])
            box = probe.get_window_extent(renderer).padded(renderer.points_to_pixels(1))  # a point of air
            leader = Path([xy, xy + renderer.points_to_pixels(np.array(offset))]) if ring else None
            if _within(box, frame) and not any(box.overlaps(m) for m in drawn.markers) and not (
                    off_lines and any(_crosses(line, box) for line in drawn.lines)) and not any(
                    box.overlaps(s.box) or _crosses(leader, s.box) or _crosses(s.leader, box) for s in placed):
                placed.append(_Spot(ring, dx, dy, box, leader))
                return placed[-1]
        return None
    finally:
        probe.remove()


def _crosses(leader, box) -> bool:
    return leader is not None and leader.intersects_bbox(box, filled=False)


def _add_key(fig, ax, lines: list[str]) -> None:
    """The numbered points' labels, a line each, under everything else: the figure grows at the bottom by the key's
    height while the axes keep their size and distance from the top, so the labels placed on them stay put."""
    pad, height, width = FONT_PT / 72, fig.get_figheight(), fig.get_figwidth()  # inches
    text = fig.text(ax.get_position().x0 * width, pad, "\n".join(lines), transform=fig.dpi_scale_trans,
                    fontsize=FONT_PT, va="bottom")
    grow = text.get_window_extent(fig.canvas.get_renderer()).height / fig.dpi + 2 * pad
    for a in fig.axes:
        box = a.get_position()
        a.set_position([box.x0, (box.y0 * height + grow) / (height + grow), box.width,
                        box.height * height / (height + grow)])
    fig.set_figheight(height + grow)


def _marker_boxes(ax, renderer) -> list:
    """Every marker the axes draw (the points', the error bars' caps) as a square of its size, in display pixels."""
    from matplotlib.transforms import Bbox

    boxes = []
    for line in ax.lines:
        if not _has_marker(line):
            continue
        half = renderer.points_to_pixels(line.get_markersize()) / 2
        boxes += [Bbox.from_extents(x - half, y - half, x + half, y + half)
                  for x, y in line.get_transform().transform(line.get_xydata())]
    return boxes


def _line_paths(ax) -> list:
    """The error bars' segments and every line drawn without markers (the front's steps), in display pixels."""
    from matplotlib import cbook
    from matplotlib.collections import LineCollection
    from matplotlib.path import Path

    bars = [c.get_transform().transform_path(path) for c in ax.collections if isinstance(c, LineCollection)
            for path in c.get_paths()]
    steps = [(line, cbook.STEP_LOOKUP_MAP[line.get_drawstyle()](line.get_xdata(), line.get_ydata()))
             for line in ax.lines if not _has_marker(line)]  # a line's path is its points: the steps drawn between
    return bars + [line.get_transform().transform_path(Path(np.column_stack(xy))) for line, xy in steps]


def _has_marker(line) -> bool:
    return line.get_marker() not in (None, "None", "none", "", " ")


def _within(box, frame) -> bool:
    return frame.contains(box.x0, box.y0) and frame.contains(box.x1, box.y1)


def label_overlaps(fig) -> list[str]:
    """Every way the figure's labels fail, read from its own geometry after a draw (display pixels): two
    annotations' texts that intersect, an annotation's text outside its axes or over a marker, a leader line across
    another annotation's text, and a figure text (pareto_chart's key) outside the figure or over an axes (its ticks
    and labels included) or a legend. Empty: none."""
    from matplotlib.text import Annotation, Text

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    problems = []
    for ax in fig.axes:
        frame, markers = ax.get_window_extent(renderer), _marker_boxes(ax, renderer)
        # the text alone: an Annotation's own extent takes in its leader line
        texts = [(a, Text.get_window_extent(a, renderer)) for a in ax.texts if isinstance(a, Annotation)]
        leaders = [(a, a.arrow_patch.get_transform().transform_path(a.arrow_patch.get_path()))
                   for a, _ in texts if a.arrow_patch]
        for i, (a, box) in enumerate(texts):
            name = repr(a.get_text())
            problems += [f"{name} overlaps {b.get_text()!r}" for b, other in texts[i + 1:] if box.overlaps(other)]
            problems += [f"{b.get_text()!r}'s leader crosses {name}" for b, line in leaders
                         if b is not a and _crosses(line, box)]
            if not _within(box, frame):
                problems.append(f"{name} leaves its axes")
            if any(box.overlaps(m) for m in markers):
                problems.append(f"{name} covers a marker")
    drawn = [ax.get_tightbbox(renderer) for ax in fig.axes] + [g.get_window_extent(renderer) for g in fig.legends]
    for t in fig.texts:
        box = t.get_window_extent(renderer)
        if not _within(box, fig.bbox) or any(box.overlaps(d) for d in drawn):
            problems.append(f"figure text {t.get_text()!r} leaves the figure or covers a chart or legend")
    return problems
