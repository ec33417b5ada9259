"""Experiment specs (configs/experiments/*.yaml): a whole study as data.

A spec names corpora (with their sources, qrels and label sets), models (with prompt variants), indexes,
fine-tuning recipes, a section per registered task (retrieval, classification, clustering, transfer: each
task module holds its entry type), the statistical protocol its report tests with (`statistics:`) and, like
IR reproduction files, expected scores with tolerances. This module holds the spec's types; spec_loading.py
reads a spec file into them and validates it against the task registry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Literal

from evalctl.corpus.qrels import QrelsSpec
from evalctl.evaluators.scoring.significance_params import StatsProtocol
from evalctl.evaluators.scoring.runs import EmptyQueries
from evalctl.evaluators.retrieval.methods import METHODS
from evalctl.evaluators.retrieval.query_chunks import FUSION as CHUNK_FUSION
from evalctl.indexers.passages import PassageError, PassageSpec
from evalctl.indexers.runtime import Runtime
from evalctl.names import BadName, check_name
from evalctl.config_files import SpecError


@dataclass(frozen=True)
class CorpusEntry:
    name: str
    format: str = ""  # a name in import_formats.IMPORT_FORMATS (a dataset's own by default)
    sources: tuple[str, ...] = ()
    qrels: QrelsSpec | None = None
    labels: tuple[str, ...] = ()  # free landscape labels given to every record at import
    documents: Literal["publication", "family"] = "publication"  # family: one record per family
    # a dataset of the catalogue (configs/datasets/), fetched on first use, instead of `sources`
    dataset: str | None = None


@dataclass(frozen=True)
class ModelEntry:
    id: str
    prompt_variant: str | None = None
    # A model defined here: the fields of a models-file entry (`evalctl models show` prints one), less `id`.
    spec: dict[str, Any] | None = None


@dataclass(frozen=True)
class IndexEntry:
    """An index to build even when no task of the spec reads it (e.g. for ad-hoc search)."""

    corpus: str
    views: tuple[str, ...] = ("TAC",)
    models: tuple[str, ...] = ()  # default: every model of the spec; models tuned from these join them
    include_tuned: bool = True


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
    passages: str | None = None  # a passage method's setting, WINDOW[:STRIDE] or its name (w64s48)
    query_chunks: bool = False  # the run with the query patent cut into chunks of that setting
    label_set: str | None = None  # classification / clustering


@dataclass(frozen=True)
class CoverageSpec:
    """How the report treats queries with no text in their query view (searched with no body, so no hit):
    "keep" scores them 0 inside every mean and says how many there are; "exclude" leaves them out of every
    mean, test, finding and chart. Either way the report prints the policy and the counts per view."""

    empty_queries: EmptyQueries = "keep"


@dataclass(frozen=True)
class ExperimentSpec:
    name: str
    corpora: tuple[CorpusEntry, ...]
    models: tuple[ModelEntry, ...] = ()
    description: str = ""
    indexes: tuple[IndexEntry, ...] = ()
    finetune: tuple[FinetuneEntry, ...] = ()
    expected: tuple[Expected, ...] = ()
    # how encoding runs (device or `all`, precision, max_batch_tokens, attn_implementation); `evalctl run`
    # options override it field by field
    runtime: Runtime | None = None
    # the one statistical protocol behind every significance letter, finding and footnote of the report
    statistics: StatsProtocol = StatsProtocol()
    coverage: CoverageSpec = CoverageSpec()
    source_path: str = field(default="", compare=False)
    # each registered task's section (study/tasks.TASKS), as the file gives it: {task name: its entries}
    tasks: dict[str, tuple] = field(default_factory=dict)

    def corpus(self, name: str) -> CorpusEntry:
        return next(c for c in self.corpora if c.name == name)

    def entries(self, section: str) -> tuple:
        """A section's entries: `indexes`, `finetune` or a registered task's."""
        return getattr(self, section) if section in ("indexes", "finetune") else self.tasks.get(section, ())

    def resolve_source(self, source: str) -> Path:
        """A source path as written, else relative to the spec file."""
        for base in (Path.cwd(), Path(self.source_path).parent):
            p = (base / source).resolve()
            if p.exists():
                return p
        raise SpecError(f"{self.source_path}: source {source!r} not found (relative to the working directory or the "
                        "spec file)")


def check_spec_name(value: str, what: str, at: str) -> None:
    try:
        check_name(value, what)
    except BadName as e:
        raise SpecError(f"{at}: {e}") from None


def passage_setting(value: str, at: str) -> PassageSpec:
    """A passage setting as a spec writes it (WINDOW[:STRIDE] or w64s48)."""
    try:
        return PassageSpec.parse(str(value))
    except PassageError as e:
        raise SpecError(f"{at}: {e}") from None


def passage_settings(passages: tuple[str, ...]) -> tuple[PassageSpec, ...]:
    """An entry's passage settings, each once, in the order written."""
    return tuple(dict.fromkeys(passage_setting(p, "passages") for p in passages))


def method_runs(method: str, passages: tuple[str, ...], query_chunks: bool
                ) -> list[tuple[PassageSpec | None, str | None]]:
    """(passage setting, query chunks' fusion) of each run an entry's `method` makes: one a passage setting for a
    passage method (dense-maxp), one for a document method; with `query_chunks`, a method that takes chunked queries
    runs each setting twice, the query encoded whole and cut into chunks."""
    m = METHODS.get(method)
    settings = passage_settings(passages) if m.passages else (None,)
    chunks = (None, CHUNK_FUSION) if query_chunks and m.query_chunks else (None,)
    return [(s, c) for s in settings for c in chunks]


def method_targets(model_ids: list[str], entry) -> Iterator[tuple[str, str, str, PassageSpec | None, str | None]]:
    """(model, view, method, passage setting, query chunks' fusion) of each run an entry with retrieval `methods`
    asks for. A text-only method (BM25) runs once per view, on the first model's index (its text): "bm25" names
    it when the entry has no model."""
    for view in entry.views:
        for method in entry.methods:
            text_only = not METHODS.get(method).vector
            for model_id in ((model_ids[:1] or ["bm25"]) if text_only else model_ids):
                for passages, chunks in method_runs(method, entry.passages, entry.query_chunks):
                    yield model_id, view, method, passages, chunks


def check_passages(methods: tuple[str, ...], passages: tuple[str, ...], query_chunks: bool, at: str) -> None:
    """An entry's `passages` are valid settings, given once, and go with its passage methods, and `query_chunks` with
    a method that takes chunked queries: one without the other would plan nothing or fail."""
    names = [passage_setting(p, f"{at}: passages[{i}]").name for i, p in enumerate(passages)]
    for i, n in enumerate(names):
        if n in names[:i]:
            raise SpecError(f"{at}: passages[{names.index(n)}] and passages[{i}]: passage setting {n} given twice")
    searching = [m for m in methods if m in METHODS and METHODS.get(m).passages]
    if searching and not names:
        raise SpecError(f"{at}: method {searching[0]} searches passages: give `passages:` (WINDOW[:STRIDE] in the "
                        "model's tokens, e.g. [64:48])")
    if names and not searching:
        passage_methods = ", ".join(n for n, m in METHODS.items() if m.passages)
        raise SpecError(f"{at}: passages {', '.join(names)} but no method searches them (one of {passage_methods})")
    if query_chunks and not any(m in METHODS and METHODS.get(m).query_chunks for m in methods):
        takes = ", ".join(n for n, m in METHODS.items() if m.query_chunks)
        raise SpecError(f"{at}: query_chunks: true but no method takes chunked queries (one of {takes})")
