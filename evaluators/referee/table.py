"""The side-by-side referee table for one landscape: export it, run evalctl's exact and BM25 runs, and
score the same task with trec_eval, MTEB and Pyserini (evaluators/referee/peers.py). A referee whose tool is
missing is reported as skipped with the reason, the others still run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from evalctl.corpus.export import export_landscape, read_beir_export
from evalctl.corpus.qrels import load_qrels
from evalctl.corpus.store import load_corpus
from evalctl.corpus.views import load_views
from evalctl.errors import BadInput
from evalctl.evaluators.referee import peers as rf
from evalctl.evaluators.retrieval.params import RetrievalParams
from evalctl.evaluators.retrieval.retrieve import RetrievalOptions, retrieval_spec, retrieve
from evalctl.evaluators.scoring.metrics import score
from evalctl.evaluators.scoring.runs import StoredRun
from evalctl.indexers.index_loader import index_corpus
from evalctl.models import get_model

DENSE_METRICS = ("ndcg@10", "ndcg@100")  # the MTEB comparison; MTEB's DAPFAM main score is nDCG@100


@dataclass(frozen=True)
class LandscapeSpec:
    corpus: str
    model: str
    view: str
    query_view: str | None = None
    qrels: str = "citations"
    split: str = "test"
    k: int = 100


@dataclass
class RefereeReport:
    spec: LandscapeSpec
    export: dict
    rows: list[rf.Row] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)  # each row's system (a method) -> its run's label
    facts: dict = field(default_factory=dict)  # overlaps, counts, versions
    skipped: dict[str, str] = field(default_factory=dict)  # referee -> why

    def markdown(self) -> str:
        s, e = self.spec, self.export
        head = (f"Referee table: corpus {s.corpus}, view {e['query_view']}→{e['view']}, qrels {s.qrels}/{s.split}, "
                f"model {s.model}; {e['documents']} documents, {e['queries']} queries, {e['pairs']} pairs")
        systems = ", ".join(self.labels[s] for s in dict.fromkeys(r.system for r in self.rows))
        parts = [head, f"systems: {systems}; referee cells: value (referee - evalctl)", "", rf.format_table(self.rows), ""]
        parts += [f"- {k}: {v}" for k, v in self.facts.items()]
        parts += [f"- {name} skipped: {why}" for name, why in self.skipped.items()]
        return "\n".join(parts)


def _runs(client, spec: LandscapeSpec) -> dict[str, StoredRun]:
    corpus = load_corpus(spec.corpus)
    index_corpus(client, corpus, [load_views()[spec.view]], get_model(spec.model), progress=False)
    opts = RetrievalOptions(progress=False)
    return {m: retrieve(client, retrieval_spec(RetrievalParams(spec.corpus, spec.view, m, spec.model,
                                                               query_view=spec.query_view, qrels=spec.qrels,
                                                               split=spec.split, k=spec.k)), opts)
            for m in ("exact", "bm25")}


def referee_landscape(client, spec: LandscapeSpec, out_dir: Path) -> RefereeReport:
    """Export `spec`'s landscape to `out_dir`/beir and score it with evalctl and every available referee."""
    corpus = load_corpus(spec.corpus)
    qset = load_qrels(corpus, spec.qrels)
    summary = export_landscape(corpus, qset, "beir", out_dir / "beir", view=spec.view, split=spec.split,
                               query_view=spec.query_view)
    task = read_beir_export(out_dir / "beir")
    if not task.queries:  # the referees (MTEB first) cannot score an empty task, and evalctl would average nothing
        raise BadInput(f"no query of {spec.qrels}/{spec.split} has {spec.query_view or spec.view} text in corpus "
                       f"{spec.corpus} ({summary.queries_without_text} without it): nothing to referee; choose a view "
                       "its queries have (--view, --query-view)")
    report = RefereeReport(spec, json.loads((out_dir / "beir" / "export.json").read_text()))
    runs = _runs(client, spec)
    qrels = qset.qrels(split=spec.split)
    exported = [q for q in qrels if q in task.queries]  # the queries every referee sees
    if summary.queries_without_text:
        report.facts["queries without query-view text"] = (f"{summary.queries_without_text} (scored 0 by evalctl; "
                                                           "the rows below average over the exported queries)")
    ours = {m: score(r.ranking, qrels).per_query for m, r in runs.items()}
    ours_mean = {m: {k: rf.mean_over(v, exported) for k, v in pq.items()} for m, pq in ours.items()}
    report.labels.update({m: r.label for m, r in runs.items()})
    sub_qrels = {q: qrels[q] for q in exported}

    try:
        for m, r in runs.items():
            te = rf.trec_eval_scores(r.ranking, sub_qrels)
            report.rows += rf.metric_rows(m, "trec_eval", ours_mean[m], {k: rf.mean_over(v, exported)
                                                                               for k, v in te.items()})
    except rf.RefereeUnavailable as e:
        report.skipped["trec_eval"] = str(e)

    try:
        mt = rf.mteb_dense(task, spec.model, depth=spec.k)
        own = {m: mt.scores[m.replace("@", "_at_")] for m in DENSE_METRICS}
        report.rows += rf.metric_rows("exact", "MTEB", {m: ours_mean["exact"][m] for m in DENSE_METRICS}, own)
        # MTEB rounds its means to 5 decimals; its own ranking rescored here shows the unrounded values
        report.facts["MTEB ranking scored by evalctl (unrounded)"] = {
            m: round(v, 6) for m, v in rf.rescore(mt.ranking, sub_qrels, DENSE_METRICS).items()}
        # identical texts (family members) tie; trec_eval, inside MTEB, orders ties by id descending
        report.facts["evalctl exact in trec_eval's tie order (engine scores)"] = {
            m: round(v, 6) for m, v in rf.trec_eval_tie_order(runs["exact"].ranking, sub_qrels, DENSE_METRICS).items()}
        report.facts["MTEB top-10 overlap with evalctl exact"] = round(rf.top_overlap(runs["exact"].ranking, mt.ranking), 4)
        report.facts["MTEB"] = mt.notes
    except rf.RefereeUnavailable as e:
        report.skipped["MTEB"] = str(e)

    try:
        bm = runs["bm25"].manifest["index_manifest"]["bm25"]  # the k1/b the index was built with
        ps = rf.pyserini_bm25(task, bm["k1"], bm["b"], runs["bm25"].manifest.get("bm25_max_terms"), depth=spec.k)
        report.rows += rf.metric_rows("bm25", "Pyserini", ours_mean["bm25"], rf.rescore(ps.ranking, sub_qrels))
        report.facts["Pyserini top-10 overlap with evalctl bm25"] = round(rf.top_overlap(runs["bm25"].ranking, ps.ranking), 4)
        report.facts["Pyserini"] = ps.notes
    except rf.RefereeUnavailable as e:
        report.skipped["Pyserini"] = str(e)
    report.facts["evalctl runs"] = {m: r.id for m, r in runs.items()}
    return report

