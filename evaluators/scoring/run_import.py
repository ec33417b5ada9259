"""Runs made elsewhere as stored runs (`evalctl runs import FILE --format F --name N --corpus C --qrels Q`).

A run file from another system (Pyserini on `evalctl corpus export`'s files, a vendor, a colleague's model) becomes
a results-store run like evalctl's own (runs.save_run: run.trec, run.json, manifest), so `evalctl evaluate`,
`compare` (its paired tests) and `runs list` take it without a special case: its manifest carries the fields
they read, filled as follows.
- method "imported" and model = its --name: its system is "imported:NAME" in every table (runs.system_name);
  `view` / `query_view` are the text the other system searched, as the user states it (`corpus export --view`
  wrote it): they label the run and rebuild its query set, which never depends on them for the scores.
- Queries: the run is scored on every query of the qrels split (run_queries checks them as for any run); a query
  the file has no row for scores 0, as a query evalctl searched with no hit. Rows of queries of another split
  are dropped and counted; so are hits on the query or its family (the qrels' exclusions, which evalctl's own
  searches filter out too), which would otherwise count as misses at the top.
- Order: evalctl's one rule (runs.ranked: score descending, then document id ascending; save_run records it as
  `tie_rule`). The rank column is not read, as trec_eval does not read it; rows where it disagrees with that order
  are counted (`rank_disagreements`), not refused.
- k: the longest ranking kept; no index, no serving cost: `not_served` says why its cost columns are empty.
- Ids: known_ids (unknown queries and documents dropped and counted up to --max-unknown-share, else refused).
Provenance: the file's sha256 and format are part of the identity (the same file imported again under the same
name is the stored run: reported unchanged); its name, `produced_by` and the import time are in the manifest.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from evalctl.clock import utc_now
from evalctl.corpus.known_ids import DEFAULT_MAX_UNKNOWN_SHARE, KnownIds, document_ids
from evalctl.corpus.import_formats.trec import RunRow
from evalctl.corpus.qrels import load_qrels
from evalctl.corpus.query_set import QuerySetError, load_query_set
from evalctl.corpus.store import load_corpus
from evalctl.digests import file_digest
from evalctl.errors import BadInput
from evalctl.evaluators.scoring.runs import Ranking, StoredRun, find_run, ranked, save_run
from evalctl.names import check_name
from evalctl.parameters import param
from evalctl.registry import Registry

RUN_FORMATS: Registry[Callable[[Path], list[RunRow]]] = Registry("run import format", {
    "trec": "evalctl.corpus.import_formats.trec:read_run",
})
METHOD = "imported"
NOT_SERVED = "imported run: not served by evalctl"
EXCLUSION = "query and its family (qrels exclude), dropped from the file's rankings on import"


class RunImportError(BadInput, ValueError):
    pass


@dataclass(frozen=True)
class RunImportParams:
    corpus: str
    name: str = param(help="The run's name: its system is imported:NAME in tables, and its TREC tag.")
    qrels: str = param(help="Qrels set of the corpus the run is scored against (`evalctl corpus qrels`, "
                       "`evalctl qrels import`).")
    view: str = param(help="Document view whose text the other system searched (configs/views.yaml; `evalctl corpus "
                      "export --view`): labels the run beside evalctl's runs of that view.")
    query_view: str | None = param(None, help="View of the query text it searched (default: --view).")
    split: str = param("test", help="Query split the run is scored on: train, dev, test or all.")
    fmt: str = param("trec", flag="--format", choices=RUN_FORMATS, help="Layout of FILE; trec: `qid Q0 docid rank "
                     "score tag`.")
    produced_by: str | None = param(None, help="What made the file (system, version, settings), kept in the manifest.")
    max_unknown_share: float = param(DEFAULT_MAX_UNKNOWN_SHARE, min=0, max=1, help="Share of FILE's rows that may "
                                     "name a query (of the qrels set) or document (of the corpus) evalctl does not "
                                     "hold: they are dropped and counted; more refuses the import.")


@dataclass(frozen=True)
class ImportedRun:
    run: StoredRun  # its manifest says what the import dropped and counted
    unchanged: bool  # this file was imported under this name before: the stored run, not written again


def import_run(path: Path, params: RunImportParams) -> ImportedRun:
    name = check_name(params.name, "--name")  # also the TREC tag: one word
    corpus = load_corpus(params.corpus)
    qset = load_qrels(corpus, params.qrels)
    split = None if params.split == "all" else params.split
    qview = params.query_view or params.view
    try:
        queries = load_query_set(corpus, qset, split, qview)
    except QuerySetError as e:
        raise RunImportError(str(e)) from None
    rows = RUN_FORMATS.get(params.fmt)(path)
    if not rows:
        raise RunImportError(f"{path.name}: no run rows; nothing was imported")
    known = KnownIds(queries={q.id for q in qset.queries}, documents=document_ids(corpus),
                     where=f"qrels set {qset.name!r} (queries) and corpus {corpus.name!r} (documents)",
                     max_share=params.max_unknown_share)
    kept, check = known.keep(rows, lambda r: (r.query_id, r.doc_id), path.name)
    asked = set(queries.ids)
    in_split = [r for r in kept if r.query_id in asked]
    if not in_split:
        raise RunImportError(f"{path.name}: none of its {len(kept)} rows of known queries is of a "
                             f"{split or 'any'} query of qrels set {qset.name!r}; nothing was imported")
    searched = [r for r in in_split if r.doc_id not in queries.exclude[r.query_id]]
    ranking: Ranking = {q: [] for q in queries.ids}  # a query without a row: searched, no hit (scores 0)
    for q, hits in _by_query(searched).items():
        ranking[q] = ranked((r.doc_id, r.score) for r in hits)
    identity = {
        "name": name, "method": METHOD, "model": name, "view": params.view, "query_view": qview,
        "corpus_hash": corpus.content_hash, "qrels": qset.name, "qrels_spec": qset.manifest.get("spec"),
        "split": split, "k": max(map(len, ranking.values())), "query_set": queries.digest(), "exclusion": EXCLUSION,
        "source": {"format": params.fmt, "sha256": file_digest(path)},
    }
    if done := find_run(corpus.name, identity):
        return ImportedRun(done, unchanged=True)
    extra = {"source_file": path.name, "produced_by": params.produced_by, "imported_at": utc_now(),
             "rank_disagreements": rank_disagreements(rows), "id_check": check.to_manifest(),
             "other_split_rows": len(kept) - len(in_split), "excluded_rows": len(in_split) - len(searched),
             "n_queries": len(queries.ids), "n_empty": sum(not hits for hits in ranking.values()),
             "not_served": NOT_SERVED}
    return ImportedRun(save_run(corpus.name, identity, ranking, extra), unchanged=False)


def _by_query(rows: list[RunRow]) -> dict[str, list[RunRow]]:
    out: dict[str, list[RunRow]] = defaultdict(list)
    for r in rows:
        out[r.query_id].append(r)
    return out


def rank_disagreements(rows: list[RunRow]) -> int:
    """Rows whose place by the file's rank column (ties in it by line) is not their place in evalctl's order: the
    file meant another order than its scores give (ranks from a re-ranker over first-stage scores, say), and it is
    scored in the scores' order, as trec_eval scores it."""
    out = 0
    for hits in _by_query(rows).values():
        by_rank = [r.doc_id for r in sorted(hits, key=lambda r: (r.rank, r.line))]
        by_score = [d for d, _ in ranked((r.doc_id, r.score) for r in hits)]
        out += sum(a != b for a, b in zip(by_rank, by_score))
    return out
