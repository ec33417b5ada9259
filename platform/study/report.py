"""`evalctl report SPEC`: one self-contained report (Markdown + HTML + PNG plots) from the results store.

Sections follow the study: retrieval tables with significance markers, views per model (heatmap),
model size vs score (one line per family), IN vs OUT with the relative drop, fusion gain per model,
recipe deltas per task, classification and clustering tables. Every table names the stored runs or
results that produced it. Sections without data say so instead of disappearing.
"""

from __future__ import annotations

import base64
import functools
import html
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from evalctl.clock import utc_now
from evalctl.output_folder import check_folder, claim_folder
from evalctl.study.spec import ExperimentSpec
from evalctl.provenance import code_version

INPUTS_FILE = "inputs.json"  # what the report was made from; unchanged inputs keep the report

if TYPE_CHECKING:  # pandas is imported where tables are made: an up-to-date report never pays for it
    import pandas as pd


@dataclass
class Report:
    title: str
    blocks: list[tuple] = field(default_factory=list)  # ("h", text) ("p", text) ("table", df) ("img", file, caption)

    def h(self, text):
        self.blocks.append(("h", text))

    def p(self, text):
        self.blocks.append(("p", text))

    def table(self, df: pd.DataFrame):
        self.blocks.append(("table", df))

    def img(self, file: str, caption: str):
        self.blocks.append(("img", file, caption))

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
                table = b[1].map(lambda v: _md(v) if isinstance(v, str) else v)
                out.append(table.rename(columns=lambda c: _md(str(c))).to_markdown(index=False))
            else:
                out.append(f"![{_md(b[2])}]({b[1]})\n\n*{_md(b[2])}*")
        return "\n\n".join(out) + "\n"

    def html(self, folder: Path) -> str:
        body = [f"<h1>{html.escape(self.title)}</h1>"]
        for b in self.blocks:
            if b[0] == "h":
                body.append(f"<h2>{html.escape(b[1])}</h2>")
            elif b[0] == "p":
                body.append(f"<p>{html.escape(b[1])}</p>")
            elif b[0] == "table":
                body.append(b[1].to_html(index=False, border=0, classes="t"))
            else:  # images inlined, so the HTML file stands alone
                data = base64.b64encode((folder / b[1]).read_bytes()).decode()
                body.append(f'<figure><img src="data:image/png;base64,{data}" alt="{html.escape(b[2])}">'
                            f"<figcaption>{html.escape(b[2])}</figcaption></figure>")
        style = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
                 "table.t{border-collapse:collapse;margin:1em 0;font-size:13px}"
                 "table.t td,table.t th{border:1px solid #ccc;padding:3px 8px;text-align:left}"
                 "img{max-width:100%}figcaption{font-style:italic;color:#555}")
        return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(self.title)}</title>"
                f"<style>{style}</style></head><body>{''.join(body)}</body></html>")


def _md(text: str) -> str:
    """Text for Markdown: '<' starts all markup and '&' an entity; '>' stays readable ("A > B")."""
    return text.replace("&", "&amp;").replace("<", "&lt;")


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, report: Report, out: Path, name: str, caption: str) -> None:
    fig.tight_layout()
    fig.savefig(out / name, dpi=110)
    _plt().close(fig)
    report.img(name, caption)


def _view_label(qview: str, view: str) -> str:
    return view if qview == view else f"{qview}→{view}"


def _retrieval(report: Report, spec: ExperimentSpec, steps, out: Path) -> None:
    import pandas as pd

    from evalctl.evaluators import retrieval_methods
    from evalctl.evaluators.compare import compare_runs, ranx_latex, tables
    from evalctl.evaluators.runs import load_run
    from evalctl.evaluators.scoring import PRIMARY

    report.h("Retrieval")
    done = [s for s in steps if s.kind == "retrieval" and s.scores and s.scores()]
    if not done:
        report.p("No retrieval results yet (run `evalctl run` first, or the spec has no retrieval).")
        return
    rows = []
    for s in done:
        _, corpus, model, view, method, qview = s.target
        rows.append({"corpus": corpus, "model": model, "view": _view_label(qview, view), "method": method,
                     PRIMARY: s.scores()[PRIMARY], "run": s.ref()})
    frame = pd.DataFrame(rows)
    for (corpus, view), group in frame.groupby(["corpus", "view"], sort=False):
        runs = [load_run(r) for r in group["run"]]
        qrels_spec = runs[0].manifest.get("qrels_spec") or {}
        known_item = qrels_spec.get("source") == "known_item"
        views = f"queries {view.replace('→', ', documents ')}" if "→" in view else f"view {view}"
        report.p(f"Corpus {corpus}, {views}, qrels {runs[0].manifest.get('qrels')}: systems compared with "
                 "paired tests (Holm-corrected).")
        if known_item:
            report.p("Known-item sanity task: each query is a patent's own text in the query view and its one "
                     "relevant document is that patent. It checks that search works and how a view dilutes "
                     "the match; it says nothing about prior-art relevance, and IN/OUT does not apply.")
        if len(runs) >= 2:
            comparison = compare_runs(runs)
            dfs = tables(comparison)
            report.table(dfs["main"])
            ranx_file = f"ranx-{corpus}-{view}.tex".replace("→", "-")
            (out / ranx_file).write_text(ranx_latex(comparison))  # ranx's Report, for a paper
            report.p(f"The same table as ranx's LaTeX (Report.to_latex): {ranx_file}.")
            if not known_item:
                report.p("IN vs OUT of domain (relative drop), as DAPFAM defines it:")
                report.table(dfs["domains"])
                _in_out_plot(report, dfs["domains"], out, f"inout-{corpus}-{view}.png".replace("→", "-"))
        else:
            report.table(group.drop(columns=["run"]))
    dense = frame[frame["method"] == "dense"]
    for corpus, group in dense.groupby("corpus", sort=False):
        _views_heatmap(report, corpus, group, out)
        _scaling_plot(report, corpus, group, out)
    gains, fused_methods = [], retrieval_methods.fused_methods()
    for (corpus, model, view), g in frame.groupby(["corpus", "model", "view"]):
        by = dict(zip(g["method"], g[PRIMARY]))
        for fused in fused_methods:
            if fused in by and "dense" in by:
                gains.append({"corpus": corpus, "model": model, "view": view, "fusion": fused,
                              f"dense {PRIMARY}": round(by["dense"], 4), f"fused {PRIMARY}": round(by[fused], 4),
                              "gain": round(by[fused] - by["dense"], 4)})
    report.p("Fusion gain over dense retrieval (same depth; the run labels say native pipeline or client-side):")
    report.table(pd.DataFrame(gains) if gains else pd.DataFrame([{"note": "no fused runs"}]))


def _views_heatmap(report: Report, corpus: str, dense: pd.DataFrame, out: Path) -> None:
    import pandas as pd

    from evalctl.evaluators.scoring import PRIMARY

    if dense["view"].nunique() < 2:
        report.p(f"Views per model ({corpus}): one view only, no heatmap.")
        return
    pivot = dense.pivot_table(index="model", columns="view", values=PRIMARY, sort=False)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(1.3 * len(pivot.columns) + 6, 0.5 * len(pivot) + 2))
    im = ax.imshow(pivot.values, cmap="viridis", aspect="auto", vmin=0, vmax=1)  # one scale for every corpus
    ax.set_xticks(range(len(pivot.columns)), pivot.columns)
    ax.set_yticks(range(len(pivot.index)), pivot.index)
    for (i, j), v in pd.DataFrame(pivot.values).stack().items():
        ax.text(j, i, f"{v:.3f}", ha="center", va="center", color="k" if v > 0.6 else "w")  # viridis: light at the top
    fig.colorbar(im, label=PRIMARY)
    ax.set_title(corpus)
    _save(fig, report, out, f"views-{corpus}.png", f"{corpus}: dense {PRIMARY} per model and view")


def _scaling_plot(report: Report, corpus: str, dense: pd.DataFrame, out: Path) -> None:
    from evalctl.evaluators.scoring import PRIMARY
    from evalctl.models import get_model

    base = dense[[not get_model(m).lineage for m in dense["model"]]]  # fine-tuned models share their base's size
    if base["model"].nunique() < 2:
        report.p(f"Scaling ({corpus}): fewer than two base models, no plot.")
        return
    base = base.assign(params_m=[get_model(m).params_m for m in base["model"]],
                       family=[get_model(m).family for m in base["model"]])
    views = list(dict.fromkeys(base["view"]))
    plt = _plt()
    fig, axes = plt.subplots(1, len(views), figsize=(4.5 * len(views), 4), squeeze=False, sharey=True)
    for ax, view in zip(axes[0], views):
        for family, g in base[base["view"] == view].groupby("family"):
            g = g.sort_values("params_m")
            ax.plot(g["params_m"], g[PRIMARY], marker="o", label=family)
        ax.set_xscale("log")
        ax.set_xlabel("parameters (millions)")
        ax.set_title(f"view {view}")
    axes[0][0].set_ylabel(PRIMARY)
    axes[0][-1].legend()
    _save(fig, report, out, f"scaling-{corpus}.png", f"{corpus}: model size vs dense {PRIMARY}, one line per family")


def _in_out_plot(report: Report, domains: pd.DataFrame, out: Path, name: str) -> None:
    from evalctl.evaluators.scoring import PRIMARY

    def value(cell: str) -> float:
        return float(cell.split(" ")[0]) if cell and cell[0].isdigit() else 0.0

    col_in, col_out = f"IN {PRIMARY} (n)", f"OUT {PRIMARY} (n)"
    if domains.empty or col_in not in domains or col_out not in domains:
        return
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    x = range(len(domains))
    ax.bar([i - 0.2 for i in x], [value(c) for c in domains[col_in]], width=0.4, label="IN")
    ax.bar([i + 0.2 for i in x], [value(c) for c in domains[col_out]], width=0.4, label="OUT")
    ax.set_xticks(list(x), [s.split(" ")[0] for s in domains["system"]])
    ax.set_ylabel(PRIMARY)
    ax.legend()
    _save(fig, report, out, name, f"IN vs OUT {PRIMARY} per system (letters as in the table above)")


def _label_tasks(report: Report, spec: ExperimentSpec, steps) -> None:
    import pandas as pd

    from evalctl.study.task_tables import task_table

    for task, title in (("classification", "Classification (F1, %)"), ("clustering", "Clustering (%)")):
        report.h(title)
        mine = [s for s in steps if s.kind == task]
        ids = {ref for s in mine if (ref := s.ref())}  # this spec's results, not older ones of the same corpus
        rows = [r for c in sorted({s.target[1] for s in mine}) for r in task_table(task, c, ids=ids)]
        if not rows:
            report.p(f"No {task} results yet.")
            continue
        df = pd.DataFrame(rows)
        metrics = [c for c in df.columns if f"{c}_lo" in df.columns]
        for m in metrics:
            df[m] = [f"{100 * v:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]"
                     for v, lo, hi in zip(df[m], df[f"{m}_lo"], df[f"{m}_hi"])]
        report.table(df.drop(columns=[c for c in df.columns if c.endswith(("_lo", "_hi"))]))
        produced = [f"{s.key} ({s.ref()})" for s in mine if s.ref()]
        report.p("Mean [bootstrap 95% CI over splits/seeds]. Produced by: " + "; ".join(produced))
        if df["view"].str.endswith(" prompt)").any():
            report.p(f"A view marked ({task} prompt) holds the vectors the model encoded with its {task} prompt "
                     "(MTEB's convention), the others its document vectors; each result's manifest records the "
                     "prompt (vectors.prompt).")


def _recipes(report: Report, pairs: list[dict]) -> None:
    import pandas as pd

    report.h("Fine-tuning recipes")
    keys = ("task", "corpus", "view", "what", "model", "recipe", "metric", "base_mean", "tuned_mean")
    rows = [{k: round(r[k], 4) if isinstance(r[k], float) else r[k] for k in keys}
            | {"delta": round(r["tuned_mean"] - r["base_mean"], 4)} for r in pairs]
    report.table(pd.DataFrame(rows) if rows else pd.DataFrame([{"note": "no fine-tuned models in this spec"}]))


def _findings(report: Report, steps, runs: dict, pairs: list[dict]) -> None:
    """The report's opening: findings computed from the stored results, each naming its runs/results."""
    from evalctl.study import findings as rf
    from evalctl.evaluators.runs import load_run
    from evalctl.evaluators.scoring import PRIMARY, evaluate_run

    report.h("Findings")
    results = []
    for s in steps:
        if s.kind == "retrieval" and s.scores and s.scores() and s.ref():
            run = runs.get(s.ref()) or runs.setdefault(s.ref(), load_run(s.ref()))
            _, corpus, model, view, method, qview = s.target
            results.append(rf.RetrievalResult(corpus, model, _view_label(qview, view), method, run.id, run.label,
                                              evaluate_run(run).per_query[PRIMARY]))
    lines = rf.retrieval_findings(results)
    for corpus in dict.fromkeys(r.corpus for r in results):
        best = max((r for r in results if r.corpus == corpus), key=lambda r: r.mean)
        run = runs[best.run_id]
        if (run.manifest.get("qrels_spec") or {}).get("source") != "known_item":
            domains = {d: (sc.n_queries, sc.mean[PRIMARY])
                       for d in ("IN", "OUT") for sc in [evaluate_run(run, domain=d, metrics=(PRIMARY,))]}
            lines += [f for f in [rf.in_out_finding(corpus, best.label, best.run_id, domains)] if f]
    # one line per recipe x task x label set: dense retrieval, the logistic-regression probe, V-measure
    lines += rf.recipe_findings([p for p in pairs if p["what"] == "dense" or p["task"] != "retrieval"
                                 and not p["metric"].startswith("knn/")])
    for line in lines or ["No stored results yet: run `evalctl run` first."]:
        report.p("- " + line)


def _per_unit(step, metric: str, runs: dict) -> dict[str, float]:
    """Per-query (retrieval) or per-split/seed (label tasks) values of `metric` behind a step's scores."""
    from evalctl import results_store
    from evalctl.evaluators.runs import load_run
    from evalctl.evaluators.scoring import evaluate_run

    if step.kind == "retrieval":
        run = runs.get(step.ref()) or runs.setdefault(step.ref(), load_run(step.ref()))
        return evaluate_run(run).per_query[metric]
    group, name = metric.split("/")
    res = next(r for r in results_store.iter_results(step.kind, step.target[1]) if r.id == step.ref())
    body = json.loads(res.file("metrics.json").read_text())[group]
    return {str(i): unit[name] for i, unit in enumerate(body.get("splits") or body.get("seeds"))}


def _recipe_pairs(steps, runs: dict) -> list[dict]:
    """Base vs fine-tuned model on the same task, corpus, view and method/label set, per headline metric."""
    from evalctl.models import get_model

    rows = []
    for s, base in _tuned_and_base(steps):
        lineage = get_model(s.target[2]).lineage
        for metric in s.scores():
            if metric in base.scores() and _headline(metric):
                view = _view_label(s.target[5], s.target[3]) if s.kind == "retrieval" else s.target[3]
                rows.append({"task": s.kind, "corpus": s.target[1], "view": view, "what": s.target[4],
                             "model": s.target[2], "recipe": lineage["recipe"]["id"], "metric": metric,
                             "base_mean": base.scores()[metric], "tuned_mean": s.scores()[metric],
                             "base": _per_unit(base, metric, runs), "tuned": _per_unit(s, metric, runs),
                             "ids": [base.ref(), s.ref()]})
    return rows


def _headline(metric: str) -> bool:
    return metric in ("ndcg@10", "logreg/micro_f1", "knn/micro_f1") or "v_measure" in metric


def _tuned_and_base(steps):
    """(fine-tuned model's step, its base model's step) for every task step with stored scores."""
    from evalctl.models import get_model

    for s in steps:
        if not s.scores or s.kind not in ("retrieval", "classification", "clustering") or s.target[2] == "bm25":
            continue
        lineage = getattr(get_model(s.target[2]), "lineage", None)
        if not lineage or not s.scores():
            continue
        base = next((b for b in steps if b.target[:2] == s.target[:2] and b.target[3:] == s.target[3:]
                     and b.target[2] == lineage.get("base_model")), None)
        if base is not None and base.scores():
            yield s, base


def write_report(spec: ExperimentSpec, out: Path, force: bool = False) -> tuple[Path, Path, bool]:
    """Write the report; returns its two files and whether it was (re)written. A report whose inputs
    (every step's stored scores and run, the spec file, the code version) are unchanged is kept. `out` must
    be new, empty or an earlier evalctl report (output_folder); `force` also writes into any other folder."""
    from evalctl.opensearch.cluster_info import node_snapshot
    from evalctl.study.runner import plan

    check_folder(out, "report", (INPUTS_FILE, "code_version"), force=force)
    steps = plan(spec)
    for s in steps:  # a report reads one snapshot: each step's store lookup once, not once per table
        s.scores = s.scores and functools.cache(s.scores)
        s.ref = s.ref and functools.cache(s.ref)
    md, page, inputs_file = out / "report.md", out / "report.html", out / INPUTS_FILE
    with node_snapshot():
        inputs = json.dumps({"code_version": code_version(), "spec": Path(spec.source_path).read_text(),
                             "steps": [[s.key, s.scores() if s.scores else None, s.ref() if s.ref else None]
                                       for s in steps]}, sort_keys=True, default=str)
    if not force and md.exists() and page.exists() and inputs_file.exists() and inputs_file.read_text() == inputs:
        return md, page, False
    claim_folder(out, "report")
    report = Report(f"evalctl report: {spec.name}")
    report.p(f"{spec.description.strip()} Generated {utc_now('%Y-%m-%d %H:%M UTC')} by "
             f"evalctl {code_version()} from the results store.")
    runs: dict = {}  # run id -> StoredRun, loaded once for findings and recipe deltas
    pairs = _recipe_pairs(steps, runs)
    _findings(report, steps, runs, pairs)
    _retrieval(report, spec, steps, out)
    _label_tasks(report, spec, steps)
    _recipes(report, pairs)
    md.write_text(report.markdown())
    page.write_text(report.html(out))
    inputs_file.write_text(inputs)
    return md, page, True
