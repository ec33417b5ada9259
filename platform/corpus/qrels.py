"""Retrieval tasks: qrels built from a corpus's citation graph, taken as given (BEIR, DAPFAM), or a
known-item sanity task (each patent is the one relevant document for a query made from its own text).

A qrels set lives in `<corpus>/qrels/<name>/`:
  qrels/<split>.tsv   BEIR-style "query-id<TAB>corpus-id<TAB>score" per split (train/dev/test)
  pairs.parquet       query_id, doc_id, score, domain (IN / OUT / UNKNOWN), split
  queries.parquet     query_id, split, jurisdiction, source (corpus | queries), exclude (ids to drop
                      from that query's ranking: the query and its family members)
  train_pairs.tsv     citation pairs safe for fine-tuning (none touches a dev/test query's family)
  manifest.json       the spec, the corpus hash, counts
The rules (relevance, exclusion, IN/OUT, split) are documented in docs/corpus-format.md.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Literal

from evalctl.atomic import replace_dir, staging_dir
from evalctl.config_files import SpecError
from evalctl.corpus.import_formats.problems import ProblemLog
from evalctl.corpus.import_formats.source import GivenPair
from evalctl.corpus.patent_record import CITATION_TYPES, PatentRecord
from evalctl.corpus.pubnum import loose_key
from evalctl.corpus.store import Corpus, load_corpus, write_json
from evalctl.corpus.views import load_views
from evalctl.errors import BadInput
from evalctl.names import check_name

Domain = Literal["IN", "OUT", "UNKNOWN"]
SPLITS = ("train", "dev", "test")


@dataclass(frozen=True)
class QrelsSpec:
    name: str = "citations"
    # citations: the citation graph decides relevance. known_item: every record (rendering in all of
    # `within_views`) is a query whose one relevant document is itself; the retrieval's query view says
    # which text asks (e.g. the title). A sanity task for corpora without citations or codes, never a
    # stand-in for prior-art relevance.
    source: Literal["citations", "known_item"] = "citations"
    within_views: tuple[str, ...] = ()
    direction: Literal["cited", "citing", "both"] = "cited"  # which links make a document relevant
    level: Literal["publication", "family"] = "publication"
    citation_types: tuple[str, ...] = CITATION_TYPES
    # A query's title and abstract must be in one of these languages where the source records it (OPS);
    # records of other formats pass. Relevant documents count whatever their language. () = no filter.
    query_languages: tuple[str, ...] = ("en",)
    domain_scheme: Literal["ipc", "cpc"] = "ipc"
    domain_chars: Literal[3, 4] = 3  # 3: IPC3 class (A61), 4: subclass (A61K)
    dev_fraction: float = 0.2
    train_fraction: float = 0.0  # > 0 holds queries out for fine-tuning (their pairs in train_pairs.tsv)
    seed: str = "evalctl"

    def __post_init__(self):
        check_name(self.name, "qrels name")
        unknown = set(self.citation_types) - set(CITATION_TYPES)
        if unknown:
            raise ValueError(f"unknown citation type(s) {sorted(unknown)}; known: {', '.join(CITATION_TYPES)}")
        if self.within_views and self.source != "known_item":
            raise ValueError("within_views applies to source known_item only")
        if not (0 <= self.dev_fraction and 0 <= self.train_fraction and self.dev_fraction + self.train_fraction < 1):
            raise ValueError("dev_fraction and train_fraction must be >= 0 and sum to less than 1")


@dataclass(frozen=True)
class QrelsQuery:
    id: str
    split: str
    jurisdiction: str | None
    source: Literal["corpus", "queries"]  # where the query's record is: corpus.parquet or queries.parquet
    exclude: frozenset[str]  # never relevant, and to be filtered out of this query's ranking


@dataclass(frozen=True)
class QrelsPair:
    query_id: str
    doc_id: str
    score: int
    domain: Domain
    split: str


@dataclass(frozen=True)
class _Doc:
    """What qrels need to know of a record; kept for every record, so small."""

    family: str
    jurisdiction: str | None
    domain_codes: frozenset[str]
    may_ask: bool  # its text languages allow it as a query (QrelsSpec.query_languages)


def domain_codes(record: PatentRecord, scheme: str, chars: int) -> frozenset[str]:
    return frozenset(c.code[:chars] for c in (record.ipc if scheme == "ipc" else record.cpc))


def may_ask(record: PatentRecord, spec: QrelsSpec) -> bool:
    langs = (record.title_lang, record.abstract_lang)
    return not spec.query_languages or all(lang in spec.query_languages for lang in langs if lang)


def domain_label(a: frozenset[str], b: frozenset[str]) -> Domain:
    """IN when the two share a code prefix, OUT when both have codes and share none, else UNKNOWN."""
    if not a or not b:
        return "UNKNOWN"
    return "IN" if a & b else "OUT"


def split_of(family: str, spec: QrelsSpec) -> str:
    """Deterministic split by a hash of the query's family, so family members never straddle splits."""
    u = int.from_bytes(hashlib.sha256(f"{spec.seed}:{family}".encode()).digest()[:8], "big") / 2**64
    if u < spec.train_fraction:
        return "train"
    return "dev" if u < spec.train_fraction + spec.dev_fraction else "test"


# --------------------------------------------------------------------------- citation qrels


@dataclass
class _Graph:
    docs: dict[str, _Doc] = field(default_factory=dict)  # in corpus order
    families: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    edges: dict[tuple[str, str], set[str]] = field(default_factory=dict)  # (citing, cited) -> types
    citations: int = 0
    resolved: int = 0
    near_misses: int = 0  # unresolved, but the target looks like an in-set number written another way


def _graph(corpus: Corpus, spec: QrelsSpec) -> _Graph:
    g = _Graph()
    resolve: dict[str, str] = {}
    pending: list[tuple[str, str, str, str]] = []  # (record, target key, type, direction)
    for r in corpus.records():
        g.docs[r.id] = _Doc(r.family, r.jurisdiction, domain_codes(r, spec.domain_scheme, spec.domain_chars),
                            may_ask(r, spec))
        g.families[r.family].add(r.id)
        for key in (r.id, *r.aliases):
            resolve.setdefault(key, r.id)
        pending += [(r.id, c.target, c.type, c.direction) for c in r.citations if c.type in spec.citation_types]
    loose = {loose_key(k): v for k, v in resolve.items()}
    for rid, target, type_, direction in pending:
        g.citations += 1
        other = resolve.get(target)
        if other is None:
            g.near_misses += loose.get(loose_key(target)) not in (None, rid)
            continue
        if other == rid:
            continue
        g.resolved += 1
        edge = (rid, other) if direction == "cited" else (other, rid)
        g.edges.setdefault(edge, set()).add(type_)
    return g


def build_citation_qrels(corpus: Corpus, spec: QrelsSpec = QrelsSpec(), overwrite: bool = False) -> "QrelsSet":
    g = _graph(corpus, spec)
    cites, cited_by = defaultdict(set), defaultdict(set)
    for a, b in g.edges:
        cites[a].add(b)
        cited_by[b].add(a)
    queries, pairs = [], []
    for qid, q in g.docs.items():
        if not q.may_ask:
            continue
        linked = (cites[qid] if spec.direction != "citing" else set()) | (cited_by[qid] if spec.direction != "cited" else set())
        if spec.level == "family":
            linked = {m for d in linked for m in g.families[g.docs[d].family]}
        exclude = frozenset(g.families[q.family])
        relevant = sorted(linked - exclude)
        if not relevant:
            continue
        split = split_of(q.family, spec)
        queries.append(QrelsQuery(qid, split, q.jurisdiction, "corpus", exclude))
        pairs += [QrelsPair(qid, d, 1, domain_label(q.domain_codes, g.docs[d].domain_codes), split) for d in relevant]
    held_out = {g.docs[q.id].family for q in queries if q.split != "train"}
    train_pairs = [(a, b, ",".join(sorted(t))) for (a, b), t in g.edges.items()
                   if g.docs[a].family not in held_out and g.docs[b].family not in held_out]
    stats = {"citations": g.citations, "citations_resolved": g.resolved,
             "citations_unresolved_like_in_set": g.near_misses, "citation_edges": len(g.edges),
             "train_pairs": len(train_pairs), "records_not_asking": sum(not d.may_ask for d in g.docs.values())}
    return write_qrels_set(corpus, spec, QrelsContent(queries, pairs, train_pairs, stats), overwrite)


# --------------------------------------------------------------------------- known-item qrels


def build_known_item_qrels(corpus: Corpus, spec: QrelsSpec, overwrite: bool = False) -> "QrelsSet":
    """Each record that renders in every view of `spec.within_views` is a query relevant to itself only.
    Its family's other members are excluded from its ranking (near-duplicates, not the known item);
    the record itself stays. Train-split records are free for fine-tuning; dev/test ones are held out."""
    views = load_views()
    unknown = [v for v in spec.within_views if v not in views]
    if unknown:
        raise SpecError(f"qrels {spec.name}: within_views: unknown view(s) {unknown}; configs/views.yaml has {', '.join(views)}")
    families: dict[str, set[str]] = defaultdict(set)
    chosen: list[PatentRecord] = []
    skipped = 0
    for r in corpus.records():
        families[r.family].add(r.id)
        if may_ask(r, spec) and all(views[v].render(r) for v in spec.within_views):
            chosen.append(r)
        else:
            skipped += 1
    queries, pairs = [], []
    for r in chosen:
        split = split_of(r.family, spec)
        queries.append(QrelsQuery(r.id, split, r.jurisdiction, "corpus", frozenset(families[r.family] - {r.id})))
        codes = domain_codes(r, spec.domain_scheme, spec.domain_chars)
        pairs.append(QrelsPair(r.id, r.id, 1, domain_label(codes, codes), split))
    return write_qrels_set(corpus, spec, QrelsContent(queries, pairs, stats={"records_not_rendering": skipped}),
                           overwrite)


def build_qrels(corpus: Corpus, spec: QrelsSpec, overwrite: bool = False) -> "QrelsSet":
    """The qrels set `spec` describes, from the corpus itself (citations or known items)."""
    build = build_known_item_qrels if spec.source == "known_item" else build_citation_qrels
    return build(corpus, spec, overwrite)


# --------------------------------------------------------------------------- given qrels


def build_given_qrels(corpus: Corpus, given: Iterable[GivenPair], log: ProblemLog, spec: QrelsSpec) -> "QrelsSet":
    """Qrels shipped with the source; pairs naming an unknown query or document are reported, dropped."""
    docs = {r.id: (r.family, domain_codes(r, spec.domain_scheme, spec.domain_chars)) for r in corpus.records()}
    families: dict[str, set[str]] = defaultdict(set)
    for rid, (fam, _) in docs.items():
        families[fam].add(rid)
    qrecs = {r.id: (r.jurisdiction, domain_codes(r, spec.domain_scheme, spec.domain_chars)) for r in corpus.queries()}
    queries: dict[str, QrelsQuery] = {}
    pairs: dict[tuple[str, str], QrelsPair] = {}
    for p in given:
        if p.query_id not in qrecs:
            log.add("bad_value", p.where, "query-id", f"query {p.query_id!r} is not among the imported queries; pair skipped")
            continue
        if p.doc_id not in docs:
            log.add("bad_value", p.where, "corpus-id", f"document {p.doc_id!r} is not in the corpus; pair skipped")
            continue
        if p.query_id not in queries:
            in_corpus = docs.get(p.query_id)
            exclude = frozenset({p.query_id} | (families[in_corpus[0]] if in_corpus else set()))
            split = p.split or split_of(in_corpus[0] if in_corpus else p.query_id, spec)
            queries[p.query_id] = QrelsQuery(p.query_id, split, qrecs[p.query_id][0], "queries", exclude)
        q = queries[p.query_id]
        if p.doc_id in q.exclude:
            continue
        domain = p.domain or domain_label(qrecs[p.query_id][1], docs[p.doc_id][1])
        pairs.setdefault((p.query_id, p.doc_id), QrelsPair(p.query_id, p.doc_id, p.score, domain, q.split))
    return write_qrels_set(corpus, spec, QrelsContent(list(queries.values()), list(pairs.values())), overwrite=True)


# --------------------------------------------------------------------------- store


def qrels_root(corpus: Corpus) -> Path:
    return corpus.path / "qrels"


@dataclass(frozen=True)
class QrelsContent:
    """What a builder (citations, known item, given) decided, as write_qrels_set stores it."""

    queries: list[QrelsQuery]
    pairs: list[QrelsPair]
    train_pairs: list[tuple[str, str, str]] | None = None  # citation qrels only: (citing, cited, types)
    stats: dict = field(default_factory=dict)  # counts added to the manifest


def write_qrels_set(corpus: Corpus, spec: QrelsSpec, content: QrelsContent, overwrite: bool) -> "QrelsSet":
    queries, pairs, train_pairs = content.queries, content.pairs, content.train_pairs
    final = qrels_root(corpus) / spec.name
    if final.exists() and not overwrite:
        raise FileExistsError(f"qrels set {spec.name!r} already exists at {final}; choose another --name or --overwrite")
    with staging_dir(final) as tmp:  # private: concurrent builds
        (tmp / "qrels").mkdir()
        for split in SPLITS:
            rows = [p for p in pairs if p.split == split]
            if rows:
                with open(tmp / "qrels" / f"{split}.tsv", "w", newline="") as f:
                    w = csv.writer(f, delimiter="\t", lineterminator="\n")
                    w.writerow(["query-id", "corpus-id", "score"])
                    w.writerows((p.query_id, p.doc_id, p.score) for p in rows)
        _write_tables(tmp, pairs, queries)
        if train_pairs is not None:
            with open(tmp / "train_pairs.tsv", "w", newline="") as f:
                w = csv.writer(f, delimiter="\t", lineterminator="\n")
                w.writerow(["citing-id", "cited-id", "types"])
                w.writerows(train_pairs)
        manifest = {
            "name": spec.name, "corpus": corpus.name, "corpus_hash": corpus.content_hash,
            "kind": "given" if spec.source == "citations" and train_pairs is None else spec.source,
            "spec": asdict(spec),
            "queries": dict(Counter(q.split for q in queries)), "pairs": len(pairs),
            "domains": dict(Counter(p.domain for p in pairs)), **content.stats,
        }
        write_json(tmp / "manifest.json", manifest)
        replace_dir(tmp, final)
    # what was written, not read back: a concurrent build of the same set may be moving `final` aside
    return QrelsSet(spec.name, final, json.loads(json.dumps(manifest)), tuple(queries), tuple(pairs))


def _write_tables(folder: Path, pairs, queries) -> None:
    import pyarrow as pa  # pyarrow: reruns and reports read only the manifest
    import pyarrow.parquet as pq

    pairs_schema = pa.schema([("query_id", pa.string()), ("doc_id", pa.string()), ("score", pa.int32()),
                              ("domain", pa.string()), ("split", pa.string())])
    queries_schema = pa.schema([("id", pa.string()), ("split", pa.string()), ("jurisdiction", pa.string()),
                                ("source", pa.string()), ("exclude", pa.list_(pa.string()))])
    pq.write_table(pa.Table.from_pylist([asdict(p) for p in pairs], schema=pairs_schema), folder / "pairs.parquet")
    pq.write_table(pa.Table.from_pylist([{**asdict(q), "exclude": sorted(q.exclude)} for q in queries],
                                        schema=queries_schema), folder / "queries.parquet")


@dataclass(frozen=True)
class QrelsSet:
    name: str
    path: Path
    manifest: dict
    queries: tuple[QrelsQuery, ...]
    pairs: tuple[QrelsPair, ...]

    def qrels(self, split: str | None = None, domain: str | None = None) -> dict[str, dict[str, int]]:
        """{query: {doc: score}} for one split and/or domain (IN/OUT); queries left without pairs are absent."""
        out: dict[str, dict[str, int]] = defaultdict(dict)
        for p in self.pairs:
            if (split is None or p.split == split) and (domain is None or p.domain == domain):
                out[p.query_id][p.doc_id] = p.score
        return dict(out)

    def exclusions(self) -> dict[str, frozenset[str]]:
        return {q.id: q.exclude for q in self.queries}

    def train_pairs(self) -> Iterator[tuple[str, str, str]]:
        path = self.path / "train_pairs.tsv"
        if path.exists():
            with open(path, newline="") as f:
                rows = csv.reader(f, delimiter="\t")
                next(rows)
                yield from ((a, b, t) for a, b, t in rows)


def list_qrels(corpus: Corpus) -> list[str]:
    root = qrels_root(corpus)
    return sorted(p.name for p in root.glob("*") if (p / "manifest.json").is_file()) if root.is_dir() else []


class QrelsNotFound(BadInput, FileNotFoundError):
    pass


def _qrels_dir(corpus: Corpus, name: str) -> Path:
    d = qrels_root(corpus) / check_name(name, "qrels set")  # never a path into another corpus
    if not (d / "manifest.json").is_file():
        raise QrelsNotFound(f"corpus {corpus.name!r} has no qrels set {name!r} (it has: "
                            f"{', '.join(list_qrels(corpus)) or 'none'}): build it with `evalctl corpus qrels "
                            f"{corpus.name} --name {name}`, or name one it has")
    return d


def qrels_manifest(corpus: Corpus, name: str) -> dict:
    """The qrels set's manifest alone (how it was built), without reading its queries and pairs."""
    return json.loads((_qrels_dir(corpus, name) / "manifest.json").read_text())


def load_qrels(corpus: Corpus | str | Path, name: str) -> QrelsSet:
    corpus = corpus if isinstance(corpus, Corpus) else load_corpus(corpus)
    d = _qrels_dir(corpus, name)
    return _read_qrels(name, d, tuple((d / f).stat().st_mtime_ns for f in ("manifest.json", "queries.parquet",
                                                                           "pairs.parquet")))


# Once per process: a study's plan checks every retrieval step, and each read of a 113k corpus's set
# (82k pairs) took ~1 s; the files' times key it, so a set built again is read again.
@functools.lru_cache(maxsize=4)
def _read_qrels(name: str, d: Path, _stamps: tuple[int, ...]) -> QrelsSet:
    import pyarrow.parquet as pq  # deferred: pyarrow

    q = pq.ParquetFile(d / "queries.parquet").read()
    queries = tuple(map(QrelsQuery, *(q[c].to_pylist() for c in ("id", "split", "jurisdiction", "source")),
                        map(frozenset, q["exclude"].to_pylist())))
    p = pq.ParquetFile(d / "pairs.parquet").read()
    pairs = tuple(map(QrelsPair, *(p[f.name].to_pylist() for f in fields(QrelsPair))))
    return QrelsSet(name, d, json.loads((d / "manifest.json").read_text()), queries, pairs)
