"""`evalctl report SPEC`: one self-contained report (Markdown + HTML + PNG plots) from the results store.

It opens with the headline table (report_headline: system x view, nDCG@10 with CI, best per view, letters),
then the findings (short claims, their evidence in footnotes). Sections follow the study: retrieval tables
with significance markers, views per model (heatmap, colours fitted to the scores), model size vs score
(one line per family), IN vs OUT with the relative drop and CIs, fusion gain per model, recipe deltas per
task, classification and clustering tables; a per-query page for each corpus and view (report_queries).
Every table names the stored runs or results that produced it. Sections without data say so instead of
disappearing. Charts are labelled with system names; the HTML carries each chart's tick labels. The pages
are drawn with page.py's model, as the tasks draw their sections.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from evalctl import results_store
from evalctl.clock import utc_now
from evalctl.output_folder import check_folder, claim_folder, write_into
from evalctl.provenance import code_version
from evalctl.study.experiment import ExperimentSpec
from evalctl.study.page import Report
from evalctl.study.report_headline import headline
from evalctl.study.report_queries import query_pages
from evalctl.study.retrieval_groups import stored_run
from evalctl.study.runner import plan
from evalctl.study.tasks import TASKS, last_outcome, recall

INPUTS_FILE = "inputs.json"  # what the report was made from; unchanged inputs keep the report


def _missing(report: Report, steps, missing: dict[str, tuple[str, str] | None]) -> None:
    """The task steps without a stored result, and why: failed or skipped at the latest `evalctl run` (its
    study-outcome record), else not run yet. The tables leave them out; this section names them."""
    import pandas as pd

    if not missing:
        return
    report.h("Missing results")
    report.p(f"{len(missing)} of the spec's {sum(s.target is not None for s in steps)} task steps have no stored "
             "result, so the tables leave these systems out:")
    report.table(pd.DataFrame([
        {"task": s.kind, "system": str(s.target), "status": (missing[s.key] or ("not run", ""))[0],
         "why": (missing[s.key] or ("", "no `evalctl run` of this spec has reached it"))[1]}
        for s in steps if s.key in missing]))


def _recipes(report: Report, pairs: list[dict]) -> None:
    import pandas as pd

    report.h("Fine-tuning recipes")
    keys = ("task", "corpus", "view", "what", "model", "recipe", "metric", "base_mean", "tuned_mean")
    rows = [{k: round(r[k], 4) if isinstance(r[k], float) else r[k] for k in keys}
            | {"delta": round(r["tuned_mean"] - r["base_mean"], 4)} for r in pairs]
    report.table(pd.DataFrame(rows) if rows else pd.DataFrame([{"note": "no fine-tuned models in this spec"}]))


def _findings(report: Report, steps, pairs: list[dict]) -> None:
    """The findings, computed from the stored results: short claims, their evidence in footnotes."""
    from evalctl.study import findings as rf  # scipy (its bootstrap): an up-to-date report never pays for it
    from evalctl.evaluators.scoring.metrics import PRIMARY, evaluate_run

    report.h("Findings")
    results, sampled = [], set()
    for s in steps:
        if s.kind == "retrieval" and s.scores and s.scores() and s.ref():
            run = stored_run(s.ref(), report.runs)
            t = s.target
            results.append(rf.RetrievalResult(t.corpus, t.model, t.view_label, t.what, run.id, run.label,
                                              evaluate_run(run).per_query[PRIMARY]))
            if run.manifest.get("query_sample"):
                sampled.add(run.id)
    # A system that searched a sample (exact_queries) is ranked against the others in its own table, on the
    # sample's queries; the findings rank the systems of a corpus on the queries they all searched.
    full = {r.corpus for r in results if r.run_id not in sampled}
    results = [r for r in results if r.run_id not in sampled or r.corpus not in full]
    found = rf.retrieval_findings(results)
    for corpus in dict.fromkeys(r.corpus for r in results):
        best = max((r for r in results if r.corpus == corpus), key=lambda r: r.mean)
        run = report.runs[best.run_id]
        if (run.manifest.get("qrels_spec") or {}).get("source") != "known_item":
            domains = {d: (sc.n_queries, sc.mean[PRIMARY])
                       for d in ("IN", "OUT") for sc in [evaluate_run(run, domain=d, metrics=(PRIMARY,))]}
            found += [f for f in [rf.in_out_finding(corpus, best.label, best.run_id, domains)] if f]
    # one per recipe x task x label set: dense retrieval, the logistic-regression probe, V-measure
    found += rf.recipe_findings([p for p in pairs if p["what"] == "dense" or p["task"] != "retrieval"
                                 and not p["metric"].startswith("knn/")])
    if found:
        report.findings(found)
    else:
        report.p("No stored results yet: run `evalctl run` first.")


def _recipe_pairs(steps, runs: dict) -> list[dict]:
    """Base vs fine-tuned model on the same task, corpus, view and method/label set, per headline metric."""
    from evalctl.models import get_model

    rows = []
    for s, base in _tuned_and_base(steps):
        lineage, task = get_model(s.target.model).lineage, TASKS.get(s.kind)
        for metric in s.scores():
            if metric in base.scores() and _headline(metric):
                rows.append({"task": s.kind, "corpus": s.target.corpus, "view": s.target.view_label,
                             "what": s.target.what, "model": s.target.model, "recipe": lineage["recipe"]["id"],
                             "metric": metric, "base_mean": base.scores()[metric], "tuned_mean": s.scores()[metric],
                             "base": task.per_unit(base, metric, runs), "tuned": task.per_unit(s, metric, runs),
                             "ids": [base.ref(), s.ref()]})
    return rows


def _headline(metric: str) -> bool:
    return metric in ("ndcg@10", "logreg/micro_f1", "knn/micro_f1") or "v_measure" in metric


def _tuned_and_base(steps):
    """(fine-tuned model's step, its base model's step) for every task step with stored scores."""
    from evalctl.models import get_model

    for s in steps:
        if not s.scores or s.target is None or s.target.model == "bm25":
            continue
        lineage = getattr(get_model(s.target.model), "lineage", None)
        if not lineage or not s.scores():
            continue
        base_target = dataclasses.replace(s.target, model=lineage.get("base_model"))
        base = next((b for b in steps if b.target == base_target), None)
        if base is not None and base.scores():
            yield s, base


def write_report(spec: ExperimentSpec, out: Path, force: bool = False) -> tuple[Path, Path, bool]:
    """Write the report; returns its two files and whether it was (re)written. A report whose inputs
    (every step's stored scores and run, the spec file, the code version) are unchanged is kept. `out` must
    be new, empty or an earlier evalctl report (output_folder); `force` also writes into any other folder."""
    check_folder(out, "report", (INPUTS_FILE, "code_version"), force=force)
    for name, task in TASKS.items():
        for entry in spec.entries(name):
            task.check_stored(spec, entry)
    steps = plan(spec)
    for s in steps:  # the study records `evalctl run` left: no node, no index manifest is read
        if s.target is not None:
            recall(spec.name, s)
            if ref := s.ref():  # a damaged input is refused by name, never reported (nor kept as up to date)
                results_store.get(s.target.corpus, ref)
    md, page, inputs_file = out / "report.md", out / "report.html", out / INPUTS_FILE
    missing = {s.key: last_outcome(spec.name, s) for s in steps if s.target is not None and not s.scores()}
    inputs = json.dumps({"code_version": code_version(), "spec": Path(spec.source_path).read_text(),
                         "steps": [[s.key, s.scores() if s.scores else None, s.ref() if s.ref else None]
                                   for s in steps], "missing": missing}, sort_keys=True, default=str)
    if not force and md.exists() and page.exists() and inputs_file.exists() and inputs_file.read_text() == inputs:
        return md, page, False
    claim_folder(out, "report")
    report = Report(f"evalctl report: {spec.name}")
    report.p(f"{spec.description.strip()} Generated {utc_now('%Y-%m-%d %H:%M UTC')} by "
             f"evalctl {code_version()} from the results store.")
    pairs = _recipe_pairs(steps, report.runs)
    headline(report, steps)
    _missing(report, steps, missing)
    _findings(report, steps, pairs)
    for _, task in TASKS.items():
        task.report(report, spec, steps, out)
    _recipes(report, pairs)
    for page_name, query_page in query_pages(report, steps):
        write_into(out, f"{page_name}.md", query_page.markdown())
        write_into(out, f"{page_name}.html", query_page.html(out))
    write_into(out, md.name, report.markdown())
    write_into(out, page.name, report.html(out))
    write_into(out, inputs_file.name, inputs)
    return md, page, True
