"""`evalctl report SPEC`: one self-contained report (Markdown + HTML + PNG plots) from the results store.

It lists the spec's task steps from the spec alone (tasks.task_targets) and reads each one's study record, never
the plan, the node or an index manifest. It opens with when and from what it was generated, then the headline
(each task's part: its own, the retrieval task's opening with the answer, or a table of its headline metrics),
then the missing results and the findings (short claims ranked by their relative change, their evidence in
footnotes), each task's section (the retrieval task's: its methods and coverage from the stored runs, tables with
significance markers, views, scaling, IN vs OUT, fusion gain, per-query pages), the recipe deltas per task, the
limitations (limitations.py) and, last, the spec's own description as written (never the methods). Every table
names the stored runs or results that produced it. Sections without data say so instead of disappearing. The
pages are drawn with page.py's model, as the tasks draw their sections. This module names no task and no metric: it loops over the task registry.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from evalctl import results_store
from evalctl.clock import utc_now
from evalctl.evaluators.scoring.significance_params import describe_protocol
from evalctl.models import get_model
from evalctl.output_folder import check_folder, claim_folder, write_into
from evalctl.provenance import code_version
from evalctl.study.page.names import model_title, relative, score_with_ci
from evalctl.study.spec.experiment import ExperimentSpec
from evalctl.study.report.limitations import limitations_section
from evalctl.study.page.document import Report, RunCache
from evalctl.study.abstasks.base import AbsTask
from evalctl.study.abstasks.records import last_outcome, recorded
from evalctl.study.abstasks.registry import TASKS, task_targets
from evalctl.study.abstasks.steps import Recorded, spec_models

INPUTS_FILE = "inputs.json"  # what the report was made from; unchanged inputs keep the report


def _headline(report: Report, steps: list[Recorded], out: Path) -> None:
    """Each task's part of the headline (its `headline` hook, which may draw a chart into `out`)."""
    report.h("Headline results")
    before = len(report.blocks)
    for name, task in TASKS.items():
        task.headline(report, [s for s in steps if s.kind == name], out)
    if len(report.blocks) == before:
        report.p("No stored results yet: run `evalctl run` first.")


def _missing(report: Report, steps: list[Recorded], missing: dict[str, tuple[str, str] | None]) -> None:
    """The task steps without a stored result, and why: failed or skipped at the latest `evalctl run` (its
    study-outcome record), else not run yet. The tables leave them out; this section names them."""
    import pandas as pd

    if not missing:
        return
    report.h("Missing results")
    report.p(f"{len(missing)} of the spec's {len(steps)} task steps have no stored result, so the tables leave "
             "these systems out:")
    report.table(pd.DataFrame([
        {"task": s.kind, "system": str(s.target), "status": (missing[s.key] or ("not run", ""))[0],
         "why": (missing[s.key] or ("", "no `evalctl run` of this spec has reached it"))[1]}
        for s in steps if s.key in missing]))


def _recipes(report: Report, pairs: list[dict]) -> None:
    """Each fine-tuned model against its base: both means with their CIs (under the study's protocol, over the
    units behind them), the relative change, and the test of the findings where one claims it."""
    import pandas as pd

    from evalctl.evaluators.scoring.compare import run_ci  # pandas, scipy

    report.h("Fine-tuning recipes")
    if not pairs:
        report.p("No fine-tuned models in this spec.")
        return
    rows = []
    for r in pairs:
        percent = r["percent"]
        base, tuned = ([score_with_ci(r[f"{side}_mean"], *run_ci(list(r[side].values()), report.statistics), percent)]
                       for side in ("base", "tuned"))
        tested = r.get("tested")  # set by the findings that test this pair (findings.recipe_findings)
        rows.append({"task": r["task"], "corpus": r["corpus"], "view": r["view"], "what": r["what"],
                     "model": model_title(r["model"]), "metric": r["metric"] + (" (%)" if percent else ""),
                     "base [95% CI]": base[0], "fine-tuned [95% CI]": tuned[0],
                     "change": relative(r["tuned_mean"], r["base_mean"], percent),
                     "test": f"{tested.verdict}, Holm p {tested.tested.p_holm:.4f}" if tested else "-"})
    report.table(pd.DataFrame(rows))
    report.p("CIs are bootstrap intervals over the units behind each mean (queries for retrieval, splits or seeds for "
             "the label tasks). The test is the findings' (see Findings for the protocol and family); it is given for "
             "each task's main metric (retrieval: dense), the other rows are descriptive.")


def _read_by(task: AbsTask, steps: list[Recorded]) -> list[Recorded]:
    """The steps a task's findings and section read: its own, and those of the tasks its metadata names in `reads`."""
    return [s for s in steps if s.kind == task.name or s.kind in task.metadata.reads]


def _findings(report: Report, spec: ExperimentSpec, steps: list[Recorded], pairs: list[dict]) -> None:
    """The findings, computed from the stored results by each task (its `findings` hook): short claims, their
    evidence in footnotes."""
    report.h("Findings")
    report.p(describe_protocol(report.statistics))
    found = []
    for name, task in TASKS.items():
        found += task.findings(report, spec, _read_by(task, steps), [p for p in pairs if p["task"] == name])
    if found:  # the largest effects first, whichever task found them
        report.p("Ranked by the size of the relative change each reports.")
        report.findings(sorted(found, key=lambda f: -abs(f.size)))
    else:
        report.p("No stored results yet: run `evalctl run` first.")


def _recipe_pairs(steps: list[Recorded], model_ids: set[str], runs: dict) -> list[dict]:
    """Base vs fine-tuned model on the same task, corpus, view and method/label set, per headline metric
    (`main`: the step's main one)."""
    rows = []
    for s, base, lineage in _tuned_and_base(steps, model_ids):
        task = TASKS.get(s.kind)
        base_scores, tuned_scores = task.report_scores(base, runs), task.report_scores(s, runs)
        for metric in s.scores:
            if metric in base.scores and metric in task.headline_metrics:
                rows.append({"task": s.kind, "corpus": s.target.corpus, "view": s.target.view_label,
                             "what": s.target.what, "model": s.target.model, "recipe": lineage["recipe"]["id"],
                             "metric": metric, "main": metric == task.main_score(s.target), "percent": task.percent,
                             "base_mean": base_scores[metric], "tuned_mean": tuned_scores[metric],
                             "base": task.per_unit(base, metric, runs), "tuned": task.per_unit(s, metric, runs),
                             "ids": [base.ref, s.ref]})
    return rows


def _tuned_and_base(steps: list[Recorded], model_ids: set[str]):
    """(fine-tuned model's step, its base model's step, the tuned model's lineage) for every task step with
    stored scores whose model (one of the spec's, `model_ids`) was fine-tuned."""
    for s in steps:
        if not s.scores or s.target.model not in model_ids:
            continue
        lineage = getattr(get_model(s.target.model), "lineage", None)
        if not lineage:
            continue
        base_target = dataclasses.replace(s.target, model=lineage.get("base_model"))
        base = next((b for b in steps if b.target == base_target), None)
        if base is not None and base.scores:
            yield s, base, lineage


def write_report(spec: ExperimentSpec, out: Path, force: bool = False) -> tuple[Path, Path, bool]:
    """Write the report; returns its two files and whether it was (re)written. A report whose inputs
    (every task step's stored scores and run, the spec file, the code version) are unchanged is kept. `out`
    must be new, empty or an earlier evalctl report (output_folder); `force` also writes into any other folder."""
    check_folder(out, "report", (INPUTS_FILE, "code_version"), force=force)
    models = spec_models(spec)
    targets = task_targets(spec, models)
    for name, task in TASKS.items():
        for entry in spec.entries(name):
            task.check_stored(spec, entry)
    # the study records `evalctl run` left: no node, no index manifest is read
    steps = [recorded(spec.name, sid) for _, _, sid in targets]
    for s in steps:  # a damaged input is refused by name, never reported (nor kept as up to date)
        if s.ref:
            results_store.get(s.target.corpus, s.ref)
    md, page, inputs_file = out / "report.md", out / "report.html", out / INPUTS_FILE
    missing = {s.key: last_outcome(spec.name, s.id) for s in steps if not s.scores}
    inputs = json.dumps({"code_version": code_version(), "spec": Path(spec.source_path).read_text(),
                         "steps": [[s.key, s.scores, s.ref] for s in steps], "missing": missing},
                        sort_keys=True, default=str)
    if not force and md.exists() and page.exists() and inputs_file.exists() and inputs_file.read_text() == inputs:
        return md, page, False
    claim_folder(out, "report")
    report = Report(f"evalctl report: {spec.name}", runs=RunCache(spec.coverage.empty_queries),
                    statistics=spec.statistics)
    report.p(f"Generated {utc_now('%Y-%m-%d %H:%M UTC')} by evalctl {code_version()} from the results store.")
    pairs = _recipe_pairs(steps, {m.id for m in models.models}, report.runs)
    _headline(report, steps, out)  # the answer first
    _missing(report, steps, missing)
    _findings(report, spec, steps, pairs)
    for _, task in TASKS.items():
        task.section(report, spec, _read_by(task, steps), out)
    _recipes(report, pairs)
    limitations_section(report, spec, steps)
    report.h("Study description (as written in the spec)")
    report.p(spec.description.strip() or "The spec has no description.")
    write_into(out, md.name, report.markdown())
    write_into(out, page.name, report.html(out))
    write_into(out, inputs_file.name, inputs)
    return md, page, True
