"""The report's limitations paragraph, generated from facts of what ran: each corpus's size and document level
(publication or family records), each task's own facts (its `limitations` hook: the queries each retrieval view
rests on, the views that search fewer documents), the fine-tuned models' training budget (steps x batch, from their lineage) and the devices the vectors were encoded on (the encode
records of the embedding cache)."""

from __future__ import annotations

from evalctl.corpus.store import load_corpus
from evalctl.indexers.embedding_cache import encode_devices
from evalctl.models import get_model
from evalctl.study.page.names import model_title
from evalctl.study.spec.experiment import ExperimentSpec
from evalctl.study.page.document import Report
from evalctl.study.abstasks.registry import TASKS
from evalctl.study.abstasks.steps import Recorded, spec_models

LEVEL = {"publication": "publication-level (one document per publication: a family's other publications are "
                        "separate documents)",
         "family": "family-level (one document per patent family)"}


def limitations_section(report: Report, spec: ExperimentSpec, steps: list[Recorded]) -> None:
    report.h("Limitations")
    done = {s.target.corpus for s in steps if s.scores}
    facts = [f"Corpus {c.name} has {len(load_corpus(c.name)):,} documents, {LEVEL[c.documents]}."
             for c in spec.corpora if c.name in done]
    models = {s.target.model for s in steps if s.scores}
    for name, task in TASKS.items():  # each task's own facts (the retrieval task: queries and documents per view)
        facts += task.limitations(report, spec, [s for s in steps if s.kind == name])
    facts += _tuning(spec, models)
    devices = sorted({d for m in models for d in encode_devices(m)})
    if devices:
        facts.append(f"Vectors were encoded on {', '.join(devices)}.")
    report.p(" ".join(facts) if facts else "No stored results yet: nothing to qualify.")


def _tuning(spec: ExperimentSpec, used: set[str]) -> list[str]:
    """One sentence per fine-tuned model with results: its steps, batch and training pairs (its lineage)."""
    out = []
    for t in spec_models(spec).tunings:
        if t.model not in used:
            continue
        lineage = get_model(t.model).lineage or {}
        training, pairs = lineage.get("training", {}), sum((lineage.get("pairs", {}).get("used") or {}).values())
        steps, batch = training.get("max_steps"), training.get("batch_size")
        length = f"{steps} steps of batch {batch} ({steps * batch:,} of its {pairs:,} training pairs seen)" if steps \
            else f"{training.get('epochs')} epoch(s) of batch {batch} over {pairs:,} training pairs"
        out.append(f"{model_title(t.model)} ({t.model}) was fine-tuned from {model_title(t.base)} with recipe "
                   f"{t.recipe} for {length}.")
    return out
