"""What a stored run is scored against: the qrels set it was made with and the queries it searched, both
checked to be what the run recorded.

A run records its corpus version, its qrels set's spec and the digest of its query set (ids, texts and
exclusions; a seeded sample when it searched one). Scoring rebuilds that query set from the qrels set the
store holds now. A corpus replaced, a qrels set rebuilt another way (`corpus qrels --overwrite` with another
seed or split) or a query set that no longer matches is refused, naming the run, what it recorded and what the
store holds: an old run is never silently scored with other judgments. A run is scored over exactly the
queries it searched, so a sample's unsearched queries never count as zeros.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

from evalctl.corpus.qrels import QrelsSet, load_qrels
from evalctl.corpus.query_set import QuerySetError, load_query_set
from evalctl.corpus.store import load_corpus
from evalctl.errors import BadInput
from evalctl.evaluators.scoring.runs import StoredRun


class CorpusChanged(BadInput, ValueError):
    """A run's corpus was replaced (`corpus import --overwrite`) after, or while, the run was made."""


class QrelsChanged(BadInput, ValueError):
    """A run's qrels set was rebuilt differently, or no longer gives the queries the run searched."""


@dataclass(frozen=True)
class RunQueries:
    qset: QrelsSet
    searched: frozenset[str]  # the query ids the run is scored on: those it searched (with text, if the run says)
    no_text: frozenset[str] = frozenset()  # the query ids of its query set without text in the query view

    def judged(self, split: str | None, domain: str | None = None, within=None) -> dict[str, dict[str, int]]:
        """The qrels of the searched queries (of `within` too, when given) that have a positive under `domain`."""
        keep = self.searched if within is None else self.searched & set(within)
        return {q: rel for q, rel in self.qset.qrels(split=split, domain=domain).items() if q in keep}


def run_queries(run: StoredRun) -> RunQueries:
    """The run's qrels set and searched queries (those with text in the query view only, when the run's
    `empty_queries` is "exclude"), refused (CorpusChanged, QrelsChanged) unless they are what it recorded."""
    m = run.manifest
    corpus = load_corpus(m["corpus"])
    if corpus.content_hash != m["corpus_hash"]:
        raise CorpusChanged(
            f"run {run.id} was made on version {m['corpus_hash']} of corpus {m['corpus']!r}, which has since been "
            f"replaced by {corpus.content_hash} (`evalctl corpus import --overwrite`, perhaps while the run was "
            "made): the run's qrels no longer apply. The run is kept; build the new version's qrels and run the "
            "retrieval again on it")
    qset = load_qrels(corpus, m["qrels"])
    again = (f"The run is kept; rebuild qrels set {m['qrels']!r} as it recorded, or run the retrieval again on "
             "the new set")
    recorded, now = m.get("qrels_spec"), qset.manifest.get("spec")
    if recorded is not None and recorded != now:
        changed = ", ".join(f"{k} {recorded.get(k)!r} -> {(now or {}).get(k)!r}"
                            for k in sorted(set(recorded) | set(now or {})) if recorded.get(k) != (now or {}).get(k))
        raise QrelsChanged(f"run {run.id} was made with qrels set {m['qrels']!r} of corpus {m['corpus']!r} as built "
                           f"then; the store now holds it built another way ({changed}). {again}")
    sample = (m.get("query_sample") or {}).get("n")
    split, view = m["split"], m.get("query_view") or m["view"]
    what = f"{split or 'all'} queries" + (f" (a sample of {sample})" if sample else "")
    try:
        stored = _StoredQrels(m["corpus"], corpus.content_hash, m["qrels"], json.dumps(qset.manifest, sort_keys=True))
        digest, ids, with_text = _query_set(stored, split, view, sample)
    except QuerySetError as e:
        raise QrelsChanged(f"run {run.id} searched {m.get('n_queries', len(run.ranking))} {what}, query set "
                           f"{m['query_set']}; they cannot be rebuilt now: {e}. {again}") from None
    if digest != m["query_set"]:
        raise QrelsChanged(f"run {run.id} searched {m.get('n_queries', len(run.ranking))} {what} of qrels set "
                           f"{m['qrels']!r} in view {view}, query set {m['query_set']}; the store now gives "
                           f"{len(ids)} such queries, query set {digest}. {again}")
    return RunQueries(qset, frozenset(with_text if run.empty_queries == "exclude" else ids),
                      frozenset(ids) - frozenset(with_text))


@dataclass(frozen=True)
class _StoredQrels:
    """A qrels set as the store holds it now: with its corpus version and manifest, so a cache key built from it
    changes when either is rebuilt (hashable, for _query_set's cache)."""

    corpus: str
    content_hash: str
    qrels: str
    manifest: str  # the set's manifest, as JSON with sorted keys


@functools.lru_cache(maxsize=64)  # a report scores each run several times; the key holds all the set depends on
def _query_set(stored: _StoredQrels, split: str | None, view: str,
               sample: int | None) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """(digest, query ids, the ids of those with text in the view)."""
    c = load_corpus(stored.corpus)
    queries = load_query_set(c, load_qrels(c, stored.qrels), split, view, sample)
    return queries.digest(), queries.ids, tuple(q for q in queries.ids if q in queries.texts)
