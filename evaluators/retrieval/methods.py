"""The retrieval-method registry: what `--method`, spec validation, the study runner and the report know.

A method says which query inputs it sends (text, vector), how one query's body is built, whether it fuses
sub-queries (then its fusion settings and pipeline join the run identity) and with which pipeline. The
built-ins are in builtin_methods.py; a new method is one module defining a `RetrievalMethod` and one
line in METHODS below (docs/extending.md). This module imports nothing heavy: the CLI reads its names.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from evalctl.registry import Registry

if TYPE_CHECKING:
    from evalctl.evaluators.fusion.settings import FusionSpec

MAX_K = 10_000  # a run's depth limit: knn k and index.max_result_window


@dataclass(frozen=True)
class BodyContext:
    """What every query body of one run shares."""

    text_field: str  # text_<view>
    vector_field: str  # vec_<view>
    k: int  # depth: size and knn k
    manifest: dict  # the index manifest (e.g. its similarity, for exact scoring)
    pipeline: str | dict | None = None  # a method with a pipeline: the stored pipeline's name or an inline body
    passage_path: str | None = None  # a passage method: the nested field of its passage setting (psg_<view>_<setting>)


# (context, query text or None, query vector or None, ids to exclude) -> one _msearch body
BodyBuilder = Callable[[BodyContext, str | None, Sequence[float] | None, Collection[str]], dict]


@dataclass(frozen=True)
class RetrievalMethod:
    name: str  # also the run's label: <name>[/client]:<model>:<view>
    body: BodyBuilder
    text: bool = False  # sends the query text (cut to bm25_max_terms, which joins the run identity)
    vector: bool = False  # sends the query vector: needs a model; the query prompt joins the run identity
    fused: bool = False  # fuses sub-queries: fusion mode, settings and pipeline join the run identity
    technique: str | None = None  # the FusionSpec technique a fused method requires (None: any)
    pipeline: Callable[[FusionSpec], dict] | None = None  # neural-search pipeline body (needs the plugin)
    # `--fusion client`: ranx fusion of these methods' stored runs (same index, view and depth) stands in for it
    client: tuple[str, ...] = ()
    tunable: bool = False  # its dense weight can be tuned on dev queries (a spec's dense_weights)
    # its scores use corpus-wide term statistics: on an index of more than one shard it is sent with
    # search_type=dfs_query_then_fetch (configs/index.yaml dfs), so they do not depend on the shard count
    global_stats: bool = False
    # searches a view's passages (a nested field; a passage setting joins the identity): the document-level method
    # whose passage version it is ("dense" for dense-maxp), what the report's document-vs-passage section sets it beside
    passages_of: str | None = None
    # its score is a max (MaxP): a query cut into chunks is searched chunk by chunk and fused by max (query_chunks)
    query_chunks: bool = False
    # How a report names and explains it to a reader (its legend): "Exact kNN", "brute-force ..."; name if empty
    title: str = ""
    about: str = ""

    @property
    def display(self) -> str:
        return self.title or self.name

    @property
    def passages(self) -> bool:
        return self.passages_of is not None


_BUILTIN = "evalctl.evaluators.retrieval.builtin_methods"
EXACT = "exact"  # the built-in brute-force method: every other vector method searches the HNSW graph
METHODS: Registry[RetrievalMethod] = Registry("retrieval method", {
    "bm25": f"{_BUILTIN}:BM25",
    "dense": f"{_BUILTIN}:DENSE",
    "hybrid": f"{_BUILTIN}:HYBRID",
    "rrf": f"{_BUILTIN}:RRF",
    EXACT: f"{_BUILTIN}:EXACT",
    "dense-maxp": f"{_BUILTIN}:DENSE_MAXP",
    "exact-maxp": f"{_BUILTIN}:EXACT_MAXP",
    "dense-sump": f"{_BUILTIN}:DENSE_SUMP",
    "dense-avgp": f"{_BUILTIN}:DENSE_AVGP",
    "bm25-maxp": f"{_BUILTIN}:BM25_MAXP",
    "hybrid-maxp": f"{_BUILTIN}:HYBRID_MAXP",
    "rrf-maxp": f"{_BUILTIN}:RRF_MAXP",
})


def fused_methods() -> list[str]:
    return [name for name, m in METHODS.items() if m.fused]
