"""Experiment specs (configs/experiments/*.yaml): a whole study as data.

A spec names corpora (with their sources, qrels and label sets), models (with prompt variants),
retrieval runs, classification and clustering label sets, fine-tuning recipes and, like IR
reproduction files, expected scores with tolerances. This module holds the spec's types (what the task
modules import); spec_loading.py reads a spec file into them and validates it against the task registry.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Literal

from evalctl.corpus.qrels import QrelsSpec
from evalctl.indexers.runtime import Runtime
from evalctl.names import BadName, check_name
from evalctl.config_files import SpecError, package_folder


@dataclass(frozen=True)
class CorpusEntry:
    name: str
    format: str  # a name in import_formats.IMPORT_FORMATS
    sources: tuple[str, ...]
    qrels: QrelsSpec | None = None
    labels: tuple[str, ...] = ()  # free landscape labels given to every record at import
    documents: Literal["publication", "family"] = "publication"  # family: one record per family


@dataclass(frozen=True)
class ModelEntry:
    id: str
    prompt_variant: str | None = None


ALL_SPLITS = "all"  # `split: all` asks every query of the qrels set, as `evalctl retrieve --split all`


@dataclass(frozen=True)
class RetrievalEntry:
    corpus: str
    views: tuple[str, ...] = ("TAC",)
    query_view: str | None = None  # the queries' text; default: each corpus view (DAPFAM's query x corpus views)
    models: tuple[str, ...] = ()  # default: every model of the spec; models tuned from these join them
    methods: tuple[str, ...] = ("bm25", "dense")  # names in evaluators/retrieval/methods.py METHODS
    qrels: str = "citations"
    split: str = "test"
    k: int = 100
    # hybrid/rrf: native search pipelines (neural-search; a node without the plugin fails the step),
    # client-side ranx fusion, or "auto": native, falling back to client fusion on a node without the
    # plugin (the run's label then says hybrid/client).
    fusion_mode: Literal["auto", "native", "client"] = "native"
    dense_weight: float = 0.5
    # hybrid: tune the dense weight on the dev queries over these values (as `evalctl fusion-sweep`) and
    # report the chosen one on `split`; () = use dense_weight
    dense_weights: tuple[float, ...] = ()
    include_tuned: bool = True  # False: models fine-tuned by this spec do not join this entry
    # `exact` searches a seeded sample of this many of the split's queries (brute force costs corpus x queries;
    # an ANN-fidelity check at scale needs only a sample); None: every query
    exact_queries: int | None = None
    # every method searches a seeded sample of this many of the split's queries (`evalctl retrieve
    # --query-sample`: per-query costs at scale); `exact_queries`, when given, still decides exact's
    query_sample: int | None = None

    @property
    def query_split(self) -> str | None:
        """The split as RetrievalSpec takes it (None: every query)."""
        return None if self.split == ALL_SPLITS else self.split


@dataclass(frozen=True)
class IndexEntry:
    """An index to build even when no task of the spec reads it (e.g. for ad-hoc search)."""

    corpus: str
    views: tuple[str, ...] = ("TAC",)
    models: tuple[str, ...] = ()  # default: every model of the spec; models tuned from these join them
    include_tuned: bool = True


@dataclass(frozen=True)
class LabelTaskEntry:
    """Classification or clustering of one corpus's vectors against label sets."""

    corpus: str
    views: tuple[str, ...] = ("TAC",)
    label_sets: tuple[str, ...] = ("cpc_subclass",)
    models: tuple[str, ...] = ()  # default: every model of the spec; models tuned from these join them
    include_tuned: bool = True
    # task: the vectors of the model's classification/clustering prompt where it differs from the document
    # prompt (MTEB's convention; the index gets that field); document: the document vectors
    vectors: Literal["task", "document"] = "task"



@dataclass(frozen=True)
class FinetuneEntry:
    corpus: str
    recipes: tuple[str, ...]
    models: tuple[str, ...] = ()  # default: every model of the spec
    match_size: int | None = None
    max_steps: int | None = None
    batch_size: int | None = None


@dataclass(frozen=True)
class Expected:
    """An expected score, checked after the run (OK/FAIL), as in Pyserini's reproduction files."""

    task: str  # a name in study/tasks.TASKS
    corpus: str
    model: str
    view: str
    metric: str
    value: float
    tolerance: float = 0.005
    method: str | None = None  # retrieval (or a registered task's own kind of system)
    query_view: str | None = None  # retrieval with queries in another view than the documents
    label_set: str | None = None  # classification / clustering


@dataclass(frozen=True)
class ExperimentSpec:
    name: str
    corpora: tuple[CorpusEntry, ...]
    models: tuple[ModelEntry, ...] = ()
    description: str = ""
    indexes: tuple[IndexEntry, ...] = ()
    retrieval: tuple[RetrievalEntry, ...] = ()
    classification: tuple[LabelTaskEntry, ...] = ()
    clustering: tuple[LabelTaskEntry, ...] = ()
    finetune: tuple[FinetuneEntry, ...] = ()
    expected: tuple[Expected, ...] = ()
    # how encoding runs (device or `all`, precision, max_batch_tokens, attn_implementation); `evalctl run`
    # options override it field by field
    runtime: Runtime | None = None
    source_path: str = field(default="", compare=False)
    # the entries of registered tasks that have no field above: {task name: entries}
    more: dict[str, tuple] = field(default_factory=dict)

    def corpus(self, name: str) -> CorpusEntry:
        return next(c for c in self.corpora if c.name == name)

    def entries(self, section: str) -> tuple:
        """A section's entries, a field above or a registered task's (study/tasks.TASKS)."""
        return getattr(self, section) if section in SPEC_FIELDS else self.more.get(section, ())

    def resolve_source(self, source: str) -> Path:
        """A source path as written, else relative to the spec file, else to the folder holding the bundled
        samples/ (the repository, or the installed package: shipped specs name `samples/...`)."""
        shipped = package_folder("samples").parent
        for base in (Path.cwd(), Path(self.source_path).parent, shipped):
            p = (base / source).resolve()
            if p.exists():
                return p
        raise SpecError(f"{self.source_path}: source {source!r} not found (relative to the working "
                        f"directory, the spec file or {shipped})")


SPEC_FIELDS = {f.name for f in fields(ExperimentSpec)}  # a registered task named by none keeps its entries in `more`


def check_spec_name(value: str, what: str, at: str) -> None:
    try:
        check_name(value, what)
    except BadName as e:
        raise SpecError(f"{at}: {e}") from None
