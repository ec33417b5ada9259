"""Runs: rankings per query, their TREC / ranx-JSON files and their place in the results store.

A ranking keeps the engine's scores but its order is ours: score descending, then document id, so
ties never depend on the engine or on ranx (which re-sorts ties by a hash of the id). When a run is
handed to ranx for scoring, its scores are replaced by rank-derived ones (`rank_scores`)
so ranx sees exactly that order; fusion uses the engine scores.

Stored as results of kind "run": run.trec (`qid Q0 doc rank score tag`), run.json (ranx's JSON
layout, {query: {doc: score}} in rank order) and a manifest (index manifest, method, pipeline body,
depth, query set, split, code version).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from operator import itemgetter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from evalctl import results_store
from evalctl.errors import BadInput
from evalctl.evaluators.scoring import ranx_engine
from evalctl.results_store import Result

if TYPE_CHECKING:
    from ranx import Run

Ranking = dict[str, list[tuple[str, float]]]  # query id -> [(doc id, score)], best first
# evalctl's one order inside a tie, in every run, export and referee (`ranked`); tie_aware.py scores without it
TIE_RULE = "score descending, then document id ascending"
KIND = "run"
PASSAGES = "passages.json"  # a passage run's best passage per hit (save_run)
# How scores count the queries that have no text in the run's query view (searched with no body, so no hit):
# "keep" scores them 0 inside the mean, "exclude" leaves them out of it (run_queries applies it).
EmptyQueries = Literal["keep", "exclude"]


class RunNotFound(BadInput, LookupError):
    pass


def ranked(pairs: Iterable[tuple[str, float]], depth: int | None = None) -> list[tuple[str, float]]:
    """Deterministic order: score descending, then doc id ascending; cut at `depth`."""
    out = [(d, float(s)) for d, s in pairs]
    out.sort(key=itemgetter(0))
    out.sort(key=itemgetter(1), reverse=True)  # stable: equal scores keep the id order
    return out if depth is None else out[:depth]


def to_trec(ranking: Ranking, tag: str) -> str:
    lines = [f"{q} Q0 {d} {i} {s:.6f} {tag}" for q, docs in ranking.items() for i, (d, s) in enumerate(docs, 1)]
    return "\n".join(lines) + ("\n" if lines else "")


def to_json(ranking: Ranking) -> str:
    """`json.dumps({q: dict(docs) ...}, indent=0)` byte for byte, built with the C encoder: with an indent,
    json falls back to its pure-Python encoder (0.2 s for 15,000 hits, a fifth of a retrieval); the
    separators put each entry on its own line as indent=0 does."""

    def block(d: dict) -> str:
        return "{\n" + json.dumps(d, separators=(",\n", ": "))[1:-1] + "\n}" if d else "{}"

    key = json.encoder.encode_basestring_ascii
    return block({}) if not ranking else "{\n" + ",\n".join(f"{key(q)}: {block(dict(docs))}"
                                                           for q, docs in ranking.items()) + "\n}"


def from_json(text: str) -> Ranking:
    return {q: ranked(docs.items()) for q, docs in json.loads(text).items()}


def rank_scores(ranking: Ranking) -> dict[str, dict[str, float]]:
    """{query: {doc: n, next doc: n - 1, ... last: 1}}: scores that pin our tie order for ranx."""
    return {q: {d: float(len(docs) - i) for i, (d, _) in enumerate(docs)} for q, docs in ranking.items()}


def as_ranx(ranking: Ranking, name: str, scores: Literal["rank", "engine"] = "rank") -> Run:
    """A ranx Run: "rank" scores (n, n-1, ... 1) pin our tie order; "engine" keeps the scores (fusion)."""
    data = rank_scores(ranking) if scores == "rank" else {q: dict(docs) for q, docs in ranking.items()}
    return ranx_engine.load().Run(data, name=name)


@dataclass(frozen=True)
class StoredRun:
    result: Result
    ranking: Ranking
    empty_queries: EmptyQueries = "keep"  # how its scores count queries without text (a report's declared policy)

    @property
    def id(self) -> str:
        return self.result.id

    @property
    def manifest(self) -> dict:
        return self.result.manifest

    @property
    def label(self) -> str:
        return run_label(self.manifest)

    @property
    def system_name(self) -> str:
        return system_name(self.manifest)

    def best_passages(self) -> dict[str, dict[str, list[int]]]:
        """A passage run's {query: {doc: [start, end]}}: where in the view's text each hit's best passage is ({}
        for a document run, or a run saved before they were kept)."""
        return self.result.read_json(PASSAGES) if self.result.file(PASSAGES).is_file() else {}


def view_pair(query_view: str | None, view: str, joiner: str = "→") -> str:
    """The views a run reads, as names show them: the document view alone when the queries use it too, else
    the query view, `joiner` and the document view ("T→TA" in labels, "T_TA" in a run's identity name)."""
    return view if query_view in (None, view) else f"{query_view}{joiner}{view}"


def system_name(manifest: dict) -> str:
    """A run's system, the name it has across views in a report's headline, charts and per-query pages:
    method (/client for client-side fusion; a passage method's setting, and chunked queries) and model, e.g.
    "dense:all-minilm-l6-v2", "dense-maxp@w64s48:all-minilm-l6-v2"."""
    client = "/client" if manifest.get("fusion_mode") == "client" else ""
    passages = f"@{manifest['passages']}" if manifest.get("passages") else ""
    chunked = "+chunked" if manifest.get("query_chunks") else ""
    return f"{manifest['method']}{client}{passages}{chunked}:{manifest.get('model') or 'bm25'}"


def run_label(manifest: dict) -> str:
    """Short name for tables: the system and its views, e.g. "dense:all-minilm-l6-v2:T→TA"."""
    return f"{system_name(manifest)}:{view_pair(manifest.get('query_view'), manifest['view'])}"


def save_run(corpus: str, identity: dict, ranking: Ranking, extra: dict | None = None,
             passages: dict[str, dict[str, list[int]]] | None = None) -> StoredRun:
    """`passages`: a passage run's {query: {doc: [start, end]}}, each hit's best passage in the view's text. The
    ranking is stored in TIE_RULE's order and its manifest says so."""
    ranking = {q: ranked(docs) for q, docs in ranking.items()}
    extra = {**(extra or {}), "tie_rule": TIE_RULE}
    files = {"run.trec": to_trec(ranking, identity["name"]), "run.json": to_json(ranking),
             **({PASSAGES: json.dumps(passages, sort_keys=True)} if passages else {})}
    return StoredRun(results_store.write(KIND, corpus, identity, files, extra=extra), ranking)


def find_run(corpus: str, identity: dict) -> StoredRun | None:
    """The stored run with exactly this identity (same index, method, query set, depth ...), if any."""
    res = results_store.find(KIND, corpus, identity)
    return _loaded(res) if res else None


def _loaded(res: Result) -> StoredRun:
    return StoredRun(res, from_json(res.read_text("run.json")))


def load_run(ref: str | Path) -> StoredRun:
    """A run by result folder path, result id, or a unique prefix of an id."""
    p = Path(ref)
    if (p / results_store.MANIFEST).is_file():
        return _loaded(results_store.load(p))
    matches = [r for r in results_store.iter_results(KIND) if r.id == str(ref)]
    matches = matches or [r for r in results_store.iter_results(KIND) if r.id.startswith(str(ref))]
    if len(matches) != 1:
        why = "no stored run" if not matches else f"{len(matches)} stored runs ({', '.join(r.id for r in matches[:5])})"
        raise RunNotFound(f"{ref!r} matches {why}; give a run folder or its full id (`evalctl retrieve` prints it)")
    return _loaded(matches[0])
