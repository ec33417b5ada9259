"""The study records: each finished task step's scores and the id of the stored run or result behind them, and
each unfinished one's latest outcome, stored under the spec's name, so `evalctl report` rebuilds from the store
alone, with the cluster stopped."""

from __future__ import annotations

from evalctl import results_store
from evalctl.study.abstasks.steps import Recorded, Step
from evalctl.study.spec.step_ids import TaskStepId, record_name, step_key

RECORD_KIND = "study-record"
OUTCOME_KIND = "study-outcome"


def _record_identity(spec_name: str, sid: TaskStepId) -> dict:
    return {"name": record_name(spec_name, sid), "spec": spec_name, "step": step_key(sid)}


def remember(spec_name: str, step: Step) -> None:
    """Store a finished task step's scores and ref under the spec's name (rewritten only when they change),
    so the report needs neither the node nor the index manifests that identify the step's result."""
    scores, ref = step.scores(), step.ref()
    if not scores:
        return
    identity = _record_identity(spec_name, step.id)
    old = results_store.find(RECORD_KIND, step.target.corpus, identity)
    if old is None or (old.manifest["scores"], old.manifest["ref"]) != (scores, ref):
        results_store.write(RECORD_KIND, step.target.corpus, identity, {}, extra={"scores": scores, "ref": ref})


def recorded(spec_name: str, sid: TaskStepId) -> Recorded:
    """The step as its study record holds it (no scores and no ref when it has none yet)."""
    record = results_store.find(RECORD_KIND, sid.target.corpus, _record_identity(spec_name, sid))
    return Recorded(sid, dict(record.manifest["scores"]), record.manifest["ref"]) if record else Recorded(sid, {}, None)


def note_outcome(spec_name: str, step: Step, status: str, detail: str) -> None:
    """Store the latest `evalctl run` outcome of a task step that did not finish, so the report can say which
    systems are missing and why from the store alone."""
    results_store.write(OUTCOME_KIND, step.target.corpus, _record_identity(spec_name, step.id), {},
                        extra={"status": status, "detail": detail})


def last_outcome(spec_name: str, sid: TaskStepId) -> tuple[str, str] | None:
    """(status, detail) of the step's latest unfinished run, or None when no run stored one."""
    res = results_store.find(OUTCOME_KIND, sid.target.corpus, _record_identity(spec_name, sid))
    return (res.manifest["status"], res.manifest["detail"]) if res else None
