"""The report's bar charts, laid out to print: one row of bars per system (many systems make the figure taller,
never its labels smaller), a size computed from the number of bars, the legend outside the data, and a blank
(a system without a result) labelled rather than left out. page.save_figure shows each chart at the width it
was laid out for, so its text is FONT_PT at page.DPI on the page."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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
    """One system in a quality-against-cost chart: its cost, its score with the score's 95% CI."""

    label: str
    cost: float
    score: float
    lo: float
    hi: float
    optimal: bool  # on the Pareto front: no other system is as cheap or cheaper and scores more


def pareto_chart(points: Sequence[Point], xlabel: str, ylabel: str):
    """Score against cost, one labelled point per system with its CI; the Pareto-optimal ones filled and joined
    by the front's steps, the others hollow. A cost axis spanning over 20x is logarithmic. Returns the figure."""
    plt = plt_module()
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 5.0), layout="constrained")
    for optimal, style in ((False, {"mfc": "white", "color": "#777", "marker": "o"}),
                           (True, {"mfc": "C3", "color": "C3", "marker": "D"})):
        mine = [p for p in points if p.optimal == optimal]
        if mine:
            ax.errorbar([p.cost for p in mine], [p.score for p in mine],
                        yerr=[[p.score - p.lo for p in mine], [p.hi - p.score for p in mine]], linestyle="none",
                        capsize=3, markersize=7, elinewidth=1,
                        label="Pareto-optimal" if optimal else "dominated (another is cheaper and better)", **style)
    front = sorted((p for p in points if p.optimal), key=lambda p: p.cost)
    if len(front) > 1:
        ax.step([p.cost for p in front], [p.score for p in front], where="post", color="C3", alpha=0.5, linewidth=1)
    for p in points:
        ax.annotate(p.label, (p.cost, p.score), xytext=(6, 4), textcoords="offset points", fontsize=FONT_PT)
    costs = [p.cost for p in points if p.cost > 0]
    if costs and max(costs) / min(costs) > 20:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel, fontsize=FONT_PT + 1)
    ax.set_ylabel(ylabel, fontsize=FONT_PT + 1)
    ax.tick_params(labelsize=FONT_PT)
    ax.margins(x=0.15)  # room for the labels right of the last points
    ax.grid(alpha=0.3)
    fig.legend(loc="outside upper left", ncols=2, fontsize=FONT_PT + 1, frameon=False)
    return fig
