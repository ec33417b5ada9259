"""The study tasks: the built-in ones, then every task an installed distribution declares in the `evalctl.tasks`
entry-point group, as pytest loads its plug-ins: a package adds a task to specs, `evalctl run` and the report with
no edit of evalctl (docs/extending.md). The order is the plan's and the report's (retrieval's answer first);
built-ins are listed here because entry points keep no order.
"""

from __future__ import annotations

from typing import Any

from evalctl.config_files import SpecError
from evalctl.registry import Registry
from evalctl.study.abstasks.base import AbsTask, check_task
from evalctl.study.abstasks.steps import SpecModels
from evalctl.study.spec.experiment import ExperimentSpec
from evalctl.study.spec.step_ids import TaskStepId, step_key

TASKS: Registry[AbsTask] = Registry("task", {
    "retrieval": "evalctl.study.tasks.retrieval.task:TASK",
    "classification": "evalctl.study.tasks.labels.task:CLASSIFICATION",
    "clustering": "evalctl.study.tasks.labels.task:CLUSTERING",
    "transfer": "evalctl.study.tasks.transfer.task:TASK",
    "latency": "evalctl.study.tasks.latency.task:TASK",
}, group="evalctl.tasks", check=check_task)


def task_targets(spec: ExperimentSpec, models: SpecModels) -> list[tuple[AbsTask, Any, TaskStepId]]:
    """(task, entry, step id) of every task step of the spec, in plan order: what the runner plans and the report
    reads. Two steps with one key (one target) are refused: they would share a study record."""
    out, planned_by = [], {}
    for name, task in TASKS.items():
        for i, entry in enumerate(spec.entries(name)):
            for sid in task.targets(models, entry):
                key = step_key(sid)
                if key in planned_by:
                    raise SpecError(f"{spec.source_path}: {planned_by[key]} and {name}[{i}] both plan {key} "
                                    f"(target {sid.target}): give each target once")
                planned_by[key] = f"{name}[{i}]"
                out.append((task, entry, sid))
    return out
