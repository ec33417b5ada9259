"""What a retrieval is asked with: the parameters of `evalctl retrieve` (its options are generated from these
fields), of `evalctl fusion-sweep` and of a study's retrieval entry (checked against them), and how queries
are sent. retrieve.retrieval_spec turns RetrievalParams into the RetrievalSpec a run's identity is made of."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from evalctl.evaluators.fusion.settings import Combination, FusionSpec, Normalization
from evalctl.evaluators.retrieval.methods import METHODS
from evalctl.parameters import param

# Lucene caps a boolean query at 1024 clauses (indices.query.bool.max_clause_count): a long claims
# text as one `match` would fail, so query texts are cut to this many whitespace terms by default.
DEFAULT_BM25_MAX_TERMS = 1000
_FUSION = FusionSpec()  # the fusion parameters' defaults


@dataclass(frozen=True)
class RetrievalParams:
    corpus: str
    view: str = param(help="Document view (text_<V> / vec_<V> fields), e.g. TAC.")
    method: str = param(choices=METHODS, help="Retrieval method (registered in evaluators/retrieval/methods.py).")
    model: str | None = param(None, help="Model: an id from `evalctl models list`, hf:ORG/NAME[@REVISION] or a "
                              "model folder; omit for BM25 on the text-only index.")
    query_view: str | None = param(None, help="View of the query patent's text (default: --view).")
    qrels: str = param("citations", help="Qrels set of the corpus.")
    split: str = param("test", help="Query split: train, dev, test or all.")
    k: int = param(100, help="Depth: hits per query (size and knn k).")
    bm25_max_terms: int = param(DEFAULT_BM25_MAX_TERMS, min=0, help="BM25 query texts are cut to this many terms "
                                "(Lucene's 1024-clause limit); 0: no cut.")
    prompt_variant: str | None = param(None, help="Model prompt variant for the query encoding.")
    fusion_mode: Literal["native", "client"] = param(
        "native", flag="--fusion",
        help="hybrid/rrf: neural-search pipeline, or ranx fusion of the BM25 and dense runs (any node).")
    normalization: Normalization = param(_FUSION.normalization)
    combination: Combination = param(_FUSION.combination)
    dense_weight: float = param(_FUSION.dense_weight, help="Weight of the dense sub-query; BM25 gets 1 - this.")
    rank_constant: int = param(_FUSION.rank_constant, help="RRF k.")
    query_sample: int | None = param(None, min=1, help="Search a seeded sample of N of the split's queries (part of "
                                     "the run's identity), e.g. exact at scale.")
    passages: str | None = param(None, help="A passage method's passage setting, WINDOW[:STRIDE] in the model's "
                                 "tokens, as the index was loaded with (evalctl index --passages).")
    query_chunks: bool = param(False, help="dense-maxp / exact-maxp: cut the query patent into passages of the same "
                               "setting, search each and keep each patent's best score over them (max); default: the "
                               "query is encoded whole, cut at the model's limit.")


# requests in flight at most: each is a thread and a pooled connection, made before anything is sent
MAX_IN_FLIGHT = 256


@dataclass(frozen=True)
class Sending:
    """How retrieve.search_all sends a list of bodies (what of RetrievalOptions the sender itself reads)."""

    batch_size: int = 32  # queries per _msearch
    concurrency: int = 2  # _msearch calls in flight
    max_retries: int = 4  # per query, on 429 / 5xx
    progress: bool = False


@dataclass
class RetrievalOptions:
    """How queries are sent; not part of a run's identity."""

    batch_size: int = param(32, min=1, help="Queries per _msearch.")
    concurrency: int = param(2, min=1, max=MAX_IN_FLIGHT, help="_msearch calls in flight.")
    progress: bool = True
    inline_pipeline: bool = False  # hybrid: put the pipeline body in each request instead of a stored one
    reuse: bool = True  # return a stored run with the same identity instead of searching again
    extra: dict = field(default_factory=dict)  # added to the run manifest (e.g. how fusion weights were tuned)

    def sending(self) -> Sending:
        return Sending(batch_size=self.batch_size, concurrency=self.concurrency, progress=self.progress)
