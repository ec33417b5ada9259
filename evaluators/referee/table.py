"""The side-by-side referee table for one landscape: export it, run evalctl's exact, dense (HNSW) and BM25 runs,
and score the same task with trec_eval, MTEB and Pyserini (evaluators/referee/peers.py) and the node's own
`_rank_eval` (evaluators/referee/rank_eval.py). A referee whose tool is missing is reported as skipped with the
reason, the others still run; `referees` picks some.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from evalctl.corpus.export import ExportedTask, export_landscape, read_beir_export
from evalctl.corpus.qrels import load_qrels
from evalctl.corpus.store import load_corpus
from evalctl.corpus.views import load_views
from evalctl.errors import BadInput
from evalctl.evaluators.referee import REFEREES
from evalctl.evaluators.referee import peers as rf
from evalctl.evaluators.referee.rank_eval import (CONVENTIONS, RANK_EVAL_CANNOT, RankEvalError, cut_ties,
                                                  rank_eval_scores)
from evalctl.evaluators.retrieval.params import RetrievalParams
from evalctl.evaluators.retrieval.retrieve import (RetrievalOptions, RetrievalSpec, query_bodies, retrieval_spec,
                                                   retrieve)
from evalctl.evaluators.scoring.metrics import metric_parts, score
from evalctl.evaluators.scoring.runs import StoredRun
from evalctl.evaluators.scoring.tie_aware import tie_scores
from evalctl.indexers.index_loader import index_corpus
from evalctl.models import get_model

DENSE_METRICS = ("ndcg@10", "ndcg@100")  # the MTEB comparison; MTEB's DAPFAM main score is nDCG@100
TIE_METRICS = ("ndcg@10", "recall@100", "mrr@10")
SAME = 1e-9  # two computations of one metric differ in the last bits (1e-16) where nothing else differs
SYSTEMS = ("exact", "dense", "bm25")  # every system a referee can judge: one search body per query


@dataclass(frozen=True)
class LandscapeSpec:
    corpus: str
    model: str
    view: str
    query_view: str | None = None
    qrels: str = "citations"
    split: str = "test"
    k: int = 100
    referees: tuple[str, ...] = REFEREES


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


def _specs(spec: LandscapeSpec) -> dict[str, RetrievalSpec]:
    return {m: retrieval_spec(RetrievalParams(spec.corpus, spec.view, m, spec.model, query_view=spec.query_view,
                                              qrels=spec.qrels, split=spec.split, k=spec.k)) for m in SYSTEMS}


def _runs(client, spec: LandscapeSpec) -> dict[str, StoredRun]:
    corpus = load_corpus(spec.corpus)
    index_corpus(client, corpus, [load_views()[spec.view]], get_model(spec.model), progress=False)
    opts = RetrievalOptions(progress=False)
    return {m: retrieve(client, s, opts) for m, s in _specs(spec).items()}


@dataclass(frozen=True)
class Landscape:
    """What every referee reads: the exported task, evalctl's runs and their per-query scores."""
    client: object
    spec: LandscapeSpec
    task: ExportedTask
    runs: dict[str, StoredRun]
    ours: dict[str, dict[str, dict[str, float]]]  # system -> metric -> {query: value}
    qrels: dict[str, dict[str, int]]  # the exported queries' (those every referee sees)

    def mean(self, system: str, metrics=None) -> dict[str, float]:
        return {k: rf.mean_over(v, self.qrels) for k, v in self.ours[system].items() if not metrics or k in metrics}


def _rank_eval(land: Landscape, report: RefereeReport) -> None:
    """The node's `_rank_eval` beside evalctl per system: the means in the table; per query, every difference is
    either at a tie across the metric's cut (counted: the run kept the engine's pick there) or the largest other
    one is a fact."""
    worst, at_cut = {}, {}
    for m, s in _specs(land.spec).items():
        index, bodies = query_bodies(land.client, s)
        theirs = rank_eval_scores(land.client, index, bodies, land.qrels)
        report.rows += rf.metric_rows(m, "_rank_eval", land.mean(m, theirs),
                                      {k: rf.mean_over(v, land.qrels) for k, v in theirs.items()})
        worst[m], at_cut[m] = 0.0, {}
        for metric, per_query in theirs.items():
            differ = {q for q, v in per_query.items() if abs(v - land.ours[m][metric][q]) > SAME}
            tied = cut_ties(land.client, index, bodies, differ, metric_parts(metric)[1]) if differ else set()
            at_cut[m][metric] = len(tied)
            worst[m] = max([worst[m], *(abs(per_query[q] - land.ours[m][metric][q]) for q in differ - tied)])
    report.facts["_rank_eval largest per-query difference (not at a tie across the cut)"] = worst
    report.facts["_rank_eval queries that differ at a tie across the metric's cut"] = at_cut
    report.facts["_rank_eval conventions"] = CONVENTIONS
    report.facts["_rank_eval cannot judge"] = RANK_EVAL_CANNOT


def _trec_eval(land: Landscape, report: RefereeReport) -> None:
    for m, r in land.runs.items():
        te = rf.trec_eval_scores(r.ranking, land.qrels)
        report.rows += rf.metric_rows(m, "trec_eval", land.mean(m), {k: rf.mean_over(v, land.qrels)
                                                                     for k, v in te.items()})


def _mteb(land: Landscape, report: RefereeReport) -> None:
    exact = land.runs["exact"].ranking
    mt = rf.mteb_dense(land.task, land.spec.model, depth=land.spec.k)
    own = {m: mt.scores[m.replace("@", "_at_")] for m in DENSE_METRICS}
    report.rows += rf.metric_rows("exact", "MTEB", land.mean("exact", DENSE_METRICS), own)
    # MTEB rounds its means to 5 decimals; its own ranking rescored here shows the unrounded values
    report.facts["MTEB ranking scored by evalctl (unrounded)"] = {
        m: round(v, 6) for m, v in rf.rescore(mt.ranking, land.qrels, DENSE_METRICS).items()}
    # identical texts (family members) tie; trec_eval, inside MTEB, orders ties by id descending
    report.facts["evalctl exact in trec_eval's tie order (engine scores)"] = {
        m: round(v, 6) for m, v in rf.trec_eval_tie_order(exact, land.qrels, DENSE_METRICS).items()}
    report.facts["MTEB top-10 overlap with evalctl exact"] = round(rf.top_overlap(exact, mt.ranking), 4)
    report.facts["MTEB"] = mt.notes


def _pyserini(land: Landscape, report: RefereeReport) -> None:
    bm25 = land.runs["bm25"]
    bm = bm25.manifest["index_manifest"]["bm25"]  # the k1/b the index was built with
    ps = rf.pyserini_bm25(land.task, bm["k1"], bm["b"], bm25.manifest.get("bm25_max_terms"), depth=land.spec.k)
    report.rows += rf.metric_rows("bm25", "Pyserini", land.mean("bm25"), rf.rescore(ps.ranking, land.qrels))
    report.facts["Pyserini top-10 overlap with evalctl bm25"] = round(rf.top_overlap(bm25.ranking, ps.ranking), 4)
    report.facts["Pyserini"] = ps.notes


# name (--with) -> (the referee, its name in the table)
_REFEREES = {"trec_eval": (_trec_eval, "trec_eval"), "mteb": (_mteb, "MTEB"), "pyserini": (_pyserini, "Pyserini"),
             "rank-eval": (_rank_eval, "_rank_eval")}


def referee_landscape(client, spec: LandscapeSpec, out_dir: Path) -> RefereeReport:
    """Export `spec`'s landscape to `out_dir`/beir and score it with evalctl and every available referee asked."""
    if unknown := sorted(set(spec.referees) - set(_REFEREES)):
        raise BadInput(f"unknown referee {', '.join(unknown)} (one of {', '.join(_REFEREES)})")
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
    if summary.queries_without_text:
        report.facts["queries without query-view text"] = (f"{summary.queries_without_text} (scored 0 by evalctl; "
                                                           "the rows below average over the exported queries)")
    report.labels.update({m: r.label for m, r in runs.items()})
    land = Landscape(client, spec, task, runs, {m: score(r.ranking, qrels).per_query for m, r in runs.items()},
                     {q: qrels[q] for q in qrels if q in task.queries})
    # the mean over every order of the tied documents: where each tool's own tie rule lands around
    ties = {m: tie_scores(r.ranking, land.qrels, TIE_METRICS, spec.k) for m, r in runs.items()}
    report.facts["evalctl tie-aware (every order of the ties)"] = {m: {k: round(t.mean(k), 6) for k in TIE_METRICS}
                                                                  for m, t in ties.items()}
    for name in spec.referees:
        referee, label = _REFEREES[name]
        try:
            referee(land, report)
        except (rf.RefereeUnavailable, RankEvalError) as e:
            report.skipped[label] = str(e)
    report.facts["evalctl runs"] = {m: r.id for m, r in runs.items()}
    return report
