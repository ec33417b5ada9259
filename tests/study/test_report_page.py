"""The report a paper would use (issue 29 item 4), read as a reader's browser reads it: a small real study
(the OPS pizza sample's 2011-2015 pages, BM25 and MiniLM dense, views T and TA) is run and reported. The HTML opens with
the headline table (system x view, the retrieval tables' own means, CIs and significance), findings are a
list with footnoted evidence (no paragraph starting with "- "), every chart's tick labels are system names
(or views), and the per-query page gives each citation's rank in every stored run. The structure is checked
on the HTML as written (html.parser) and, where Chromium is installed, on the DOM headless Chromium builds."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import uuid
from html.parser import HTMLParser

import pytest
import yaml
from click.testing import CliRunner

from conftest import REPO, private_cache

pytestmark = [pytest.mark.opensearch, pytest.mark.models]

MODEL = "all-minilm-l6-v2"
SYSTEMS = {"bm25:" + MODEL, "dense:" + MODEL}
VIEWS = ("T", "TA")
OPS = sorted((REPO / "samples/ops-pizza-1990-2015").glob("pizza_2011-2015_p*.json.gz"))


@pytest.fixture(scope="module")
def report_dir(os_client, tmp_path_factory):
    from evalctl.cli.main import cli

    root = tmp_path_factory.mktemp("report-page")
    mp = private_cache(root)
    corpus = f"rp-{uuid.uuid4().hex[:6]}-pizza"
    doc = {"name": "report-page", "models": [{"id": MODEL}],
           "corpora": [{"name": corpus, "format": "ops", "sources": [str(p) for p in OPS],
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
    assert [e[0] for e in tags[:tags.index(first_table)]] == ["p", "h2", "p"], tags[:4]  # description, caption
    paragraphs = [e[2].strip() for e in page.elements if e[0] == "p"]
    assert not [p for p in paragraphs if p.startswith("- ")]
    findings = [e for e in page.elements if e[0] == "li" and e[2]]
    evidence_ids = {e[1].get("id") for e in page.elements if e[0] == "li" and e[1].get("id")}
    links = [e[1]["href"] for e in page.elements if e[0] == "a" and e[1].get("href", "").startswith("#evidence-")]
    assert findings and links and {h[1:] for h in links} == evidence_ids  # every footnote is linked, and exists
    images = [e[1] for e in page.elements if e[0] == "img"]
    assert len(images) == 3  # IN/OUT for each view, the views heatmap (no scaling plot: one model)
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
    for j, view in enumerate(VIEWS, 1):
        main = next(t for t in rest if t[1][0][:2] == ["system", "run"]
                    and all(r[0].endswith(f":{view}") for r in t[1][1:]))
        by_system = {r[0].split(" ", 1)[1].rsplit(":", 1)[0]: r for r in main[1][1:]}
        ndcg = main[1][0].index("ndcg@10")
        for row in rows:
            name, cell = row[0].split(" ", 1)[1], row[j]
            theirs = by_system[name][ndcg]
            # same mean and CI; letters renamed to the headline's, here the same systems in the same order
            assert re.sub(r"[^\d.\[\], ]", "", cell) == re.sub(r"[^\d.\[\], ]", "", theirs), (cell, theirs)
    md = (out / "report.md").read_text()
    assert md.index("## Headline results") < md.index("## Findings") < md.index("## Retrieval")
    assert "[^1]:" in md and "\n- " in md.split("## Findings")[1].split("## ")[0]
    bold = re.findall(r"\*\*([\d.]+)", md.split("## Findings")[0])
    assert len(bold) == len(VIEWS)  # one best per column


def test_letters_findings_and_footnotes_agree(report_dir):
    """Issue 40: one test behind the letters, the findings and their footnotes. Each primary-metric pair of a
    view's table has a letter exactly when its Holm-adjusted p is below alpha; a finding comparing the two runs
    states that pair's raw and adjusted p and its verdict, and its footnote in the report is that evidence."""
    from evalctl.evaluators.scoring.metrics import PRIMARY
    from evalctl.study.page import Report
    from evalctl.study.retrieval_groups import view_groups
    from evalctl.study.spec_loading import load_experiment
    from evalctl.study.tasks import TASKS, recorded, spec_models, task_targets

    out, corpus = report_dir
    spec = load_experiment(str(out.parent / "spec.yaml"))
    steps = [s for s in (recorded(spec.name, sid) for _, _, sid in task_targets(spec, spec_models(spec)))
             if s.kind == "retrieval"]
    report = Report("agreement", statistics=spec.statistics)
    found = TASKS.get("retrieval").findings(report, steps, [])
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
                    assert ("not significantly above" in f.claim) == (not significant)
                    assert f.evidence in findings_md and f.claim in findings_md
                    checked += 1
    assert checked >= 1  # the best system and its runner in one view


def test_per_query_page_gives_every_systems_rank(report_dir):
    from evalctl import results_store
    from evalctl.evaluators.scoring.runs import KIND, load_run
    from evalctl.evaluators.scoring.run_queries import run_queries

    out, corpus = report_dir
    md = (out / "report.md").read_text()
    for view in VIEWS:
        assert f"](queries-{corpus}-{view}.md)" in md
        assert f"href='queries-{corpus}-{view}.html'" in (out / "report.html").read_text()
    page = Page((out / f"queries-{corpus}-T.html").read_text())
    summary, *per_query = page.tables()
    queries = [r[0] for r in summary[1][1:]]
    spreads = [float(r[-1]) for r in summary[1][1:]]
    assert spreads == sorted(spreads, reverse=True) and len(per_query) == len(queries)
    stored = [load_run(r.id) for r in results_store.iter_results(KIND, corpus)]
    runs = {run.system_name: run for run in stored if run.manifest["view"] == "T"}
    assert set(runs) == SYSTEMS
    some_run = next(iter(runs.values()))
    qrels = run_queries(some_run).judged(some_run.manifest["split"])
    for q, (attrs, rows) in list(zip(queries, per_query))[:20]:
        header, *cited = rows
        assert [c[0] for c in cited] == sorted(qrels[q])
        for system, run in runs.items():
            ranked = [d for d, _ in run.ranking.get(q, [])]
            column = header.index(f"rank {system}")
            expected = [str(ranked.index(d) + 1) if d in ranked else "-" for d in sorted(qrels[q])]
            assert [c[column] for c in cited] == expected, (q, system)
    missed_somewhere = sum(int(r[3]) for r in summary[1][1:])
    text = (out / f"queries-{corpus}-T.md").read_text()
    assert text.count("Found by no system in its top") == sum(int(r[3]) > 0 for r in summary[1][1:])
    assert missed_somewhere > 0  # the sample has citations neither BM25 nor MiniLM finds in its top 10


@pytest.mark.skipif(shutil.which("chromium") is None,
                    reason="headless Chromium not installed (`apt-get install chromium` on Debian)")
def test_report_in_headless_chromium(report_dir):
    out, _ = report_dir
    dom = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
                          (out / "report.html").as_uri()], capture_output=True, text=True, timeout=120, check=True)
    check_structure(Page(dom.stdout))
