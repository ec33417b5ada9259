"""Peers as referees: the same landscape scored by trec_eval, MTEB and Pyserini next to evalctl.

- trec_eval (pytrec_eval) rescores evalctl's stored runs on the same qrels. The run goes in with
  rank-derived scores (n, n-1, ... 1): trec_eval sorts by score and breaks ties by document id, so
  distinct descending scores make it score exactly evalctl's order. mrr@k is trec_eval's recip_rank
  on the run cut at k; a qrels query missing from the run scores 0, as in evalctl.
- MTEB runs dense retrieval on a BEIR export (platform/corpus/export.py) as a local task with the same
  model object evalctl loads (same weights, token limit and prompts). evalctl's exclusions (the query
  and its family) become MTEB's `top_ranked` candidate lists (every document but the excluded ones),
  so MTEB brute-forces exactly evalctl's search space; MTEB's own pytrec_eval scoring gives the numbers.
- Pyserini indexes the export with its bundled Anserini (Lucene BM25, Porter-stemmed English analyzer
  with Lucene's English stop words, like OpenSearch's `english` analyzer) at evalctl's k1/b; excluded
  documents are dropped from a deeper ranking, queries are cut to evalctl's BM25 term limit.
Each optional tool is imported only where it is used; a missing one raises RefereeUnavailable naming it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from evalctl.corpus.export import ExportedTask
from evalctl.evaluators.retrieval.query_bodies import truncate_terms
from evalctl.evaluators.scoring.metrics import METRICS, metric_parts, score
from evalctl.evaluators.scoring.runs import Ranking, ranked
from evalctl.indexers.model_loader import load_model
from evalctl.models import get_model
from evalctl.opensearch.node import NodeError, find_java
from evalctl.paths import confine_libraries

TOP10 = 10


class RefereeUnavailable(RuntimeError):
    """An optional referee tool (mteb, pyserini, pytrec-eval-terrier, a JDK 21+) is missing or cannot run."""


def _need(module: str, package: str):
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise RefereeUnavailable(f"{package} is not installed ({e}); pip install 'evalctl[referee]'") from None


# --------------------------------------------------------------------------- trec_eval


def _trec_measure(metric: str) -> tuple[str, str, int]:
    """evalctl metric name -> (pytrec_eval measure to request, result key, run depth to cut at)."""
    name, k = metric_parts(metric)
    measures = {"ndcg": ("ndcg_cut", f"ndcg_cut_{k}"), "recall": ("recall", f"recall_{k}"),
                "map": ("map_cut", f"map_cut_{k}"), "precision": ("P", f"P_{k}"), "mrr": ("recip_rank", "recip_rank")}
    if name not in measures:
        raise ValueError(f"no trec_eval measure for {metric!r}")
    measure, key = measures[name]
    return (f"{measure}.{k}" if measure != "recip_rank" else measure), key, k


def trec_eval_scores(ranking: Ranking, qrels: dict[str, dict[str, int]],
                     metrics: tuple[str, ...] = METRICS) -> dict[str, dict[str, float]]:
    """Per-query trec_eval values {metric: {query: value}} of `ranking` in its own order, over the qrels' queries."""
    pytrec_eval = _need("pytrec_eval", "pytrec-eval-terrier")
    out: dict[str, dict[str, float]] = {}
    for m in metrics:
        measure, key, depth = _trec_measure(m)
        cut = depth if key == "recip_rank" else None
        run = {q: {d: float(len(docs[:cut]) - i) for i, (d, _) in enumerate(docs[:cut])}
               for q in qrels if (docs := ranking.get(q))}
        got = pytrec_eval.RelevanceEvaluator(qrels, {measure}).evaluate(run)
        out[m] = {q: float(got.get(q, {}).get(key, 0.0)) for q in qrels}
    return out


def trec_eval_tie_order(ranking: Ranking, qrels: dict[str, dict[str, int]], metrics: tuple[str, ...]) -> dict[str, float]:
    """Means of `ranking` scored by trec_eval on its engine scores, so tied documents go in trec_eval's
    (and MTEB's) order, document id descending, instead of evalctl's: what tie order alone moves."""
    pytrec_eval = _need("pytrec_eval", "pytrec-eval-terrier")
    measures = {m: _trec_measure(m) for m in metrics}
    if any(key == "recip_rank" for _, key, _ in measures.values()):
        raise ValueError("mrr@k needs a cut run; use trec_eval_scores")
    run = {q: dict(docs) for q in qrels if (docs := ranking.get(q))}
    got = pytrec_eval.RelevanceEvaluator(qrels, {measure for measure, _, _ in measures.values()}).evaluate(run)
    return {m: sum(got.get(q, {}).get(key, 0.0) for q in qrels) / len(qrels) for m, (_, key, _) in measures.items()}


# --------------------------------------------------------------------------- MTEB


@dataclass(frozen=True)
class RefereeRun:
    """A referee's ranking and its scores as the referee itself computes them."""

    ranking: Ranking
    scores: dict[str, float]
    notes: dict = field(default_factory=dict)


def _local_task(task: ExportedTask):
    """An MTEB retrieval task over the exported files (no hub): corpus, queries, qrels, and each query's
    candidates = every document but the ones evalctl excludes."""
    from datasets import Dataset  # optional: referee (mteb and its datasets)

    from mteb.abstasks.retrieval import AbsTaskRetrieval
    from mteb.abstasks.task_metadata import TaskMetadata

    split = task.summary["split"]
    metadata = TaskMetadata(
        name="EvalctlExportRetrieval", description=f"evalctl export of {task.summary['corpus']}",
        dataset={"path": "local/evalctl-export", "revision": task.summary["corpus_hash"]},
        reference=None, type="Retrieval", modalities=["text"], category="t2t", eval_splits=[split],
        eval_langs=["eng-Latn"], main_score="ndcg_at_10", date=None, domains=["Legal"], license="not specified",
        annotations_creators="derived", sample_creation="found", dialect=[], bibtex_citation="", is_public=False,
        task_subtypes=["Patent retrieval"],
    )
    ids = list(task.corpus)
    corpus = Dataset.from_dict({"id": ids, "title": [task.corpus[d]["title"] for d in ids],
                                "text": [task.corpus[d]["text"] for d in ids]})
    qids = [q for q in task.queries if q in task.qrels]
    queries = Dataset.from_dict({"id": qids, "text": [task.queries[q] for q in qids]})
    top_ranked = {q: [d for d in ids if d not in task.excluded.get(q, ())] for q in qids}

    class EvalctlExportRetrieval(AbsTaskRetrieval):
        k_values = (1, 3, 5, 10, 20, 100)

        def load_data(self, **kwargs) -> None:
            self.dataset = {"default": {split: {"corpus": corpus, "queries": queries,
                                                "relevant_docs": task.qrels, "top_ranked": top_ranked}}}
            self.data_loaded = True

    EvalctlExportRetrieval.metadata = metadata
    return EvalctlExportRetrieval()


def mteb_dense(task: ExportedTask, model_id: str, batch_size: int = 32, depth: int = 100) -> RefereeRun:
    """MTEB's retrieval evaluation of `model_id` (loaded the way evalctl loads it) on the exported task."""
    confine_libraries()  # MTEB's results cache under evalctl's cache, not $HOME
    mteb = _need("mteb", "mteb")
    from mteb.models.sentence_transformer_wrapper import SentenceTransformerEncoderWrapper  # optional: referee

    spec = get_model(model_id)
    prompts = {role: spec.prompt_for(role, task_type="retrieval") for role in ("query", "document")}
    model = SentenceTransformerEncoderWrapper(load_model(spec), model_prompts={k: v for k, v in prompts.items() if v}
                                              or None)
    mtask = _local_task(task)
    split = task.summary["split"]
    with tempfile.TemporaryDirectory(prefix="evalctl-mteb-") as tmp:
        scores = mtask.evaluate(model, split, encode_kwargs={"batch_size": batch_size, "show_progress_bar": False},
                                prediction_folder=Path(tmp))["default"]
        files = list(Path(tmp).glob("*.json"))
        predictions = json.loads(files[0].read_text())
    run = predictions.get("default", predictions)
    run = run.get(split, run)
    ranking = {q: ranked(docs.items(), depth) for q, docs in run.items()}
    notes = {"mteb_version": mteb.__version__, "prompts": prompts, "max_seq_length": spec.max_seq_length}
    return RefereeRun(ranking, {k: float(v) for k, v in scores.items() if isinstance(v, (int, float))}, notes)


def mteb_dapfam_task(folder: Path, name: str = "DAPFAMAllTitlAbsToTitlAbsClmRetrieval"):
    """One of MTEB's own 18 DAPFAM task classes, pointed at a local DAPFAM-layout folder (an evalctl
    `--format dapfam` export, or a local copy of datalyes/DAPFAM_patent) instead of the hub.

    MTEB builds the texts itself (mteb/tasks/retrieval/eng/dapfam_patent_retrieval.py): a query is its
    fields joined by "\n" (TitlAbs: title_en, abstract_en; TitlAbsClm: + claims_text); a document is
    {"title": title_en, "text": the other fields joined by "\n"} (TitlAbs / TitlAbsClm / FullText add
    claims_text and description_en), which MTEB's loader turns into title + " " + text. Pairs with
    relevance_score > 0 are relevant (binary); All / IN / OUT filter on domain_rel and drop queries left
    without a positive; the main score is nDCG@100 on the single `train` split; no self or family
    exclusion (DAPFAM's query families are not among its targets)."""
    _need("mteb", "mteb")
    from mteb.tasks.retrieval.eng import dapfam_patent_retrieval as dapfam  # optional: referee

    cls = getattr(dapfam, name, None)
    if cls is None:
        have = sorted(n for n in dir(dapfam) if n.startswith("DAPFAM"))
        raise ValueError(f"MTEB has no DAPFAM task {name!r}; it has {', '.join(have)}")
    task = cls()
    task.metadata = task.metadata.model_copy(update={"dataset": {"path": str(folder), "revision": "local"}})
    return task


# --------------------------------------------------------------------------- Pyserini


def _java_home() -> str:
    try:
        return str(find_java(21))
    except NodeError as e:
        raise RefereeUnavailable(f"Pyserini needs a JDK 21+: {e}") from None


def pyserini_bm25(task: ExportedTask, k1: float, b: float, max_terms: int | None, depth: int = 100,
                  workdir: Path | None = None) -> RefereeRun:
    """Lucene BM25 via Pyserini's bundled Anserini on the exported corpus (title and text joined by a newline,
    the view's own text). Indexing and search run in a child Python with JAVA_HOME set."""
    if importlib.util.find_spec("pyserini") is None or importlib.util.find_spec("jnius") is None:
        raise RefereeUnavailable("pyserini (with pyjnius) is not installed; pip install 'evalctl[referee]'")

    with tempfile.TemporaryDirectory(prefix="evalctl-pyserini-", dir=workdir) as tmp:
        root = Path(tmp)
        (root / "docs").mkdir()
        with open(root / "docs" / "docs.jsonl", "w", encoding="utf-8") as f:
            for d, doc in task.corpus.items():
                text = "\n".join(t for t in (doc["title"], doc["text"]) if t)
                f.write(json.dumps({"id": d, "contents": text}, ensure_ascii=False) + "\n")
        deepest = depth + max((len(x) for x in task.excluded.values()), default=0)
        queries = {q: truncate_terms(t, max_terms)[0] for q, t in task.queries.items() if q in task.qrels}
        (root / "queries.json").write_text(json.dumps(queries))
        env = dict(os.environ, JAVA_HOME=_java_home())
        cmd = [sys.executable, "-m", "evalctl.evaluators.referee.lucene_process", str(root), str(k1), str(b), str(deepest)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RefereeUnavailable(f"Pyserini failed (exit {proc.returncode}): {proc.stderr.strip()[-1500:]}")
        hits = json.loads((root / "hits.json").read_text())
        stats = json.loads((root / "stats.json").read_text())
    ranking = {q: ranked(((d, s) for d, s in hits.get(q, []) if d not in task.excluded.get(q, ())), depth)
               for q in queries}
    return RefereeRun(ranking, {}, {"k1": k1, "b": b, **stats})


# --------------------------------------------------------------------------- comparison


def top_overlap(a: Ranking, b: Ranking, depth: int = TOP10) -> float:
    """Mean share of a's top-`depth` that b also returns in its top-`depth` (queries where a has hits)."""
    shares = [len({d for d, _ in docs[:depth]} & {d for d, _ in b.get(q, [])[:depth]}) / len(docs[:depth])
              for q, docs in a.items() if docs]
    return sum(shares) / len(shares) if shares else float("nan")


def mean_over(per_query: dict[str, float], queries) -> float:
    vals = [per_query.get(q, 0.0) for q in queries]
    return sum(vals) / len(vals) if vals else float("nan")


@dataclass(frozen=True)
class Row:
    system: str  # the method evalctl ran ("exact", "bm25"), its column's head
    metric: str
    evalctl: float
    referee: str  # trec_eval, MTEB, Pyserini
    value: float

    @property
    def diff(self) -> float:
        return self.value - self.evalctl


def metric_rows(system: str, referee: str, ours: dict[str, float], theirs: dict[str, float]) -> list[Row]:
    return [Row(system, m, ours[m], referee, theirs[m]) for m in ours if m in theirs]


def rescore(ranking: Ranking, qrels: dict[str, dict[str, int]], metrics: tuple[str, ...] = METRICS) -> dict[str, float]:
    """A referee's ranking scored by evalctl's own scorer, to separate ranking differences from metric ones."""
    return score(ranking, qrels, metrics).mean


def format_table(rows: list[Row]) -> str:
    """Markdown, one line per metric: per system, evalctl's value then each referee's (with its difference)."""
    systems = list(dict.fromkeys(r.system for r in rows))
    columns: list[tuple[str, str | None]] = [  # (system, None for evalctl's own column | referee)
        col for s in systems for col in [(s, None), *dict.fromkeys((s, r.referee) for r in rows if r.system == s)]]
    metrics = list(dict.fromkeys(r.metric for r in rows))
    cell = {(r.system, r.referee, r.metric): r for r in rows}
    ours = {(r.system, r.metric): r.evalctl for r in rows}
    head = ["metric"] + [f"evalctl {s}" if ref is None else f"{ref} ({s})" for s, ref in columns]
    body = []
    for m in metrics:
        vals = [m]
        for s, ref in columns:
            if ref is None:
                vals.append(f"{ours[(s, m)]:.6f}" if (s, m) in ours else "")
            elif (r := cell.get((s, ref, m))) is not None:
                vals.append(f"{r.value:.6f} ({r.diff:+.6f})")
            else:
                vals.append("")
        body.append(vals)
    return pd.DataFrame(body, columns=head).to_markdown(index=False, disable_numparse=True)
