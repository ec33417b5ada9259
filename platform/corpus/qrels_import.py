"""Judgments made elsewhere as a named qrels set of a corpus (`evalctl qrels import FILE --format F --name N`).

The set is stored as evalctl's own are (qrels.write_qrels_set: `<corpus>/qrels/<name>/`, kind "given", read by
`--qrels NAME`), with its provenance (file, sha256, format, time) and what the import dropped in its manifest:
- Split: a TREC qrels file has none, and evalctl's hash split would quietly leave a fifth of someone else's test
  collection out of its test scores; every judgment goes into the one split `--split` names (test by default,
  the split `retrieve` and `runs import` score by default). Judgments meant for tuning are a second file, imported
  as a second set with `--split dev`.
- Queries: an id is looked up among the corpus's imported queries first (BEIR, DAPFAM), then among its records
  (a citation landscape, where a patent asks); the query and its family are excluded from its ranking, as in every
  qrels set, so a judgment naming one of them is dropped and counted.
- Relevance above 0 is a positive, kept as given (graded); 0 or less is judged not relevant and not kept (BEIR's
  rule), counted.
- Ids: known_ids, the same check as `runs import`.
- A set is imported once: the same file again is reported unchanged, another file under the name is refused
  (runs scored on the set keep their judgments; choose another --name).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from evalctl.clock import utc_now
from evalctl.corpus.known_ids import DEFAULT_MAX_UNKNOWN_SHARE, KnownIds
from evalctl.corpus.qrels import (QrelsContent, QrelsPair, QrelsQuery, QrelsSet, QrelsSpec, domain_codes,
                                  domain_label, list_qrels, load_qrels, qrels_manifest, write_qrels_set)
from evalctl.corpus.store import Corpus
from evalctl.digests import file_digest
from evalctl.errors import BadInput
from evalctl.parameters import param
from evalctl.registry import Registry

if TYPE_CHECKING:
    from evalctl.corpus.import_formats.trec import Judgment

QRELS_FORMATS: Registry[Callable[[Path], list[Judgment]]] = Registry("qrels import format", {
    "trec": "evalctl.corpus.import_formats.trec:read_qrels",
})
_COLUMNS = ("family_id", "jurisdiction", "ipc", "cpc")  # what a qrels pair needs of a record: family, domain


class QrelsImportError(BadInput, ValueError):
    pass


@dataclass(frozen=True)
class QrelsImportParams:
    name: str = param(help="Name of the qrels set, as `--qrels NAME` names it (retrieve, runs import, a spec).")
    fmt: str = param("trec", flag="--format", choices=QRELS_FORMATS, help="Layout of FILE; trec: `qid 0 docid rel`.")
    split: Literal["train", "dev", "test"] = param("test", help="The split every judgment of FILE goes into (the file "
                                                   "has none).")
    max_unknown_share: float = param(DEFAULT_MAX_UNKNOWN_SHARE, min=0, max=1, help="Share of FILE's rows that may "
                                     "name a query or document the corpus does not hold: they are dropped and "
                                     "counted; more refuses the import.")


@dataclass(frozen=True)
class QrelsImported:
    qrels: QrelsSet  # its manifest's "imported" and "id_check" say where it came from and what was dropped
    unchanged: bool  # this file was imported under this name before


def import_qrels(corpus: Corpus, path: Path, params: QrelsImportParams) -> QrelsImported:
    spec = QrelsSpec(name=params.name)  # checks the name
    digest = file_digest(path)
    if params.name in list_qrels(corpus):
        return QrelsImported(_same_file(corpus, params, digest), unchanged=True)
    judgments = QRELS_FORMATS.get(params.fmt)(path)
    asked = {r.id: r for r in corpus.queries()}
    docs = {r.id: r for r in corpus.records(columns=_COLUMNS)}
    known = KnownIds(queries=asked.keys() | docs.keys(), documents=docs.keys(),
                     where=f"corpus {corpus.name!r} (its queries and documents)", max_share=params.max_unknown_share)
    kept, check = known.keep(judgments, lambda j: (j.query_id, j.doc_id), path.name)
    families: dict[str, set[str]] = defaultdict(set)
    for r in docs.values():
        families[r.family].add(r.id)
    positives = [j for j in kept if j.relevance > 0]
    excluded = {q: frozenset({q} | (families[docs[q].family] if q in docs else set()))
                for q in dict.fromkeys(j.query_id for j in positives)}

    def codes(record) -> frozenset[str]:
        return domain_codes(record, spec.domain_scheme, spec.domain_chars)

    pairs = [QrelsPair(j.query_id, j.doc_id, j.relevance, domain_label(codes(asked.get(j.query_id) or docs[j.query_id]),
                                                                       codes(docs[j.doc_id])), params.split)
             for j in positives if j.doc_id not in excluded[j.query_id]]
    if not pairs:
        raise QrelsImportError(f"{path.name}: no judgment with relevance above 0 names a known query and a patent "
                               "outside the query's own family; nothing was imported")
    queries = [QrelsQuery(q, params.split, (asked.get(q) or docs[q]).jurisdiction,
                          "queries" if q in asked else "corpus", excluded[q])
               for q in dict.fromkeys(p.query_id for p in pairs)]
    stats = {"imported": {"format": params.fmt, "file": path.name, "sha256": digest, "imported_at": utc_now(),
                          "split": params.split},
             "id_check": check.to_manifest(), "not_relevant_judgments": len(kept) - len(positives),
             "own_family_judgments": len(positives) - len(pairs)}
    try:
        qset = write_qrels_set(corpus, spec, QrelsContent(queries, pairs, stats=stats), overwrite=False)
    except FileExistsError:  # imported by another command since the check above
        return QrelsImported(_same_file(corpus, params, digest), unchanged=True)
    return QrelsImported(qset, unchanged=False)


def _same_file(corpus: Corpus, params: QrelsImportParams, digest: str) -> QrelsSet:
    """The stored set of that name when it was imported from this file into this split; else refused by name."""
    stored = qrels_manifest(corpus, params.name)
    was = stored.get("imported") or {}
    if (was.get("sha256"), was.get("split"), stored.get("corpus_hash")) != (digest, params.split,
                                                                           corpus.content_hash):
        origin = f"imported from {was['file']} ({was['sha256']}, split {was['split']})" if was else \
            f"built by evalctl ({stored.get('kind')})"
        raise QrelsImportError(f"corpus {corpus.name!r} already has a qrels set {params.name!r}, {origin}: a set is "
                               "never replaced by an import (runs scored on it keep their judgments); choose another "
                               "--name")
    return load_qrels(corpus, params.name)
