"""A retrieval's query set: the queries of one qrels split (or a seeded sample of them) with their text in the
query view and the ids each query's ranking excludes. Retrieval searches it; scoring recomputes it to check that
a stored run's queries are still what its qrels set defines, and scores the run over exactly those queries."""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass

from evalctl.corpus.qrels import QrelsSet
from evalctl.corpus.store import Corpus
from evalctl.corpus.views import load_views
from evalctl.errors import BadInput


class QuerySetError(BadInput, ValueError):
    """No such view, or no query in the split."""


@dataclass(frozen=True)
class QuerySet:
    ids: tuple[str, ...]
    texts: dict[str, str]  # only queries whose view renders
    exclude: dict[str, frozenset[str]]

    def digest(self) -> str:
        blob = json.dumps([[q, self.texts.get(q), sorted(self.exclude.get(q, ()))] for q in self.ids])
        return "sha256:" + hashlib.sha256(blob.encode()).hexdigest()


SAMPLE_SEED = 0  # a query sample is the same ids on every run (and in the run identity)


def load_query_set(corpus: Corpus, qset: QrelsSet, split: str | None, view_name: str,
                   sample: int | None = None) -> QuerySet:
    views = load_views()
    if view_name not in views:
        raise QuerySetError(f"unknown view {view_name!r}; configs/views.yaml has {', '.join(views)}")
    queries = [q for q in qset.queries if split is None or q.split == split]
    if not queries:
        have = sorted({q.split for q in qset.queries})
        raise QuerySetError(f"qrels set {qset.name!r} of corpus {corpus.name!r} has no {split!r} queries; "
                            f"it has splits: {', '.join(have) or 'none'}")
    if sample is not None and sample < len(queries):
        queries = random.Random(SAMPLE_SEED).sample(sorted(queries, key=lambda q: q.id), sample)
    wanted = {q.id: q.source for q in queries}
    view = views[view_name]
    texts: dict[str, str] = {}
    in_corpus = [i for i, source in wanted.items() if source == "corpus"]
    # only the queries' own records are read: a query set costs its size, not the corpus's
    sources = (("corpus", corpus.records_with_ids(in_corpus, view.columns) if in_corpus else ()),
               ("queries", corpus.queries() if len(in_corpus) < len(wanted) else ()))
    for source, records in sources:
        for r in records:
            if wanted.get(r.id) == source and (t := view.render(r)):
                texts[r.id] = t
    ids = tuple(sorted(wanted))
    return QuerySet(ids, texts, {q.id: q.exclude for q in queries})
