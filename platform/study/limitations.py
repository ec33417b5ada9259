"""The report's limitations paragraph, generated from facts of what ran: each corpus's size and document level
(publication or family records), the number of queries each retrieval view rests on, the fine-tuned models'
training budget (steps x batch, from their lineage) and the devices the vectors were encoded on (the encode
records of the embedding cache)."""

from __future__ import annotations

from evalctl.corpus.store import load_corpus
from evalctl.evaluators.scoring.run_queries import run_queries
from evalctl.indexers.embedding_cache import encode_devices
from evalctl.models import get_model
from evalctl.study.experiment import ExperimentSpec
from evalctl.study.page import Report
from evalctl.study.retrieval_groups import view_groups
from evalctl.study.tasks import Recorded, spec_models

LEVEL = {"publication": "publication-level (one document per publication: a family's other publications are "
                        "separate documents)",
         "family": "family-level (one document per patent family)"}


def limitations_section(report: Report, spec: ExperimentSpec, steps: list[Recorded]) -> None:
    report.h("Limitations")
    done = {s.target.corpus for s in steps if s.scores}
    facts = [f"Corpus {c.name} has {len(load_corpus(c.name)):,} documents, {LEVEL[c.documents]}."
             for c in spec.corpora if c.name in done]
    for corpus, sizes in _query_counts(report, steps).items():
        facts.append(f"The retrieval results of {corpus} rest on " + ", ".join(sizes) + ": a difference inside "
                     "the confidence intervals shown is not resolved by this many queries.")
    facts += _tuning(spec, {s.target.model for s in steps if s.scores})
    models = {s.target.model for s in steps if s.scores}
    devices = sorted({d for m in models for d in encode_devices(m)})
    if devices:
        facts.append(f"Vectors were encoded on {', '.join(devices)}.")
    report.p(" ".join(facts) if facts else "No stored results yet: nothing to qualify.")


def _query_counts(report: Report, steps: list[Recorded]) -> dict[str, list[str]]:
    """Per corpus: "N <split> queries (views)" for each retrieval view group, as its tables count them."""
    out: dict[str, list[str]] = {}
    for g in view_groups(report, steps):
        run = g.main_runs[0]
        split = run.manifest["split"]
        n = len(run_queries(run).judged(split))
        out.setdefault(g.corpus, []).append(f"{n} {split or 'all'} queries ({g.label})")
    return out


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
        out.append(f"{t.model} was fine-tuned from {t.base} with recipe {t.recipe} for {length}.")
    return out
