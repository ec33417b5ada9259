"""`evalctl encode`: render one view of a stored corpus and encode it (or this machine's shard of it)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from evalctl.corpus.store import load_corpus
from evalctl.corpus.views import load_views
from evalctl.indexers.encode_options import EncodeOptions
from evalctl.indexers.encoder import EncodeReport, encode_texts, in_shard
from evalctl.models import Role, get_model


@dataclass(frozen=True)
class CorpusEncodeReport:
    corpus: str
    corpus_hash: str
    view: str
    shard: tuple[int, int]
    n_records: int  # records of this shard
    n_without_text: int  # records the view renders to nothing (e.g. no claims); not encoded
    report: EncodeReport


def view_texts(store, view_spec, role: Role = "document", shard: tuple[int, int] = (0, 1)
               ) -> tuple[list[str], list[str], int]:
    """(ids, texts, n_records) of the records in this shard that have text for the view; role `query` takes the
    corpus's own query records when it ships them (BEIR, DAPFAM), else its records (citation corpora query with
    their patents)."""
    records = store.records()
    if role == "query":
        queries = store.queries()
        first = next(queries, None)
        if first is not None:
            records = itertools.chain([first], queries)
    ids: list[str] = []
    texts: list[str] = []
    n_records = 0
    for record in records:
        if not in_shard(record.id, shard):
            continue
        n_records += 1
        text = view_spec.render(record)
        if text is not None and text.strip():
            ids.append(record.id)
            texts.append(text)
    return ids, texts, n_records


def encode_corpus(corpus: str, model_id: str, view: str, options: EncodeOptions = EncodeOptions(), *,
                  role: Role = "document", shard: tuple[int, int] = (0, 1)) -> CorpusEncodeReport:
    """Encode `view` of every record in this shard (the records of view_texts)."""
    spec = get_model(model_id)
    views = load_views()
    if view not in views:
        raise KeyError(f"unknown view {view!r}; known views: {', '.join(sorted(views))}")
    view_spec = views[view]
    store = load_corpus(corpus)
    ids, texts, n_records = view_texts(store, view_spec, role, shard)
    n_without_text = n_records - len(ids)
    report = encode_texts(spec, role, view, ids, texts, options)
    return CorpusEncodeReport(
        corpus=store.name, corpus_hash=store.manifest["content_hash"], view=view, shard=shard,
        n_records=n_records, n_without_text=n_without_text, report=report,
    )
