"""The quality-against-cost chart (platform/study/page/charts.py: pareto_chart), read back from the figure's own
geometry: crowded points with long labels come out with no label over another, over a marker or past the axes
(numbers and a key below the axes where a label finds no room), label_overlaps does find such a problem, and a
cost's own CI is drawn as a horizontal error bar the axis takes in. Unit tests (tests/conftest.py marks them):
matplotlib's Agg only, no node, no model."""

from __future__ import annotations

import numpy as np
import pytest

from evalctl.study.page.charts import Point, label_overlaps, pareto_chart
from evalctl.study.page.document import DPI, Report, plt_module, save_figure

NAME = "Hybrid (client fusion) · all-MiniLM-L6-v2 + BM25 (RRF, k=60) #{}"


def test_no_label_covers_another_a_marker_or_the_axes_edge(tmp_path):
    """Eight systems with long labels, five of them within 1 ms and 0.003 of each other (two at the very same spot)
    on a logarithmic cost axis (10 ms to 2 s), saved as the report saves them (page.save_figure, at page.DPI): every
    point is named on the chart, by its label or by a number that the key below the axes explains, and
    label_overlaps finds nothing."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    costs, scores = [10, 10, 10.5, 11, 11, 400, 400, 2000], [0.4, 0.4, 0.402, 0.401, 0.399, 0.41, 0.41, 0.412]
    points = [Point(NAME.format(i), c, s, s - 0.03, s + 0.03, i in {2, 5, 7})
              for i, (c, s) in enumerate(zip(costs, scores))]
    fig = pareto_chart(points, "p95 latency (ms)", "ndcg@10 (95% CI)")
    assert fig.axes[0].get_xscale() == "log"
    save_figure(fig, Report("charts"), tmp_path, "pareto.png", "a crowded chart")
    FigureCanvasAgg(fig)  # save_figure closed it, which took its canvas
    fig.set_dpi(DPI)  # the saved geometry
    assert label_overlaps(fig) == []
    shown = {a.get_text() for a in fig.axes[0].texts}
    key = dict(line.split(": ", 1) for t in fig.texts for line in t.get_text().splitlines())
    assert key  # so crowded that some points are numbered: the key is checked too
    assert set(key) == {str(n) for n in range(1, len(key) + 1)} <= shown
    assert {p.label for p in points} == (shown - set(key)) | set(key.values())
    assert (tmp_path / "pareto.png").stat().st_size > 0


def test_label_overlaps_finds_each_kind_of_problem():
    """Two labels on one spot, a label past the axes' edge, one over a marker and a figure text over the axes are
    each reported (the check above can fail); an untouched chart gives none."""
    plt = plt_module()
    fig, ax = plt.subplots(figsize=(6, 4), layout="constrained")
    ax.plot([0, 1], [0, 1], "o")
    try:
        assert label_overlaps(fig) == []
        ax.annotate("first label", (0.5, 0.5))
        ax.annotate("second label", (0.5, 0.5))
        ax.annotate("outside", (0.5, 0.5), xytext=(0, 300), textcoords="offset points", annotation_clip=False)
        ax.annotate("on a marker", (1, 1), ha="center", va="center")
        fig.text(0.5, 0.5, "a key")
        problems = label_overlaps(fig)
        assert "'first label' overlaps 'second label'" in problems
        assert "'outside' leaves its axes" in problems
        assert "'on a marker' covers a marker" in problems
        assert any("'a key'" in p for p in problems)
    finally:
        plt.close(fig)


def _horizontal_extent(ax, point: Point) -> tuple[float, float] | None:
    """The x extent of the horizontal error bar drawn at point (None: it has none), read from the drawn lines."""
    for c in ax.containers:
        data_line, _, bars = c.lines
        if list(data_line.get_xdata()) == [point.cost] and c.has_xerr:
            xs = np.concatenate([s[:, 0] for s in bars[0].get_segments()])  # xerr's LineCollection comes first
            return xs.min(), xs.max()
        if list(data_line.get_xdata()) == [point.cost]:
            return None
    raise AssertionError(f"no error bar at {point.cost}")


@pytest.mark.parametrize("cost_hi, log", [(30.0, False), (400.0, True)])
def test_a_cost_ci_is_a_horizontal_error_bar_inside_the_axis(cost_hi, log):
    """cost_lo and cost_hi draw a horizontal error bar from one to the other, the axis limits take them in, and
    they count for the logarithmic axis (10 to 15 ms is linear; a CI reaching 400 ms is 44x, logarithmic)."""
    with_ci = Point("with a cost CI", 10, 0.4, 0.38, 0.42, True, cost_lo=9.0, cost_hi=cost_hi)
    without = Point("without", 15, 0.3, 0.28, 0.32, False)
    fig = pareto_chart([with_ci, without], "p95 latency (ms)", "ndcg@10 (95% CI)")
    try:
        ax = fig.axes[0]
        assert _horizontal_extent(ax, with_ci) == pytest.approx((9.0, cost_hi))
        assert _horizontal_extent(ax, without) is None
        low, high = ax.get_xlim()
        assert low < 9.0 and cost_hi < high
        assert (ax.get_xscale() == "log") == log
    finally:
        plt_module().close(fig)


def test_a_label_stays_off_another_points_error_bar_where_a_spot_as_near_allows():
    """The first spot right of a point is crossed by its neighbour's tall error bar (not its marker): the label takes
    a spot on the same ring that crosses no bar."""
    from matplotlib.text import Text

    near = Point("near label", 10.0, 0.5, 0.49, 0.51, True)
    tall = Point("tall", 10.04, 0.45, 0.3, 0.6, False)
    far = Point("far", 11.0, 0.4, 0.39, 0.41, False)  # the axis spans 1 ms: the two first points 4% of it apart
    fig = pareto_chart([near, tall, far], "p95 latency (ms)", "ndcg@10 (95% CI)")
    try:
        ax = fig.axes[0]
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        label = next(a for a in ax.texts if a.get_text() == near.label)
        box = Text.get_window_extent(label, renderer)
        (bar_x, bar_lo), (_, bar_hi) = ax.transData.transform([(tall.cost, tall.lo), (tall.cost, tall.hi)])
        (near_x, _), = ax.transData.transform([(near.cost, near.score)])
        assert bar_x - near_x < 60  # the neighbour's bar is near enough to cross a label right of the point
        assert not (box.x0 <= bar_x <= box.x1 and box.y0 <= bar_hi and bar_lo <= box.y1)
        assert label.arrow_patch is None  # the nearest ring: no leader needed
        assert label_overlaps(fig) == []
    finally:
        plt_module().close(fig)
