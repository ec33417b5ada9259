"""The report's limitations paragraph, generated from facts of what ran: each corpus's size and document level
(publication or family records), the number of queries each retrieval view rests on and the views that search
fewer documents (a field some lack), the fine-tuned models' training budget (steps x batch, from their lineage) and the devices the vectors were encoded on (the encode
records of the embedding cache)."""

from __future__ import annotations

from evalctl.corpus.store import load_corpus
from evalctl.evaluators.scoring.run_queries import run_queries
from evalctl.indexers.embedding_cache import encode_devices
from evalctl.models import get_model
from evalctl.study.display_names import model_title
from evalctl.study.experiment import ExperimentSpec
from evalctl.study.coverage import documents_without
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
    models = {s.target.model for s in steps if s.scores}
    facts += _retrieval_facts(report, steps) + _tuning(spec, models)
    devices = sorted({d for m in models for d in encode_devices(m)})
    if devices:
        facts.append(f"Vectors were encoded on {', '.join(devices)}.")
    report.p(" ".join(facts) if facts else "No stored results yet: nothing to qualify.")


def _retrieval_facts(report: Report, steps: list[Recorded]) -> list[str]:
    """Per corpus: the queries each retrieval view's tables rest on, and the views whose documents lack a field
    (their runs search a smaller corpus than the others)."""
    counts: dict[str, dict[str, list[str]]] = {}
    smaller: dict[str, list[str]] = {}
    for g in view_groups(report, steps):
        run = g.main_runs[0]
        split = run.manifest["split"]
        counts.setdefault(g.corpus, {}).setdefault(f"{len(run_queries(run).judged(split))} {split or 'all'} "
                                                   "queries", []).append(g.label)
        missing, total = documents_without(g.corpus, run.manifest["corpus_hash"], g.view)
        if missing:
            smaller.setdefault(g.corpus, []).append(f"{g.label} has {total - missing:,} of the {total:,} documents")
    out = []
    for corpus, sizes in counts.items():
        out.append(f"The retrieval tables of {corpus} rest on " + "; ".join(
            f"{n} ({', '.join(labels)})" for n, labels in sizes.items()) + ": every CI and paired test is over these.")
        if corpus in smaller:
            out.append(f"Views whose fields some documents lack search a smaller corpus ({'; '.join(smaller[corpus])}"
                       "; see Coverage), so a difference between views mixes a change of text with a change of "
                       "corpus.")
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
        out.append(f"{model_title(t.model)} ({t.model}) was fine-tuned from {model_title(t.base)} with recipe "
                   f"{t.recipe} for {length}.")
    return out
