"""A study's part of `evalctl export mteb`: its task steps read as its report reads them (their study records, each
step's means and main score as the task's own report_scores and main_score give them under the spec's empty-query
policy), so an exported main score is the one the report shows. A step without a stored result is named, never
skipped."""

from __future__ import annotations

from evalctl import results_store
from evalctl.evaluators.referee.mteb_export import MtebScore, NotExported, result_entries
from evalctl.study.abstasks.records import recorded
from evalctl.study.abstasks.registry import task_targets
from evalctl.study.abstasks.steps import spec_models
from evalctl.study.page.document import RunCache
from evalctl.study.spec.experiment import ExperimentSpec


def study_entries(spec: ExperimentSpec) -> list[MtebScore | NotExported]:
    """Each task step's export, in the plan's order (of two results for one MTEB file, the first is written)."""
    runs = RunCache(spec.coverage.empty_queries)  # the report's policy: its means are the exported ones
    out: list[MtebScore | NotExported] = []
    for task, _, sid in task_targets(spec, spec_models(spec)):
        step = recorded(spec.name, sid)
        if not step.ref or not results_store.intact(sid.target.corpus, step.ref):
            out.append(NotExported(step.key, "no intact stored result: `evalctl run` has not made it (or it failed: "
                                             "`evalctl report` says why)"))
            continue
        means = task.report_scores(step, runs)
        out += result_entries(results_store.get(sid.target.corpus, step.ref), means.get(task.main_score(sid.target)),
                              means)
    return out
