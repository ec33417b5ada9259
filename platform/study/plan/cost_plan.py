"""The cost plan `evalctl run SPEC --dry-run` prints: what the planned index steps need before anything runs.

Per corpus x model index: tokens to encode (every view's text, and each label task's own-prompt copy where
the model has one, cut at the model's max_seq_length; each passage field's passages, a vector and a copy of the
text each) and the GPU-hours they take at 2 x parameters FLOP a
token on the stated GPU at the stated utilisation; disk for the embedding cache (float32 + a 32-byte text
hash a vector) and for the index; node memory for the HNSW graphs, by OpenSearch's k-NN formula
1.1 x (4 x dim + 8 x m) bytes a vector (1 x dim with Lucene's `encoder: sq` or `data_type: byte`). An imported
corpus is measured record by record (the characters of each view it renders; above MEASURED_RECORDS records, on
evenly spaced row groups of that many); one not imported yet needs its size (`--corpus-size NAME=N`) and is priced with
typical field lengths. Rates and where they come from: configs/cost_plan.yaml.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from evalctl.config_files import build, load_yaml
from evalctl.corpus.store import CorpusNotFound, load_corpus
from evalctl.corpus.views import load_views
from evalctl.errors import BadInput
from evalctl.indexers.index_layout import IndexSettings, load_index_settings, task_prompts
from evalctl.indexers.passages import PassageSpec, passage_unit
from evalctl.models import ModelSpec, get_model
from evalctl.study.abstasks.steps import spec_models
from evalctl.study.spec.step_ids import IndexId

HASH_BYTES = 32  # per cached vector (evalctl.indexers.embedding_cache)
GRAPH_OVERHEAD = 1.1  # OpenSearch k-NN's HNSW memory estimate: 1.1 x (4 x dim + 8 x m) bytes per vector
# Bytes a graph vector's component takes by the index's encoder (configs/index.yaml): sq is Lucene's 7-bit
# quantisation (one byte), sq_fp16 half precision; the float32 copy stays on disk either way.
COMPONENT_BYTES = {"flat": 4, "sq": 1, "sq_fp16": 2}


def component_bytes(index_settings) -> int:
    """Bytes a graph vector's component takes: a byte index's are int8 whatever the encoder (which is flat)."""
    return 1 if index_settings.data_type == "byte" else COMPONENT_BYTES[index_settings.encoder]


@dataclass(frozen=True)
class CostSettings:
    gpu: str
    utilisation: float
    gpus: dict[str, float]  # name -> peak dense bf16 TFLOP/s
    chars_per_token: float
    field_chars: dict[str, float]  # typical characters of a record field (a corpus not imported yet)
    doc_bytes: float
    text_bytes_per_char: float
    vector_bytes_per_dim: float

    def __post_init__(self):
        if self.gpu not in self.gpus:
            raise ValueError(f"gpu {self.gpu!r}: not one of {', '.join(self.gpus)}")
        if not 0 < self.utilisation <= 1:
            raise ValueError(f"utilisation {self.utilisation}: must be above 0 and at most 1")

    @property
    def flops_per_s(self) -> float:
        return self.gpus[self.gpu] * 1e12 * self.utilisation


def load_cost_settings(path: str = "cost_plan.yaml", **given) -> CostSettings:
    """configs/<path>, with the fields `given` (those not None: `--gpu`, `--utilisation`) replaced."""
    data = {**(load_yaml(path) or {}), **{k: v for k, v in given.items() if v is not None}}
    return build(CostSettings, data, f"configs/{path}")


def parse_sizes(pairs: tuple[str, ...]) -> dict[str, int]:
    """`--corpus-size NAME=N` values -> {name: N}; a malformed one is refused naming it."""
    sizes = {}
    for pair in pairs:
        name, _, n = pair.partition("=")
        if not name or not n.isdigit() or int(n) < 1:
            raise BadInput(f"--corpus-size {pair!r}: expected NAME=N with N a positive whole number of records")
        sizes[name] = int(n)
    return sizes


@dataclass(frozen=True)
class TextLengths:
    """Characters of each record's text of one view (0: the record does not render it), `scale` records each
    (1 when every record is measured; corpus / sample size for a large corpus; the corpus size when priced
    from typical field lengths)."""

    chars: np.ndarray
    scale: float
    measured: bool

    @property
    def records(self) -> int:
        """Records that render the view (each gets a vector)."""
        return round(np.count_nonzero(self.chars) * self.scale)

    @property
    def corpus_records(self) -> int:
        """Every record (each is a document of the index, with or without the view's text)."""
        return round(len(self.chars) * self.scale)

    def tokens(self, settings: CostSettings, prompt_chars: int, max_tokens: int) -> int:
        rendered = self.chars[self.chars > 0]
        per_text = np.minimum(np.ceil((rendered + prompt_chars) / settings.chars_per_token), max_tokens)
        return round(per_text.sum() * self.scale)

    def passages(self, settings: CostSettings, prompt_chars: int, spec: PassageSpec) -> tuple[int, int]:
        """(passages, tokens to encode them) of the texts cut by `spec` (indexers.passages: windows every stride,
        the last ending at the text's end)."""
        n = np.ceil(self.chars[self.chars > 0] / settings.chars_per_token)
        count = np.where(n <= spec.window, 1, np.ceil((n - spec.window) / spec.stride) + 1)
        tokens = count * (np.minimum(n, spec.window) + np.ceil(prompt_chars / settings.chars_per_token))
        return round(count.sum() * self.scale), round(tokens.sum() * self.scale)


# A larger corpus is measured on evenly spaced row groups of about this many records: a full pass costs
# ~9 s at 113k records, on every dry-run, for an estimate whose tokens-per-character rate is itself a guess.
MEASURED_RECORDS = 20_000


def corpus_lengths(name: str, views: list[str], settings: CostSettings, sizes: dict[str, int]
                   ) -> dict[str, TextLengths] | None:
    """{view: lengths} of corpus `name`: measured when it is imported, else from `sizes` (None: unknown)."""
    specs = [load_views()[v] for v in views]
    try:
        corpus = load_corpus(name)
    except CorpusNotFound:
        if name not in sizes:
            return None
        return {v.name: TextLengths(np.array([sum(settings.field_chars[f] for f in v.fields)
                                              + len(v.separator) * (len(v.fields) - 1)]), sizes[name], False)
                for v in specs}
    columns = {c for v in specs for c in v.columns}
    chars: dict[str, list[int]] = {v.name: [] for v in specs}
    for r in corpus.spread_records(MEASURED_RECORDS, columns=tuple(columns)):
        for v in specs:
            chars[v.name].append(len(v.render(r) or ""))
    scale = len(corpus) / max(1, len(chars[specs[0].name]))
    return {v: TextLengths(np.array(c, dtype=np.int64), scale, True) for v, c in chars.items()}


@dataclass(frozen=True)
class IndexCost:
    corpus: str
    model: str | None  # None: a text-only (BM25) index
    views: tuple[str, ...]
    docs: int
    vectors: int  # vectors stored, all fields together
    dim: int
    tokens: int
    gpu_hours: float
    cache_bytes: float
    index_bytes: float
    graph_bytes: float
    measured: bool
    passages: tuple[tuple[str, PassageSpec], ...] = ()


@dataclass(frozen=True)
class Pricing:
    """The rates (configs/cost_plan.yaml) and the index settings an index is priced with."""

    settings: CostSettings
    index_settings: IndexSettings


def index_cost(index: IndexId, model: ModelSpec | None, variant: str | None, lengths: dict[str, TextLengths],
               pricing: Pricing) -> IndexCost:
    """The index's fields priced: its views' text, a vector per view and per task prompt it holds, a vector and a
    copy of the text per passage. `model`: the index's model (a model the study fine-tunes is priced as its base)."""
    settings, views, passages = pricing.settings, index.views, index.passages
    docs = lengths[views[0]].corpus_records
    text = (docs * settings.doc_bytes
            + sum(float(lengths[v].chars.sum()) * lengths[v].scale for v in views) * settings.text_bytes_per_char)
    measured = all(lengths[v].measured for v in views)
    if model is None:
        return IndexCost(index.corpus, None, views, docs, 0, 0, 0, 0.0, 0.0, text, 0.0, measured)
    document = model.prompt_for("document", task_type="retrieval", variant=variant) or ""
    units = [(v, document) for v in views]  # (view, prompt) of every vector field
    task_views = dict(index.prompt_tasks)
    for task, prompt in task_prompts(model, variant, tuple(task_views)).items():
        units += [(v, prompt or "") for v in sorted(task_views[task])]
    tokens = sum(lengths[v].tokens(settings, len(p), model.max_seq_length) for v, p in units)
    vectors = sum(lengths[v].records for v, _ in units)
    for v, spec in passages:
        n, t = lengths[v].passages(settings, len(document), spec)
        vectors, tokens = vectors + n, tokens + t
        text += float(lengths[v].chars.sum()) * lengths[v].scale * settings.text_bytes_per_char * (
            spec.window / spec.stride)  # the passages' text, overlaps counted twice
    return IndexCost(
        index.corpus, index.model, views, docs, vectors, model.dim, tokens, passages=passages,
        gpu_hours=2 * model.params_m * 1e6 * tokens / settings.flops_per_s / 3600,
        cache_bytes=vectors * (4 * model.dim + HASH_BYTES),
        index_bytes=text + vectors * model.dim * settings.vector_bytes_per_dim,
        graph_bytes=vectors * GRAPH_OVERHEAD * (component_bytes(pricing.index_settings) * model.dim
                                                + 8 * pricing.index_settings.hnsw.m), measured=measured)


@dataclass
class CostPlan:
    settings: CostSettings
    rows: list[IndexCost] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)  # corpora of unknown size
    sizes: dict[str, int] = field(default_factory=dict)

    def lines(self) -> list[str]:
        s = self.settings
        out = [f"cost plan (configs/cost_plan.yaml): GPU {s.gpu} ({s.gpus[s.gpu]:g} TFLOP/s dense bf16) at "
               f"{s.utilisation:.0%} utilisation, 2 x parameters FLOP a token, {s.chars_per_token:g} characters a token"]
        names = [f"{r.corpus} {r.model or 'bm25'} [{','.join(r.views)}]"
                 + (f" [{','.join(passage_unit(v, p) for v, p in r.passages)}]" if r.passages else "")
                 for r in self.rows]
        w = max(map(len, names), default=5)
        out.append(f"  {'index':<{w}} {'docs':>9} {'vectors':>13} {'tokens':>8} {'GPU-h':>7} {'cache':>8} "
                   f"{'index':>8} {'HNSW':>8}")
        for name, r in zip(names, self.rows):
            vec = f"{r.vectors:,}x{r.dim}" if r.model else "-"
            out.append(f"  {name:<{w}} {r.docs:>9,} {vec:>13} {_count(r.tokens):>8} {r.gpu_hours:>7.2f} "
                       f"{_size(r.cache_bytes):>8} {_size(r.index_bytes):>8} {_size(r.graph_bytes):>8}")
        total = {k: sum(getattr(r, k) for r in self.rows) for k in
                 ("tokens", "gpu_hours", "cache_bytes", "index_bytes", "graph_bytes")}
        largest = max((r.graph_bytes for r in self.rows), default=0.0)
        out.append(f"  total: {_count(total['tokens'])} tokens, {total['gpu_hours']:.1f} GPU-hours on {s.gpu}; disk "
                   f"{_size(total['cache_bytes'])} embedding cache + {_size(total['index_bytes'])} indexes; node "
                   f"memory for HNSW graphs {_size(total['graph_bytes'])} with every index searched at once "
                   f"(largest index {_size(largest)})")
        for name, n in self.sizes.items():
            if not any(r.measured for r in self.rows if r.corpus == name):
                fields = ", ".join(f"{f} {c:,.0f}" for f, c in s.field_chars.items())
                out.append(f"  {name}: not imported, priced as {n:,} records of typical length ({fields} "
                           "characters)")
        for name in self.unknown:
            out.append(f"  {name}: not imported and of unknown size, left out: give --corpus-size {name}=N")
        out.append("  not counted: query encoding, fine-tuning, the corpus store, replicas")
        return out


def _size(n: float) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def _count(n: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return f"{n:.0f}"


def cost_plan(spec, steps, sizes: dict[str, int] | None = None, **given) -> CostPlan:
    """The cost of the planned steps of `spec`; `sizes`: records of corpora not imported yet; `given`: gpu,
    utilisation."""
    settings, sizes = load_cost_settings(**given), sizes or {}
    indexes = [s.id for s in steps if isinstance(s.id, IndexId)]
    variants = {m.id: m.prompt_variant for m in spec.models}
    base_of = spec_models(spec).base_of
    pricing = Pricing(settings, load_index_settings())
    plan = CostPlan(settings, sizes={c.name: sizes[c.name] for c in spec.corpora if c.name in sizes})
    for corpus in dict.fromkeys(i.corpus for i in indexes):
        lengths = corpus_lengths(corpus, sorted({v for i in indexes if i.corpus == corpus for v in i.views}),
                                 settings, sizes)
        if lengths is None:
            plan.unknown.append(corpus)
            continue
        plan.rows += [index_cost(i, get_model(base_of.get(i.model, i.model)) if i.model else None,
                                 variants.get(i.model), lengths, pricing) for i in indexes if i.corpus == corpus]
    return plan
