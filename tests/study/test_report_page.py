"""The report a paper would use (issues 29 item 4 and 40 items 4-6), read as a reader's browser reads it: a small
real study (the OPS pizza sample's 2011-2015 pages, BM25 and MiniLM dense, views T and TA) is run and reported. The
HTML opens with the answer and the headline table (system x view under readable names, the retrieval tables' own
means, CIs and significance), findings are a list with footnoted evidence (no paragraph starting with "- "),
every chart's tick labels are system names (or views) and it is shown at the width its labels were laid out for,
the LaTeX tables compile, and the per-query page gives each citation's rank in every stored run behind a linked
index. The structure is checked on the HTML as written (html.parser) and, where Chromium is installed, on the
DOM headless Chromium builds."""

from __future__ import annotations

import base64
import json
import re
import shutil
import struct
import subprocess
import uuid
from html.parser import HTMLParser

import pytest
import yaml
from click.testing import CliRunner

from conftest import private_cache, share_embeddings
from real_data import OPS

pytestmark = [pytest.mark.opensearch, pytest.mark.models]

MODEL = "all-minilm-l6-v2"
SYSTEMS = {"BM25", "Dense · all-MiniLM-L6-v2"}  # as the report names bm25:all-minilm-l6-v2 and dense:all-minilm-l6-v2
VIEWS = ("T", "TA")


@pytest.fixture(scope="module")
def report_dir(os_client, tmp_path_factory):
    from evalctl.cli.main import cli

    root = tmp_path_factory.mktemp("report-page")
    mp = private_cache(root)
    share_embeddings(root / "cache")  # the 2011-2015 texts the referee's tests encode too
    corpus = f"rp-{uuid.uuid4().hex[:6]}-pizza"
    doc = {"name": "report-page", "models": [{"id": MODEL}],
           "corpora": [{"name": corpus, "format": "ops", "sources": [str(p) for p in sorted(OPS.glob("pizza_2011-2015_p*.json.gz"))],
                        "qrels": {"name": "citations", "direction": "both", "dev_fraction": 0.0}}],
           "retrieval": [{"corpus": corpus, "views": list(VIEWS), "methods": ["bm25", "dense"]}]}
    spec = root / "spec.yaml"
    spec.write_text(yaml.safe_dump(doc))
    try:
        r = CliRunner().invoke(cli, ["run", str(spec)])
        assert r.exit_code == 0, r.output
        out = root / "report"
        r = CliRunner().invoke(cli, ["report", str(spec), "--out", str(out)])
        assert r.exit_code == 0, r.output
        yield out, corpus
    finally:
        os_client.indices.delete(index=f"evalctl-{corpus}*", ignore_unavailable=True)
        mp.undo()


class Page(HTMLParser):
    """The body's elements in order: (tag, attributes, text inside it), text gathered for p, li, th, td, h*."""

    TEXT = {"p", "li", "th", "td", "h1", "h2", "figcaption"}

    def __init__(self, text: str):
        super().__init__()
        self.elements: list[list] = []
        self.open: list[list] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        element = [tag, dict(attrs), ""]
        self.elements.append(element)
        if tag in self.TEXT:
            self.open.append(element)

    def handle_endtag(self, tag):
        if self.open and self.open[-1][0] == tag:
            self.open.pop()

    def handle_data(self, data):
        for element in self.open:
            element[2] += data

    def tables(self) -> list[tuple[dict, list[list[str]]]]:
        """Each table's attributes and rows of cell texts."""
        out, rows = [], None
        for tag, attrs, text in self.elements:
            if tag == "table":
                rows = []
                out.append((attrs, rows))
            elif tag == "tr" and rows is not None:
                rows.append([])
            elif tag in ("td", "th") and rows:
                rows[-1].append(text.strip())
        return out


def check_structure(page: Page) -> None:
    tags = [e for e in page.elements if e[0] in ("h2", "p", "table", "ul", "figure", "img")]
    headings = [e[2] for e in tags if e[0] == "h2"]
    assert headings[:2] == ["Headline results", "Findings"], headings
    first_table = next(e for e in tags if e[0] == "table")
    assert "headline" in first_table[1]["class"]  # the first table on the page is the headline table
    # when and from what it was generated, then the answer, the table's caption and legend
    assert [e[0] for e in tags[:tags.index(first_table)]] == ["p", "h2", "p", "p", "p"], tags[:6]
    assert tags[0][2].startswith("Generated ") and tags[0][2].endswith(" from the results store.")
    answer, _, legend = (e[2] for e in tags[2:5])
    assert answer.startswith(tags[2][2].split(":")[0] + ": the best system is ") and "[95% CI " in answer
    assert " Over BM25 (" in answer or answer.split(" the best system is ")[1].startswith("BM25 ")
    assert "T = title only" in legend and "TA = title + abstract" in legend and "Dense: approximate" in legend
    paragraphs = [e[2].strip() for e in page.elements if e[0] == "p"]
    assert not [p for p in paragraphs if p.startswith("- ")]
    findings = [e for e in page.elements if e[0] == "li" and e[2]]
    evidence_ids = {e[1].get("id") for e in page.elements if e[0] == "li" and e[1].get("id")}
    links = [e[1]["href"] for e in page.elements if e[0] == "a" and e[1].get("href", "").startswith("#evidence-")]
    assert findings and links and {h[1:] for h in links} == evidence_ids  # every footnote is linked, and exists
    images = [e[1] for e in page.elements if e[0] == "img"]
    assert len(images) == 4  # the main result, IN/OUT for each view, the views heatmap (no scaling plot: one model)
    for img in images:
        labels = json.loads(img["data-labels"])
        assert labels and set(labels) <= SYSTEMS | set(VIEWS), (img["alt"], labels)
    inout = [json.loads(i["data-labels"]) for i in images if "IN vs OUT" in i["alt"]]
    assert len(inout) == 2 and all(len(labels) == 2 and set(labels) == SYSTEMS for labels in inout)


def test_headline_table_has_the_retrieval_tables_numbers(report_dir):
    out, corpus = report_dir
    page = Page((out / "report.html").read_text())
    check_structure(page)
    headline, *rest = page.tables()
    header, *rows = headline[1]
    assert [h.split(" (n=")[0] for h in header] == ["system", *VIEWS]
    letter = {row[0].split(" ", 1)[1]: row[0].split(" ", 1)[0] for row in rows}
    assert set(letter) == SYSTEMS
    mains = [t for t in rest if t[1][0][:2] == ["system", "run"]]  # the retrieval section's, one per view
    assert len(mains) == len(VIEWS)
    for j, main in enumerate(mains, 1):
        by_system = {r[0].split(" ", 1)[1]: r for r in main[1][1:]}
        ndcg = main[1][0].index("ndcg@10")
        for row in rows:
            name, cell = row[0].split(" ", 1)[1], row[j]
            theirs = by_system[name][ndcg]
            # same mean and CI; letters renamed to the headline's, here the same systems in the same order
            assert re.sub(r"[^\d.\[\], ]", "", cell) == re.sub(r"[^\d.\[\], ]", "", theirs), (cell, theirs)
    md = (out / "report.md").read_text()
    assert md.index("## Headline results") < md.index("## Findings") < md.index("## Retrieval")
    assert "[^1]:" in md and "\n- " in md.split("## Findings")[1].split("## ")[0]
    head = md.split("## Findings")[0]
    # bold only for a view's best when the test says it beats every other system (here: the one other)
    bold = re.findall(r"\*\*([^*]+)\*\*", head)
    assert all(re.search("[ᵃᵇ]", cell) for cell in bold), bold
    lettered = [c for line in head.splitlines() if line.startswith("| ") for c in line.split("|")[2:]
                if re.search(r"\d[ᵃᵇ]", c)]
    assert len(bold) == len(lettered)
    assert "bm25:" + MODEL not in head and "dense:" + MODEL not in head  # readable names, not run labels


def test_letters_findings_and_footnotes_agree(report_dir):
    """Issue 40: one test behind the letters, the findings and their footnotes. Each primary-metric pair of a
    view's table has a letter exactly when its Holm-adjusted p is below alpha; a finding comparing the two runs
    states that pair's raw and adjusted p and its verdict, and its footnote in the report is that evidence."""
    from evalctl.evaluators.scoring.metrics import PRIMARY
    from evalctl.study.page.document import Report
    from evalctl.study.tasks.retrieval.groups import view_groups
    from evalctl.study.plan.loading import load_experiment
    from evalctl.study.abstasks.records import recorded
    from evalctl.study.abstasks.registry import TASKS, task_targets
    from evalctl.study.abstasks.steps import spec_models

    out, corpus = report_dir
    spec = load_experiment(str(out.parent / "spec.yaml"))
    steps = [s for s in (recorded(spec.name, sid) for _, _, sid in task_targets(spec, spec_models(spec)))
             if s.kind == "retrieval"]
    report = Report("agreement", statistics=spec.statistics)
    found = TASKS.get("retrieval").findings(report, None, steps, [])
    md = (out / "report.md").read_text()
    findings_md = md.split("## Findings")[1].split("\n## ")[0]
    assert "Statistics: every difference called significant is tested with a two-sided paired randomisation" \
        in findings_md
    checked = 0
    for g in view_groups(report, steps):
        rep = g.comparison
        run_of = dict(zip(rep.systems, rep.run_ids))
        for p in rep.pairs:
            if p.metric != PRIMARY:
                continue
            significant = p.tested.significant(rep.protocol.alpha)
            winner, loser = (p.treatment, p.control) if p.delta > 0 else (p.control, p.treatment)
            assert (rep.letters[rep.systems.index(loser)] in rep.better_than(winner, PRIMARY)) == significant
            assert p.tested.family == 1  # two systems a view: one pair per metric
            for f in found:
                named = re.search(r"\(runs ([^)]*)\)$", f.evidence)
                if named and set(named.group(1).split(", ")) == {run_of[p.control], run_of[p.treatment]}:
                    assert f"p {p.tested.p:.4f}, Holm p {p.tested.p_holm:.4f} over the system pairs of the " \
                           f"{corpus} {g.label} table (1)" in f.evidence
                    assert (f"; significant, n={rep.n_queries}]" in f.evidence) == significant
                    assert ("not significant" in f.claim) == (not significant)
                    assert f.evidence in findings_md and f.claim in findings_md
                    checked += 1
    assert checked >= 1  # the best system and its runner in one view


def test_per_query_page_gives_every_systems_rank(report_dir):
    from evalctl import results_store
    from evalctl.evaluators.scoring.runs import KIND, load_run
    from evalctl.evaluators.scoring.run_queries import run_queries
    from evalctl.study.page.names import system_title

    out, corpus = report_dir
    md = (out / "report.md").read_text()
    for view in VIEWS:
        assert f"](queries-{corpus}-{view}.md)" in md
        assert f"href='queries-{corpus}-{view}.html'" in (out / "report.html").read_text()
    html = (out / f"queries-{corpus}-T.html").read_text()
    page = Page(html)
    legend = next(e[2] for e in page.elements if e[0] == "p" and "Systems: " in e[2])
    letter = {name: x for x, name in re.findall(r"(\w) = ([^;]+?)(?:;|\.$)", legend.split("Systems: ")[1])}
    assert set(letter) == SYSTEMS
    pair = next(e[2] for e in page.elements if e[0] == "p" and " wins, " in e[2])
    wins, ties, losses, n = map(int, re.search(r"(\d+) wins, (\d+) ties, (\d+) losses over (\d+) queries", pair).groups())
    assert wins + ties + losses == n
    tables = page.tables()
    index = [t for t in tables if t[1][0][0] == "query"]
    per_query = [t for t in tables if t[1][0][0] == "cited"]
    ranked, single = (index[0][1][1:], index[1][1][1:]) if len(index) > 1 else (index[0][1][1:], [])
    spreads = [float(r[-1]) for r in ranked]
    assert spreads == sorted(spreads, reverse=True) and all(int(r[2]) >= 2 for r in ranked)
    assert all(int(r[2]) < 2 for r in single) and [r[0] for r in single] == sorted(r[0] for r in single)
    assert all(re.fullmatch(r"\d\.\d{4}", r[4]) for r in ranked + single)  # four decimals, trailing zeros kept
    queries = [r[0] for r in ranked + single]
    assert len(per_query) == len(queries)
    targets = {e[1]["href"][1:] for e in page.elements if e[0] == "a" and e[1].get("href", "").startswith("#")}
    ids = {e[1]["id"]: e[2] for e in page.elements if e[0] == "h2" and e[1].get("id")}
    assert len(targets) == len(queries) and targets <= set(ids)  # the index links every query to its section
    assert [ids[t] for t in targets] and all(ids[t].startswith("Query ") for t in targets)
    stored = [load_run(r.id) for r in results_store.iter_results(KIND, corpus)]
    runs = {system_title(run.manifest): run for run in stored if run.manifest["view"] == "T"}
    assert set(runs) == SYSTEMS
    some_run = next(iter(runs.values()))
    qrels = run_queries(some_run).judged(some_run.manifest["split"])
    for q, (attrs, rows) in list(zip(queries, per_query))[:20]:
        header, *cited = rows
        assert [c[0] for c in cited] == sorted(qrels[q])
        for system, run in runs.items():
            ranked_docs = [d for d, _ in run.ranking.get(q, [])]
            column = header.index(f"rank {letter[system]}")
            expected = [str(ranked_docs.index(d) + 1) if d in ranked_docs else "-" for d in sorted(qrels[q])]
            assert [c[column] for c in cited] == expected, (q, system)
    missed_somewhere = sum(int(r[3]) for r in ranked + single)
    text = (out / f"queries-{corpus}-T.md").read_text()
    assert text.count("Found by no system in its top") == sum(int(r[3]) > 0 for r in ranked + single)
    assert missed_somewhere > 0  # the sample has citations neither BM25 nor MiniLM finds in its top 10
    assert f"[{queries[0]}](#query-{queries[0].lower()})" in text and f"\n## Query {queries[0]}\n" in text


def _png_width(data: bytes) -> int:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">I", data[16:20])[0]  # IHDR's width


def test_charts_are_shown_at_the_width_their_labels_were_laid_out_for(report_dir):
    """No chart is shrunk on the page: shown at its own width (which the 1,100 px page holds), its smallest
    text stays >= 9 px."""
    out, corpus = report_dir
    pages = [out / "report.html", *out.glob("queries-*.html")]
    shown = 0
    for path in pages:
        page_px = int(re.search(r"max-width:(\d+)px", path.read_text()).group(1))
        for img in (e[1] for e in Page(path.read_text()).elements if e[0] == "img"):
            natural = _png_width(base64.b64decode(img["src"].split(",", 1)[1]))
            width = int(img["width"])
            assert natural <= width <= page_px, (img["alt"], natural, width)
            assert float(img["data-font-px"]) * width / natural >= 9, img["alt"]
            shown += 1
    assert shown >= 5  # the report's four and a per-query page's difference plot at least


@pytest.mark.parametrize("systems, views", [(14, ("T", "A", "TA")), (2, ("IN (n=300)", "OUT (n=286)"))])
def test_no_legend_overlaps_a_bar(systems, views):
    """From the figure's own geometry (matplotlib's bounding boxes in display pixels): the legend of a bar
    chart (the main result's, IN/OUT's) touches no bar, no error bar and no blank's label, and lies inside the
    figure; many systems make the figure taller, not its bars thinner."""
    from matplotlib.patches import Rectangle
    from matplotlib.text import Text
    from matplotlib.transforms import Bbox

    from evalctl.study.page.charts import BAR_IN, FONT_PT, Bar, Series, grouped_bars
    from evalctl.study.page.document import DPI

    names = [f"Hybrid (client fusion) · all-MiniLM-L6-v2 + R{i}" for i in range(systems)]
    series = [Series(v, tuple(None if (i * len(views) + j) % 4 == 3 else Bar(0.1 + 0.01 * i, 0.08, 0.14 + 0.01 * i)
                              for i in range(systems))) for j, v in enumerate(views)]
    fig = grouped_bars(names, series, "ndcg@10 (95% bootstrap CI)", blank="not run in this view")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    (legend,) = fig.legends
    box = legend.get_window_extent(renderer)
    assert fig.bbox.contains(box.x0, box.y0) and fig.bbox.contains(box.x1, box.y1)
    ax = fig.axes[0]
    bars = [p for p in ax.patches if isinstance(p, Rectangle)]
    assert len(bars) == sum(b is not None for s in series for b in s.bars)
    # error bars: their line segments in display pixels (a LineCollection has no extent of its own)
    segments = [Bbox(ax.transData.transform(seg)) for c in ax.collections for seg in c.get_segments()]
    drawn = [a.get_window_extent(renderer) for a in (*bars, *ax.lines, *ax.texts)] + segments
    assert ax.texts and segments  # the blanks are labelled; the error bars drawn
    for extent in drawn:
        assert not box.overlaps(extent), extent
    assert all(p.get_window_extent(renderer).height >= 0.6 * BAR_IN * DPI for p in bars)  # not squeezed
    assert min(t.get_fontsize() for t in fig.findobj(Text) if t.get_text().strip()) >= FONT_PT


def test_latex_tables_compile_with_unique_labels(report_dir, tmp_path):
    """The report's ranx tables, and `evalctl compare --out`'s comparison.tex of the same runs (its four tables, run
    labels with "_" and ":", IN->OUT drops in percent), compile as written."""
    from evalctl import results_store
    from evalctl.cli.main import cli

    out, corpus = report_dir
    texs = sorted(out.glob("*.tex"))
    labels = [label for tex in texs for label in re.findall(r"\\label\{([^}]*)\}", tex.read_text())]
    assert len(texs) == len(VIEWS) and len(labels) == len(set(labels)) == len(texs)
    runs = [r.id for r in results_store.iter_results("run", corpus) if r.manifest["view"] == "TA"]
    r = CliRunner().invoke(cli, ["compare", *runs, "--out", str(tmp_path / "cmp")])
    assert r.exit_code == 0, r.output
    comparison = tmp_path / "cmp" / "comparison.tex"
    assert re.findall(r"\\label\{([^}]*)\}", comparison.read_text()) == [
        "tab:comparison-main", "tab:comparison-significance", "tab:comparison-domains", "tab:comparison-jurisdictions"]
    html = (out / "report.html").read_text()
    for tex in texs:
        text = tex.read_text()
        assert f"href='{tex.name}'" in html and "====" not in text and "Add in preamble" not in text
        # the caption names the test, the correction and its family: the table's own (compare.significance_note)
        assert "Fisher's paired randomisation test, Holm-adjusted p $<$ 0.05 over the 1 system pairs of one metric" in text
    if shutil.which("pdflatex") is None:
        pytest.skip("pdflatex not installed (`apt-get install texlive-latex-base texlive-latex-recommended`)")
    for tex in (*texs, comparison):
        r = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "-output-directory",
                            str(tmp_path), str(tex)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout[-2000:]
        assert (tmp_path / tex.with_suffix(".pdf").name).stat().st_size > 1000


@pytest.mark.skipif(shutil.which("chromium") is None,
                    reason="headless Chromium not installed (`apt-get install chromium` on Debian)")
def test_report_in_headless_chromium(report_dir):
    out, _ = report_dir
    dom = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
                          (out / "report.html").as_uri()], capture_output=True, text=True, timeout=120, check=True)
    check_structure(Page(dom.stdout))


def _md_table(md: str, column: str) -> list[dict[str, str]]:
    """The rows of the first report.md table with a column `column`, as {header: cell}."""
    lines = md.splitlines()
    start = next(i for i, line in enumerate(lines)
                 if line.startswith("|") and column in (c.strip() for c in line.split("|")))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(header, (c.strip() for c in line.strip("|").split("|")))))
    return rows


def test_methods_rows_reproduce_their_runs_and_say_client_fusion(report_dir):
    """Methods come from the stored runs: each row's reproduce command finds that very run (no new search), and the
    fusion paragraph says client-side fusion where `fusion_mode: auto` met a node without neural-search. The client
    run is made with `--fusion client`: the manifest the study's auto fallback writes too (retrieve._client_fused,
    whatever the node)."""
    import shlex

    from evalctl import results_store
    from evalctl.cli.main import cli
    from evalctl.study.tasks.retrieval.methods_section import fusion_used

    out, corpus = report_dir
    md = (out / "report.md").read_text()
    assert md.index("## Retrieval") < md.index("Methods, as the stored runs record them") < md.index(
        "## Limitations") < md.index("## Study description (as written in the spec)")
    rows = _md_table(md, "reproduce")
    assert {r["views (query→document)"] for r in rows} == set(VIEWS) and len(rows) == 4
    before = len(list(results_store.iter_results("run", corpus)))
    for row in rows:
        args = shlex.split(row["reproduce"])
        assert args[:2] == ["evalctl", "retrieve"] and "--split" not in args  # test: the default
        r = CliRunner().invoke(cli, args[1:])
        assert r.exit_code == 0, r.output
        assert re.search(r"run (\S+)  \(", r.output).group(1) == row["run"], (row, r.output)
    assert len(list(results_store.iter_results("run", corpus))) == before  # each command found its run
    assert "BM25 (k1 1.2, b 0.75" in md and "ANN: HNSW (m 16, ef_construction 100, ef_search 100" in md

    client = _fused_run_method(corpus, "client")
    assert client.fusion.startswith("client-side: ranx fusion of the stored BM25 and Dense runs")
    assert "dense weight 0.3 (as given)" in client.fusion and "--fusion client" in client.command
    fell_back = fusion_used([(client, "auto")])
    assert "client-side fusion" in fell_back and "the node had no neural-search plugin" in fell_back
    assert "as the spec asks" in fusion_used([(client, "client")])  # fusion_mode: client by choice


def _fused_run_method(corpus: str, mode: str):
    """The methods row of a TA hybrid run made by `evalctl retrieve --fusion MODE` in the report's store."""
    from evalctl.cli.main import cli
    from evalctl.evaluators.scoring.runs import load_run
    from evalctl.study.tasks.retrieval.methods_section import run_method

    r = CliRunner().invoke(cli, ["retrieve", "--corpus", corpus, "--model", MODEL, "--view", "TA", "--method",
                                 "hybrid", "--fusion", mode, "--dense-weight", "0.3"])
    assert r.exit_code == 0, r.output
    return run_method(load_run(re.search(r"run (\S+)  \(", r.output).group(1)), load_run)


@pytest.mark.neural_search
def test_methods_say_native_fusion_on_a_node_with_neural_search(report_dir):
    from evalctl.study.tasks.retrieval.methods_section import fusion_used

    native = _fused_run_method(report_dir[1], "native")
    assert native.fusion.startswith("native: neural-search pipeline") and "--fusion" not in native.command
    said = fusion_used([(native, "auto")])
    assert "ran natively" in said and "neural-search plugin was present" in said and "client" not in said


def test_empty_queries_are_counted_as_the_spec_declares(report_dir, tmp_path):
    """TA queries without an abstract are searched with no text: the default policy keeps them (scored 0, in n)
    and says so; `coverage: {empty_queries: exclude}` leaves them out of the same report's every n and mean."""
    import dataclasses

    from evalctl.cli.main import cli
    from evalctl.evaluators.scoring.metrics import PRIMARY, evaluate_run
    from evalctl.evaluators.scoring.run_queries import run_queries
    from evalctl.evaluators.scoring.runs import load_run

    out, corpus = report_dir
    md = (out / "report.md").read_text()
    rows = {r["views"]: r for r in _md_table(md, "no text in the query view")}
    ta = next(r for r in _md_table(md, "reproduce") if r["views (query→document)"] == "TA" and r["system"] == "BM25")
    keep = load_run(ta["run"])
    basis = run_queries(keep)
    judged = basis.judged(keep.manifest["split"])
    empty = basis.no_text & set(judged)
    assert empty  # the sample has test queries without an abstract
    assert rows["TA"]["no text in the query view"].startswith(f"{len(empty)} (") and rows["T"][
        "no text in the query view"] == "0"
    assert int(rows["TA"]["scored (n)"]) == int(rows["TA"]["queries"]) == len(judged)
    exclude = dataclasses.replace(keep, empty_queries="exclude")
    kept, left = (evaluate_run(r, metrics=(PRIMARY,)) for r in (keep, exclude))
    assert all(kept.per_query[PRIMARY][q] == 0 for q in empty)
    assert left.n_queries == kept.n_queries - len(empty) and not set(left.per_query[PRIMARY]) & empty
    assert left.mean[PRIMARY] * left.n_queries == pytest.approx(kept.mean[PRIMARY] * kept.n_queries)

    spec = yaml.safe_load((out.parent / "spec.yaml").read_text())
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({**spec, "coverage": {"empty_queries": "exclude"}}))
    r = CliRunner().invoke(cli, ["report", str(path), "--out", str(tmp_path / "report")])
    assert r.exit_code == 0, r.output
    md = (tmp_path / "report" / "report.md").read_text()
    assert "left out of every mean" in md and "kept in every mean" in (out / "report.md").read_text()
    assert {r["views"]: r["scored (n)"] for r in _md_table(md, "no text in the query view")} == {
        "T": str(len(judged)), "TA": str(left.n_queries)}
    headline = md.split("## Headline results")[1].split("## ")[0]
    assert f"| TA (n={left.n_queries})" in headline and f"| T (n={len(judged)})" in headline
    main = _md_table(md.split("view TA, qrels")[1], "run")
    assert {r["n"] for r in main} == {str(left.n_queries)}
    assert f"{left.mean[PRIMARY]:.4f}" in next(r[PRIMARY] for r in main if r["run"] == ta["run"])


def test_limitations_state_the_facts_of_the_run(report_dir):
    from evalctl.corpus.store import load_corpus
    from evalctl.evaluators.scoring.run_queries import run_queries
    from evalctl.evaluators.scoring.runs import load_run
    from evalctl.indexers.embedding_cache import encode_devices

    out, corpus = report_dir
    md = (out / "report.md").read_text()
    said = md.split("## Limitations")[1].split("## ")[0]
    run = load_run(next(r["run"] for r in _md_table(md, "reproduce")))
    n_docs, n_queries = len(load_corpus(corpus)), len(run_queries(run).judged(run.manifest["split"]))
    assert f"{n_docs:,} documents, publication-level" in said and f"{n_queries} test queries (T, TA)" in said
    without = _md_table(md, "no text in the query view")[1]["documents without the document view"]  # TA
    assert f"TA has {n_docs - int(without.split(' of ')[0].replace(',', '')):,} of the {n_docs:,} documents" in said
    assert f"Vectors were encoded on {', '.join(sorted(encode_devices(MODEL)))}." in said


def test_ties_table_sets_each_runs_tie_aware_scores_beside_its_ordinary_ones(report_dir):
    from evalctl.evaluators.scoring.run_queries import run_queries
    from evalctl.evaluators.scoring.runs import TIE_RULE, load_run
    from evalctl.evaluators.scoring.tie_aware import tie_scores

    out, _ = report_dir
    page = Page((out / "report.html").read_text())
    ties = next(rows for _, rows in page.tables() if "ndcg@10 tie-aware" in rows[0])
    header, *rows = ties
    mains = {r[1]: r[t[0].index("ndcg@10")] for _, t in page.tables() if t[0][:2] == ["system", "run"]
             for r in t[1:]}
    assert len(rows) == len(SYSTEMS) * len(VIEWS)
    for row in rows:
        cell = dict(zip(header, row))
        run = load_run(cell["run"])
        assert run.manifest["tie_rule"] == TIE_RULE
        judged = run_queries(run).judged(run.manifest["split"], None, None)
        expected = tie_scores(run.ranking, judged, ("ndcg@10", "mrr@10"), depth=run.manifest["k"])
        assert cell["ndcg@10 tie-aware"] == f"{expected.mean('ndcg@10'):.4f}"
        assert cell["mrr@10 tie-aware"] == f"{expected.mean('mrr@10'):.4f}"
        assert int(cell["queries with a tie in the top 10"]) == expected.tied_queries
        assert mains[cell["run"]].startswith(cell["ndcg@10"])  # the retrieval table's own mean
    said = next(e[2] for e in page.elements if e[0] == "p" and e[2].startswith("Ties: "))
    assert TIE_RULE in said and "CI's width" in said
