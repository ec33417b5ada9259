"""The page model every report page is drawn with: a `Report` is a title and blocks (headings, paragraphs,
tables, figures, findings, links) written out as Markdown or as one self-contained HTML file. Tasks draw their
report sections with it; report.py orchestrates the pages (write_report)."""

from __future__ import annotations

import base64
import html
import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from evalctl.evaluators.scoring.runs import load_run
from evalctl.evaluators.scoring.significance_params import StatsProtocol
from evalctl.output_folder import writing_into
from evalctl.paths import confine_libraries

if TYPE_CHECKING:  # pandas is imported where tables are made: an up-to-date report never pays for it
    import pandas as pd

    from evalctl.evaluators.scoring.runs import EmptyQueries, StoredRun


class RunCache(dict):
    """Run id -> StoredRun, loaded once per report (`stored`), each scored under the report's declared empty-query
    policy (experiment.CoverageSpec): the one place that policy enters every number."""

    def __init__(self, empty_queries: EmptyQueries = "keep"):
        super().__init__()
        self.empty_queries = empty_queries

    def stored(self, run_id: str) -> StoredRun:
        """The stored run, loaded once per report and scored under the report's empty-query policy."""
        return self.get(run_id) or self.setdefault(run_id, replace(load_run(run_id), empty_queries=self.empty_queries))


DPI = 110  # figures are saved at this resolution and shown at their width in pixels
PAGE_PX = 1100  # the HTML page's width: no figure is wider
FLOAT = ".4f"  # every table's decimals (0.1200, never 0.12)


@dataclass
class Report:
    title: str
    # ("h", text) ("p", text) ("table", df, strong cells, css class, anchors) ("img", file, caption, tick labels,
    # Layout)
    # ("findings", [Finding]) ("link", page, text) ("file", file name, text)
    blocks: list[tuple] = field(default_factory=list)
    runs: RunCache = field(default_factory=RunCache)
    comparisons: dict = field(default_factory=dict)  # run ids -> their ComparisonReport, computed once
    statistics: StatsProtocol = StatsProtocol()  # the study's protocol: every table's and finding's test

    def h(self, text):
        self.blocks.append(("h", text))

    def p(self, text):
        self.blocks.append(("p", text))

    def table(self, df: pd.DataFrame, strong: set[tuple[int, str]] = frozenset(), css: str = "t",
              anchors: dict[str, str] | None = None):
        """`strong`: (row position, column) cells shown bold (the best per column of a headline table).
        `anchors`: column -> heading template ("Query {}"): each cell links to the heading it names (an index)."""
        self.blocks.append(("table", df, strong, css, anchors or {}))

    def img(self, file: str, caption: str, labels: tuple[str, ...], layout: Layout):
        self.blocks.append(("img", file, caption, labels, layout))

    def findings(self, found: list):
        """Short claims as a list, each one's evidence in a numbered footnote."""
        self.blocks.append(("findings", found))

    def link(self, page: str, text: str):
        """A link to another page of the report: page.md from the Markdown, page.html from the HTML."""
        self.blocks.append(("link", page, text))

    def file(self, name: str, text: str):
        """A link to a file written beside the report (a LaTeX table), the same from both pages."""
        self.blocks.append(("file", name, text))

    def markdown(self) -> str:
        """Markdown with the text's HTML escaped, as in html(): a spec's description or a label shows as
        written and never becomes markup (Markdown renderers pass raw HTML through)."""
        out = [f"# {_md(self.title)}"]
        for b in self.blocks:
            if b[0] == "h":
                out.append(f"## {_md(b[1])}")
            elif b[0] == "p":
                out.append(_md(b[1]))
            elif b[0] == "table":
                from pandas.api.types import is_numeric_dtype  # a table's block holds a DataFrame: pandas is loaded

                table = _cells(b[1], b[2], _md, lambda v: f"**{v}**", b[4], lambda v, to: f"[{v}](#{to})")
                # a text column shows its cells as written ("66.5" stays 66.5), a number column in the report's format
                written = [i for i, c in enumerate(table.columns) if not is_numeric_dtype(table[c])]
                out.append(table.rename(columns=lambda c: _md(str(c))).to_markdown(
                    index=False, floatfmt=FLOAT, disable_numparse=written))
            elif b[0] == "findings":
                out.append("\n".join(f"- {_md(f.claim)}[^{i}]" for i, f in enumerate(b[1], 1)))
                out.append("\n".join(f"[^{i}]: {_md(f.evidence)}" for i, f in enumerate(b[1], 1)))
            elif b[0] == "link":
                out.append(f"[{_md(b[2])}]({b[1]}.md)")
            elif b[0] == "file":
                out.append(f"[{_md(b[2])}]({b[1]})")
            else:
                out.append(f"![{_md(b[2])}]({b[1]})\n\n*{_md(b[2])}*")
        return "\n\n".join(out) + "\n"

    def html(self, folder: Path) -> str:
        body = [f"<h1>{html.escape(self.title)}</h1>"]
        for b in self.blocks:
            if b[0] == "h":
                body.append(f"<h2 id='{anchor(b[1])}'>{html.escape(b[1])}</h2>")
            elif b[0] == "p":
                body.append(f"<p>{html.escape(b[1])}</p>")
            elif b[0] == "table":
                table = _cells(b[1], b[2], html.escape, lambda v: f"<strong>{v}</strong>", b[4],
                               lambda v, to: f"<a href='#{to}'>{v}</a>")
                body.append(table.rename(columns=lambda c: html.escape(str(c)))
                            .to_html(index=False, border=0, classes=b[3], escape=False,
                                     float_format=lambda v: format(v, FLOAT)))
            elif b[0] == "findings":
                body.append("<ul class='findings'>" + "".join(
                    f"<li>{html.escape(f.claim)}<sup><a href='#evidence-{i}'>{i}</a></sup></li>"
                    for i, f in enumerate(b[1], 1)) + "</ul>")
                body.append("<ol class='evidence'>" + "".join(
                    f"<li id='evidence-{i}'>{html.escape(f.evidence)}</li>" for i, f in enumerate(b[1], 1)) + "</ol>")
            elif b[0] == "link":
                body.append(f"<p><a href='{html.escape(b[1])}.html'>{html.escape(b[2])}</a></p>")
            elif b[0] == "file":
                body.append(f"<p><a href='{html.escape(b[1])}'>{html.escape(b[2])}</a></p>")
            else:  # images inlined, so the HTML file stands alone; the labels drawn on it, for a reader's tools;
                # shown at the width it was laid out for, so its text is the size it was drawn at
                data = base64.b64encode((folder / b[1]).read_bytes()).decode()
                labels, layout = html.escape(json.dumps(list(b[3]))), b[4]
                body.append(f'<figure><img src="data:image/png;base64,{data}" alt="{html.escape(b[2])}" '
                            f'width="{layout.width_px}" data-font-px="{layout.font_px:.1f}" data-labels="{labels}">'
                            f'<figcaption>{html.escape(b[2])}</figcaption></figure>')
        style = (f"body{{font-family:sans-serif;max-width:{PAGE_PX}px;margin:2em auto;color:#222}}"
                 # a table wider than the text column scrolls inside it rather than running past the page
                 "table.t{border-collapse:collapse;margin:1em 0;font-size:13px;display:block;overflow-x:auto}"
                 "table.t td,table.t th{border:1px solid #ccc;padding:3px 8px;text-align:left}"
                 "table.t th{white-space:nowrap}"
                 "ol.evidence{font-size:12px;color:#555}"
                 "img{max-width:100%}figcaption{font-style:italic;color:#555}")
        return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(self.title)}</title>"
                f"<style>{style}</style></head><body>{''.join(body)}</body></html>")


def _md(text: str) -> str:
    """Text for Markdown: '<' starts all markup and '&' an entity; '>' stays readable ("A > B")."""
    return text.replace("&", "&amp;").replace("<", "&lt;")


def anchor(heading: str) -> str:
    """A heading's fragment id, as GitHub makes it for Markdown (lower case, spaces to '-', other punctuation
    dropped) and html() gives its h2, so one link serves both pages."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def _cells(df: pd.DataFrame, strong, escape, bold, anchors: dict[str, str], link) -> pd.DataFrame:
    """Text cells escaped, the `strong` ones bold, those of an `anchors` column linked to their heading."""
    out = df.map(lambda v: escape(v) if isinstance(v, str) else v)
    for col, template in anchors.items():
        out[col] = [link(v, anchor(template.format(raw))) for v, raw in zip(out[col], df[col])]
    for i, col in strong:
        out.iloc[i, out.columns.get_loc(col)] = bold(out.iloc[i, out.columns.get_loc(col)])
    return out


def plt_module():
    confine_libraries()  # matplotlib's font cache and config under evalctl's cache, not $HOME
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


@dataclass(frozen=True)
class Layout:
    """A saved figure's width in pixels and its smallest text's height there: the page shows it at that width."""

    width_px: int
    font_px: float


def save_figure(fig, report: Report, out: Path, name: str, caption: str) -> None:
    """Save and add the figure, with the tick labels its axes were given (categories, not numbers) and its
    layout. A figure wider than the page is refused: shrunk to fit, its labels would shrink below their size."""
    from matplotlib.text import Text
    from matplotlib.ticker import FixedLocator

    if fig.get_layout_engine() is None:
        fig.tight_layout()
    width = round(fig.get_figwidth() * DPI)
    if width > PAGE_PX:
        raise ValueError(f"{name}: {width} px wide, more than the page's {PAGE_PX} px")
    with writing_into(out, name) as tmp:
        fig.savefig(tmp, dpi=DPI, format=Path(name).suffix[1:])
    labels = [t.get_text() for ax in fig.axes for axis in (ax.xaxis, ax.yaxis)
              if isinstance(axis.get_major_locator(), FixedLocator) for t in axis.get_ticklabels()]
    smallest = min(t.get_fontsize() for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip())
    plt_module().close(fig)
    report.img(name, caption, tuple(dict.fromkeys(labels)), Layout(width, smallest * DPI / 72))
