"""`evalctl corpus stats`: sizes, view coverage, label cardinality, queries, IN/OUT and jurisdiction shares."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from evalctl.corpus.store import Corpus
from evalctl.corpus.label_sets import LabelSetSpec, load_label_sets
from evalctl.corpus.qrels import list_qrels, load_qrels
from evalctl.corpus.views import ViewCoverage, ViewSpec, load_views, view_coverage


@dataclass(frozen=True)
class LabelSetStats:
    labels: int  # distinct labels with enough support
    records: int  # records keeping at least one label
    mean_per_record: float


@dataclass(frozen=True)
class QrelsStats:
    kind: str
    queries: dict[str, int]  # per split
    pairs: int
    domains: dict[str, int]
    query_jurisdictions: Counter
    citations_resolved: int | None


@dataclass(frozen=True)
class CorpusStats:
    name: str
    content_hash: str
    records: int
    families: int
    fields: dict[str, int]
    problems: dict[str, int]
    jurisdictions: Counter
    views: dict[str, ViewCoverage]
    label_sets: dict[str, LabelSetStats]
    qrels: dict[str, QrelsStats]


def corpus_stats(corpus: Corpus, views: dict[str, ViewSpec] | None = None,
                 label_sets: dict[str, LabelSetSpec] | None = None) -> CorpusStats:
    views = load_views() if views is None else views
    label_sets = load_label_sets() if label_sets is None else label_sets
    jurisdictions, families = Counter(), set()
    raw_labels: dict[str, list[list[str]]] = {n: [] for n in label_sets}

    def records():  # one pass feeds everything
        for r in corpus.records():
            jurisdictions[r.jurisdiction or "?"] += 1
            families.add(r.family)
            for n, spec in label_sets.items():
                raw_labels[n].append(spec.labels_of(r))
            yield r

    coverage = view_coverage(records(), views)
    return CorpusStats(
        name=corpus.name, content_hash=corpus.content_hash, records=len(corpus), families=len(families),
        fields=corpus.manifest.get("fields", {}), problems=corpus.manifest.get("problems", {}),
        jurisdictions=jurisdictions, views=coverage,
        label_sets={n: _label_stats(raw_labels[n], label_sets[n].min_support) for n in label_sets},
        qrels={n: _qrels_stats(corpus, n) for n in list_qrels(corpus)},
    )


def _label_stats(per_record: list[list[str]], min_support: int) -> LabelSetStats:
    support = Counter(lab for labels in per_record for lab in labels)
    kept = [[lab for lab in labels if support[lab] >= min_support] for labels in per_record]
    kept = [k for k in kept if k]
    n = sum(len(k) for k in kept)
    return LabelSetStats(sum(1 for c in support.values() if c >= min_support), len(kept), n / len(kept) if kept else 0.0)


def _qrels_stats(corpus: Corpus, name: str) -> QrelsStats:
    q = load_qrels(corpus, name)
    return QrelsStats(q.manifest["kind"], dict(Counter(x.split for x in q.queries)), len(q.pairs),
                      dict(Counter(p.domain for p in q.pairs)), Counter(x.jurisdiction or "?" for x in q.queries),
                      q.manifest.get("citations_resolved"))


def _shares(c: Counter | dict, top: int = 8) -> str:
    total = sum(c.values()) or 1
    items = sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))
    head = ", ".join(f"{k} {v} ({100 * v / total:.1f}%)" for k, v in items[:top])
    return head + (f", +{len(items) - top} more" if len(items) > top else "")


def format_stats(s: CorpusStats) -> str:
    lines = [
        f"corpus {s.name}  {s.content_hash}",
        f"records: {s.records}  families: {s.families}",
        "fields: " + ", ".join(f"{k} {v}" for k, v in s.fields.items()),
        "import problems: " + (", ".join(f"{k} {v}" for k, v in s.problems.items()) or "none"),
        "jurisdictions: " + _shares(s.jurisdictions),
        "views (rendered / records; missing fields):",
    ]
    for name, c in s.views.items():
        miss = ", ".join(f"{f} {n}" for f, n in c.missing.items())
        lines.append(f"  {name:6} {c.rendered}/{s.records}" + (f"  missing: {miss}; e.g. {', '.join(c.examples)}" if miss else ""))
    lines.append("label sets (labels / records labelled / mean labels per record):")
    for name, ls in s.label_sets.items():
        lines.append(f"  {name:13} {ls.labels} / {ls.records} / {ls.mean_per_record:.2f}")
    lines.append("qrels sets:" + ("" if s.qrels else " none (build with `evalctl corpus qrels`)"))
    for name, q in s.qrels.items():
        resolved = f", citations resolved in corpus: {q.citations_resolved}" if q.citations_resolved is not None else ""
        lines.append(f"  {name} ({q.kind}): queries {sum(q.queries.values())} "
                     f"({', '.join(f'{k} {v}' for k, v in sorted(q.queries.items()))}), pairs {q.pairs}{resolved}")
        lines.append(f"    IN/OUT: {_shares(q.domains)}")
        lines.append(f"    query jurisdictions: {_shares(q.query_jurisdictions)}")
    return "\n".join(lines)
