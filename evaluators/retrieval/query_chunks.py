"""Long query patents as passages (`evalctl retrieve --query-chunks`): a MaxP run's query text cut into windows of the
run's own passage setting (the model's tokens, after its query prompt), each chunk searched as a query of its own,
and the per-chunk hits fused by max: a patent's score is its best (query chunk, passage) pair, MaxP on both sides.
Under exact search (exact-maxp) the fusion loses nothing: the patent of the best pair overall is in the top k of
that pair's chunk. Without it (the default) the query is encoded whole and the model cuts it at its limit.
"""

from __future__ import annotations

from collections.abc import Sequence

from evalctl.evaluators.scoring.runs import Ranking, ranked
from evalctl.indexers.passages import PassageSpec, check_window, content_limit, passage_spans

FUSION = "max"  # how a query's per-chunk hits are fused (the run's identity says it)


def query_chunks(texts: dict[str, str], tokenizer, spec: PassageSpec, max_seq_length: int, prompt: str,
                 model_id: str) -> dict[str, list[str]]:
    """{query id: its chunks' texts} (one chunk, the text itself, for a text within one window)."""
    check_window(spec, content_limit(max_seq_length, tokenizer, prompt), model_id)
    return {q: [t[a:b] for a, b in passage_spans(t, tokenizer, spec)] or [t] for q, t in texts.items()}


def fuse_max(ids: Sequence[str], owners: Sequence[str], hits: Sequence[list[tuple[str, float]]],
             passages: Sequence[dict[str, list[int]]], k: int) -> tuple[Ranking, dict[str, dict[str, list[int]]]]:
    """(ranking, best passages) per query id: each patent at its best score over the query's bodies (`owners[i]`
    is body i's query), its best passage the one of that body. One body a query: its hits as they are."""
    best: dict[str, dict[str, tuple[float, list[int] | None]]] = {q: {} for q in ids}
    for q, found, spans in zip(owners, hits, passages):
        mine = best[q]
        for doc, score in found:
            if doc not in mine or score > mine[doc][0]:
                mine[doc] = (score, spans.get(doc))
    ranking = {q: ranked([(d, s) for d, (s, _) in best[q].items()], k) for q in ids}
    where = {q: {d: span for d, _ in ranking[q] if (span := best[q][d][1]) is not None} for q in ids}
    return ranking, {q: w for q, w in where.items() if w}
