"""Native retrieval: a query set from a qrels split, searched in the corpus x model index, stored as a run.

Methods: `bm25` (match on the view's text field), `dense` (approximate knn on the view's vector
field), `exact` (brute-force knn_score, to measure what ANN loses), `hybrid` / `rrf` (one hybrid
query through a neural-search pipeline, or client-side fusion of the BM25 and dense runs with
`fusion_mode="client"`, which works on any node). Queries go out in `_msearch` batches from a small
thread pool, with per-item retries on 429 / 5xx; every query of the set appears in the run, with an
empty ranking when it has no text or no hit.
"""

from __future__ import annotations

import dataclasses
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Literal

from tqdm import tqdm

from evalctl.errors import BadInput, Failure
from evalctl.corpus.store import Corpus, load_corpus
from evalctl.evaluators.fusion.client_fusion import fuse_rankings
from evalctl.evaluators.retrieval.methods import MAX_K, METHODS, BodyContext, RetrievalMethod
from evalctl.evaluators.retrieval.params import DEFAULT_BM25_MAX_TERMS, RetrievalOptions, RetrievalParams, Sending
from evalctl.evaluators.retrieval.query_bodies import truncate_terms
from evalctl.evaluators.retrieval.query_chunks import FUSION, fuse_max, query_chunks
from evalctl.evaluators.scoring.runs import StoredRun, find_run, save_run, view_pair
from evalctl.evaluators.fusion.search_pipelines import ensure_pipeline, require_neural_search
from evalctl.evaluators.fusion.settings import FusionSpec
from evalctl.indexers.byte_vectors import stored
from evalctl.indexers.encoder import LazyEncoder, get_or_encode
from evalctl.indexers.index_contract import IndexState, open_index
from evalctl.indexers.index_layout import load_index_settings, text_field, vector_field
from evalctl.indexers.index_loader import result_identity
from evalctl.indexers import view_tokens
from evalctl.indexers.passages import PassageError, PassageSpec, content_limit, passage_path, passage_unit
from evalctl.indexers.vectors_import import query_encoding
from evalctl.models import get_model, resolve_model_id
from evalctl.opensearch.cluster_info import require_available, simd_vectors
from evalctl.corpus.qrels import QrelsSet, load_qrels
from evalctl.corpus.query_set import SAMPLE_SEED, QuerySet, load_query_set
from evalctl.gc_tuning import long_lived_frozen


class RetrievalError(BadInput, ValueError):
    """Bad retrieval request (unknown index, view, split ...): one message naming what is wrong."""


@dataclass(frozen=True)
class RetrievalSpec:
    corpus: str
    view: str
    method: str  # a name in retrieval.methods.METHODS
    model: str | None = None  # None: the BM25-only index (bm25 method only)
    query_view: str | None = None  # defaults to `view`; e.g. TA queries against TAC documents
    qrels: str = "citations"
    split: str | None = "test"  # None: every query of the qrels set
    k: int = 100
    bm25_max_terms: int | None = DEFAULT_BM25_MAX_TERMS
    prompt_variant: str | None = None
    fusion: FusionSpec = field(default_factory=FusionSpec)
    fusion_mode: Literal["native", "client"] = "native"
    # Search only a seeded sample of this many of the split's queries (exact search at scale, for ANN fidelity)
    query_sample: int | None = None
    passages: str | None = None  # a passage method's setting, by name (passages.PassageSpec.name: w128s96)
    query_chunks: bool = False  # the query cut into passages of that setting, the chunks' hits fused (query_chunks)

    def __post_init__(self):
        if self.method not in METHODS:
            raise RetrievalError(f"unknown method {self.method!r}; one of {', '.join(METHODS)}")
        m = self.definition
        if m.vector and not self.model:
            raise RetrievalError(f"--method {self.method} needs --model (the index holding the vectors)")
        if not 1 <= self.k <= MAX_K:
            raise RetrievalError(f"--k {self.k}: must be between 1 and {MAX_K}")
        if self.query_sample is not None and self.query_sample < 1:
            raise RetrievalError(f"query sample {self.query_sample}: must be 1 or more queries")
        if m.fused and m.technique and self.fusion.technique != m.technique:
            raise RetrievalError(f"--method {self.method} with fusion technique {self.fusion.technique!r}")
        if m.passages and not self.passages:
            raise RetrievalError(f"--method {self.method} searches passages: give --passages WINDOW[:STRIDE], the "
                                 "setting the index was loaded with")
        if self.query_chunks and not m.query_chunks:
            raise RetrievalError(f"--query-chunks: --method {self.method} does not score by a best passage; one of "
                                 f"{', '.join(n for n, x in METHODS.items() if x.query_chunks)}")
        if self.passages and not m.passages:
            raise RetrievalError(f"--passages {self.passages}: --method {self.method} searches whole documents; a "
                                 f"passage method is one of {', '.join(n for n, x in METHODS.items() if x.passages)}")

    @property
    def definition(self) -> RetrievalMethod:
        return METHODS.get(self.method)

    @property
    def qview(self) -> str:
        return self.query_view or self.view

    def with_(self, **changes) -> "RetrievalSpec":
        return dataclasses.replace(self, **changes)


def retrieval_spec(p: RetrievalParams) -> RetrievalSpec:
    """The RetrievalSpec of `evalctl retrieve` and of a study's retrieval step, from the same inputs: one
    builder, so both give one run identity and the study finds a run made by hand. A model is named by its id
    (hf:ORG/NAME and a folder by their derived id). Split "all" is every query; a BM25 cut of 0 is no cut; the
    fusion technique is the method's own."""
    technique = METHODS.get(p.method).technique if p.method in METHODS else None
    try:
        fusion = FusionSpec(technique or "linear", p.normalization, p.combination, p.dense_weight, p.rank_constant)
    except ValueError as e:
        raise RetrievalError(str(e)) from None
    return RetrievalSpec(corpus=p.corpus, view=p.view, method=p.method,
                         model=resolve_model_id(p.model) if p.model else None, query_view=p.query_view,
                         qrels=p.qrels, split=None if p.split == "all" else p.split, k=p.k,
                         bm25_max_terms=p.bm25_max_terms or None, prompt_variant=p.prompt_variant, fusion=fusion,
                         fusion_mode=p.fusion_mode, query_sample=p.query_sample,
                         passages=_passage_name(p.passages), query_chunks=p.query_chunks)


def _passage_name(value: str | None) -> str | None:
    try:
        return PassageSpec.parse(value).name if value else None
    except PassageError as e:
        raise RetrievalError(str(e)) from None


# --------------------------------------------------------------------------- index


def resolve_index(client, corpus: Corpus, spec: RetrievalSpec) -> IndexState:
    """The index to search, with its manifest (the index contract: this corpus version, the view's fields; for a
    passage method, the view's passages of its setting)."""
    state = open_index(client, corpus, spec.model, [spec.view], error=RetrievalError)
    if spec.passages and spec.passages not in state.manifest.get("passages", {}).get(spec.view, ()):
        have = ", ".join(state.manifest.get("passages", {}).get(spec.view, ())) or "none"
        p = PassageSpec.parse(spec.passages)
        raise RetrievalError(f"index {state.name} has no passages {p.name} of view {spec.view} (it has: {have}); "
                             f"load them with evalctl index --views {spec.view} --passages {p.window}:{p.stride}")
    return state


# --------------------------------------------------------------------------- batched search


class SearchFailed(Failure, RuntimeError):
    pass


@dataclass
class SearchStats:
    took_ms: int = 0  # engine time: the sum of each _msearch call's `took`
    took_ms_items: int = 0  # the sum of the per-query `took` (queries of a batch run in parallel)
    seconds: float = 0.0  # client wall time for all batches
    retried: int = 0


_RETRYABLE = {429, 500, 502, 503, 504}


# The response fields a run needs: the rest of each hit (index name, shard metadata) is not sent back.
_FILTER_PATH = ",".join(("took", "responses.took", "responses.status", "responses.error", "responses.hits.hits._id",
                          "responses.hits.hits._score", "responses.hits.hits.inner_hits.*.hits.hits.fields"))


def _best_passage(hit: dict) -> list[int] | None:
    """[start, end] of a hit's best passage, where its body asked (query_bodies.best_passage)."""
    for inner in hit.get("inner_hits", {}).values():
        for h in inner["hits"]["hits"]:
            fields = h.get("fields", {})
            start = next((v[0] for k, v in fields.items() if k.endswith(".start")), None)
            end = next((v[0] for k, v in fields.items() if k.endswith(".end")), None)
            if start is not None and end is not None:
                return [start, end]
    return None


def search_all(client, index: str, bodies: list[dict | None], sending: Sending = Sending(), *, desc: str = "search",
               search_type: str | None = None
               ) -> tuple[list[list[tuple[str, float]]], SearchStats, list[dict[str, list[int]]]]:
    """Hits [(id, score)] per body (None: no query, no hits), searched via `_msearch` batches (each search
    with `search_type` when given), and per body {id: [start, end]} of each hit's best passage, where the body
    asked for it (a passage method's)."""
    batch_size, concurrency, max_retries = sending.batch_size, sending.concurrency, sending.max_retries
    stats = SearchStats()
    results: list[list[tuple[str, float]]] = [[] for _ in bodies]
    passages: list[dict[str, list[int]]] = [{} for _ in bodies]
    todo = [i for i, b in enumerate(bodies) if b is not None]
    batches = [todo[s:s + batch_size] for s in range(0, len(todo), batch_size)]
    dumps = client.transport.serializer.dumps
    # a shard copy lost mid-search must fail its query (retried below), never return the other shards' hits alone
    header = dumps({"index": index, "allow_partial_search_results": False,
                    **({"search_type": search_type} if search_type else {})})

    def run_batch(batch: list[int]) -> None:
        # each query is serialised once, into the ndjson lines a retry sends again
        lines = {i: f"{header}\n{dumps(bodies[i])}\n" for i in batch}
        pending = batch
        for attempt in range(max_retries + 1):
            resp = client.msearch(body="".join(lines[i] for i in pending), params={"filter_path": _FILTER_PATH})
            stats.took_ms += resp.get("took", 0)
            failed = []
            for i, item in zip(pending, resp["responses"]):
                if "error" in item:
                    if item.get("status") not in _RETRYABLE or attempt == max_retries:
                        raise SearchFailed(f"query #{i} failed on {index}: {json.dumps(item['error'])[:500]}")
                    failed.append(i)
                    continue
                stats.took_ms_items += item.get("took", 0)
                found = item.get("hits", {}).get("hits", ())
                results[i] = [(h["_id"], h["_score"]) for h in found]
                passages[i] = {h["_id"]: span for h in found if (span := _best_passage(h))}
            if not failed:
                return
            stats.retried += len(failed)
            pending = failed
            time.sleep(min(30.0, 0.5 * 2 ** attempt))

    t0 = time.perf_counter()
    with tqdm(total=len(todo), unit="q", desc=desc, disable=not sending.progress) as bar:
        if concurrency <= 1:  # no thread pool between the caller and the one request in flight
            for batch in batches:
                run_batch(batch)
                bar.update(len(batch))
        else:
            with ThreadPoolExecutor(max_workers=concurrency) as pool:
                for batch, _ in zip(batches, pool.map(run_batch, batches)):
                    bar.update(len(batch))
    stats.seconds = time.perf_counter() - t0
    return results, stats, passages


# --------------------------------------------------------------------------- retrieval


def _identity_name(spec: RetrievalSpec, client: bool = False) -> str:
    """A run identity's readable name, e.g. "dense-all-minilm-l6-v2-T_TA-test" ("hybrid-client-..." for
    client-side fusion)."""
    model = f"client-{spec.model}" if client else spec.model or "bm25"
    passages = f"-{spec.passages}" + ("-chunked" if spec.query_chunks else "") if spec.passages else ""
    return f"{spec.method}-{model}-{view_pair(spec.qview, spec.view, '_')}{passages}-{spec.split or 'all'}"


def search_type(spec: RetrievalSpec, manifest: dict) -> str | None:
    """dfs_query_then_fetch for a method scored with corpus-wide statistics on a sharded index, else None."""
    return load_index_settings().search_type(manifest["shards"]) if spec.definition.global_stats else None


def run_identity(spec: RetrievalSpec, corpus: Corpus, qset: QrelsSet, queries: QuerySet, state: IndexState,
                 prompt: str | None) -> dict:
    """`state`: the searched index (resolve_index); `prompt`: the model's query prompt (None without a model)."""
    index, manifest = state.name, state.manifest
    identity = {
        "name": _identity_name(spec),
        "corpus_hash": corpus.content_hash, "index": index,
        "index_identity": result_identity(manifest, ("views",)),
        "method": spec.method, "model": spec.model, "view": spec.view, "query_view": spec.qview,
        "qrels": qset.name, "qrels_spec": qset.manifest.get("spec"), "split": spec.split, "k": spec.k,
        "query_set": queries.digest(), "exclusion": "query and its family (qrels exclude), must_not ids",
    }
    if spec.query_sample is not None:
        identity["query_sample"] = {"n": spec.query_sample, "seed": SAMPLE_SEED}
    m = spec.definition
    if m.text:
        identity["bm25_max_terms"] = spec.bm25_max_terms
    if m.global_stats:  # on one shard both search types score alike
        identity["search_type"] = search_type(spec, manifest) or "query_then_fetch"
    if m.vector:
        identity.update(query_prompt=prompt, prompt_variant=spec.prompt_variant)
    if m.passages:
        identity["passages"] = spec.passages
    if spec.query_chunks:
        identity["query_chunks"] = FUSION
    if m.fused:
        identity.update(fusion_mode=spec.fusion_mode, fusion=dataclasses.asdict(spec.fusion),
                        pipeline=m.pipeline(spec.fusion) if m.pipeline and spec.fusion_mode == "native" else None)
    return identity


@dataclass(frozen=True)
class Identified:
    """What a native run is made from, and its identity."""

    queries: QuerySet
    model: object  # ModelSpec | None
    index: str
    manifest: dict
    identity: dict


def identify(client, spec: RetrievalSpec, corpus: Corpus) -> Identified:
    qset = load_qrels(corpus, spec.qrels)
    queries = load_query_set(corpus, qset, spec.split, spec.qview, spec.query_sample)
    model = get_model(spec.model) if spec.model else None
    prompt = model.prompt_for("query", task_type="retrieval", variant=spec.prompt_variant) if model else None
    state = resolve_index(client, corpus, spec)
    return Identified(queries, model, state.name, state.manifest,
                      run_identity(spec, corpus, qset, queries, state, prompt))


def find_stored(client, spec: RetrievalSpec) -> StoredRun | None:
    """The stored run `retrieve(client, spec)` would return without searching, if there is one (made by
    `evalctl retrieve`, a study step or any other caller: they share the identity)."""
    corpus = load_corpus(spec.corpus)
    if spec.definition.fused and spec.fusion_mode == "client":
        parts = [find_stored(client, part) for part in _client_parts(spec)]
        return None if None in parts else find_run(corpus.name, _client_identity(spec, corpus, parts))
    return find_run(corpus.name, identify(client, spec, corpus).identity)


@long_lived_frozen()  # full collections skip the long-lived heap (evalctl.gc_tuning)
def retrieve(client, spec: RetrievalSpec, options: RetrievalOptions | None = None) -> StoredRun:
    """Run `spec` (or find it already stored) and return the stored run."""
    opts = options or RetrievalOptions()
    corpus = load_corpus(spec.corpus)
    if spec.definition.fused and spec.fusion_mode == "client":
        return _client_fused(client, spec, opts, corpus)
    it = identify(client, spec, corpus)
    if opts.reuse and (done := find_run(corpus.name, it.identity)):
        return done
    require_available(client, it.index)
    if spec.definition.pipeline:
        require_neural_search(client, f"--method {spec.method}")
    if spec.query_chunks:
        bodies, owners, counts = chunk_bodies(client, spec, it.queries, it.manifest, it.model, opts)
    else:
        (bodies, counts), owners = search_bodies(client, spec, it.queries, it.manifest, it.model, opts), it.queries.ids
    hits, stats, passages = search_all(client, it.index, bodies, opts.sending(), desc=f"{spec.method} {it.index}",
                                       search_type=search_type(spec, it.manifest))
    ranking, best = fuse_max(it.queries.ids, owners, hits, passages, spec.k)
    extra = {"index_manifest": it.manifest, "n_queries": len(it.queries.ids), **counts,
             "n_empty": sum(not docs for docs in ranking.values()), "took_ms": stats.took_ms,
             "took_ms_items": stats.took_ms_items, "search_seconds": round(stats.seconds, 3),
             "retried": stats.retried, "batch_size": opts.batch_size, "concurrency": opts.concurrency,
             # scores from Lucene's SIMD code can differ in the last bits from run to run (opensearch.yaml)
             **({"search_simd_vectors": simd_vectors(client)} if it.model else {}), **opts.extra}
    return save_run(corpus.name, it.identity, ranking, extra, best)


def query_bodies(client, spec: RetrievalSpec) -> tuple[str, dict[str, dict | None]]:
    """The index `retrieve(client, spec)` searches and each query's body as it sends it (vectors from the cache),
    for another tool to send again (a referee); a method that is not one body per query is refused."""
    if spec.query_chunks or (spec.definition.fused and spec.fusion_mode == "client") or spec.definition.pipeline:
        raise RetrievalError(f"--method {spec.method}: not one search body per query (a search pipeline, client "
                             "fusion or query chunks)")
    it = identify(client, spec, load_corpus(spec.corpus))
    bodies, _ = search_bodies(client, spec, it.queries, it.manifest, it.model, RetrievalOptions(progress=False))
    return it.index, dict(zip(it.queries.ids, bodies))


def search_bodies(client, spec: RetrievalSpec, queries: QuerySet, manifest: dict, model, opts: RetrievalOptions
            ) -> tuple[list[dict | None], dict]:
    """One body per query id (None for queries without text), and counts for the manifest."""
    m = spec.definition
    ids = [q for q in queries.ids if q in queries.texts]
    counts = {"n_no_text": len(queries.ids) - len(ids)}
    texts: dict[str, str] = {}
    if m.text:
        cut = {q: truncate_terms(queries.texts[q], spec.bm25_max_terms) for q in ids}
        texts = {q: t for q, (t, _) in cut.items()}
        counts["n_truncated_terms"] = sum(c for _, c in cut.values())
    vectors: dict = {}
    if m.vector:
        arr = get_or_encode(model, "query", spec.qview, ids, [queries.texts[q] for q in ids],
                            variant=spec.prompt_variant, task_type="retrieval", progress=opts.progress,
                            **query_encoding(manifest))
        vectors = dict(zip(ids, stored(arr, manifest)))  # a byte index's rule applies to its queries too
    ctx = body_context(client, spec, manifest, opts)
    by_id = {q: m.body(ctx, texts.get(q), vectors.get(q), queries.exclude[q]) for q in ids}
    return [by_id.get(q) for q in queries.ids], counts


def body_context(client, spec: RetrievalSpec, manifest: dict, opts: RetrievalOptions) -> BodyContext:
    pipeline = None
    if spec.definition.pipeline:
        body = spec.definition.pipeline(spec.fusion)
        pipeline = body if opts.inline_pipeline else ensure_pipeline(client, body)[0]
    return BodyContext(text_field(spec.view), vector_field(spec.view), spec.k, manifest, pipeline,
                       passage_path(spec.view, PassageSpec.parse(spec.passages)) if spec.passages else None)


def chunk_bodies(client, spec: RetrievalSpec, queries: QuerySet, manifest: dict, model, opts: RetrievalOptions
                 ) -> tuple[list[dict], list[str], dict]:
    """A body per chunk of each query with text (query_chunks), the query each belongs to, and counts: with the
    queries' token lengths against what the model takes (`query_tokens`: the queries chunking keeps whole)."""
    ids = [q for q in queries.ids if q in queries.texts]
    encoder = LazyEncoder(model)
    prompt = model.prompt_for("query", task_type="retrieval", variant=spec.prompt_variant) or ""
    texts, tokenizer = {q: queries.texts[q] for q in ids}, encoder.tokenizer()
    chunks = query_chunks(texts, tokenizer, PassageSpec.parse(spec.passages), model.max_seq_length, prompt, model.id)
    tokens = view_tokens.measure(texts.values(), tokenizer, content_limit(model.max_seq_length, tokenizer, prompt))
    keys = [(q, n) for q in ids for n in range(len(chunks[q]))]
    arr = get_or_encode(model, "query", passage_unit(spec.qview, PassageSpec.parse(spec.passages)),
                        [f"{q}#{n}" for q, n in keys], [chunks[q][n] for q, n in keys], variant=spec.prompt_variant,
                        task_type="retrieval", encoder=encoder, progress=opts.progress)
    encoder.close()
    ctx = body_context(client, spec, manifest, opts)
    bodies = [spec.definition.body(ctx, None, v, queries.exclude[q]) for (q, _), v in zip(keys, stored(arr, manifest))]
    counts = {"n_no_text": len(queries.ids) - len(ids), "n_query_chunks": len(keys),
              "n_chunked_queries": sum(len(c) > 1 for c in chunks.values()), "query_tokens": dataclasses.asdict(tokens)}
    return bodies, [q for q, _ in keys], counts


def _client_parts(spec: RetrievalSpec) -> list[RetrievalSpec]:
    """The runs (same index, same depth) that client-side fusion fuses: the method's `client` parts, a passage part
    with the fused method's passage setting."""
    return [spec.with_(method=m, fusion=FusionSpec(), fusion_mode="native",
                       passages=spec.passages if METHODS.get(m).passages else None) for m in spec.definition.client]


def _client_identity(spec: RetrievalSpec, corpus: Corpus, parts: list[StoredRun]) -> dict:
    identity = {
        "name": _identity_name(spec, client=True),
        "corpus_hash": corpus.content_hash, "method": spec.method, "model": spec.model, "view": spec.view,
        "query_view": spec.qview, "qrels": spec.qrels, "split": spec.split, "k": spec.k,
        "fusion_mode": "client", "fusion": dataclasses.asdict(spec.fusion),
        "components": [p.id for p in parts], "query_set": parts[0].manifest["query_set"],
        "index": parts[1].manifest["index"], "qrels_spec": parts[0].manifest.get("qrels_spec"),
    }
    if spec.passages:
        identity["passages"] = spec.passages
    if "query_sample" in parts[0].manifest:  # which queries the parts searched, as a native run says
        identity["query_sample"] = parts[0].manifest["query_sample"]
    return identity


def _client_fused(client, spec: RetrievalSpec, opts: RetrievalOptions, corpus: Corpus) -> StoredRun:
    """BM25 and dense runs at the same depth on the same index, fused with ranx."""
    if not spec.definition.client:
        raise RetrievalError(f"--method {spec.method} has no client-side fusion; use --fusion native")
    parts = [retrieve(client, part, dataclasses.replace(opts, extra={}, reuse=True)) for part in _client_parts(spec)]
    identity = _client_identity(spec, corpus, parts)
    if opts.reuse and (done := find_run(corpus.name, identity)):
        return done
    ranking = fuse_rankings([p.ranking for p in parts], spec.fusion, spec.k)
    extra = {"n_queries": len(ranking), "n_empty": sum(not d for d in ranking.values()),
             "index_manifest": parts[1].manifest.get("index_manifest"),
             # the vector part's index, where the report finds what the model truncates of the view
             "index_identity": parts[1].manifest.get("index_identity"), **opts.extra}
    found = {q: hits for p in parts for q, hits in p.best_passages().items()}  # the passage part's, where one is
    best = {q: {d: found[q][d] for d, _ in docs if d in found.get(q, {})} for q, docs in ranking.items()}
    return save_run(corpus.name, identity, ranking, extra, {q: b for q, b in best.items() if b})
