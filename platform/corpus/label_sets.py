"""Label sets for classification and clustering, derived from a corpus (configs/label_sets.yaml).

A label set picks a source (CPC, IPC or the free landscape labels: LABEL_SOURCES) and a code level; labels
seen on fewer than `min_support` records are dropped, and so are records left without any label.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from evalctl.corpus.store import Corpus
from evalctl.corpus.patent_record import PatentRecord
from evalctl.registry import Registry
from evalctl.config_files import SpecError, build, load_yaml


@dataclass(frozen=True)
class LabelSource:
    """Where a label set's labels come from: `labels(record, level)` in record order (level: None unless
    `levelled`, then one of the code levels)."""

    labels: Callable[[PatentRecord, str | None], Iterable[str]]
    levelled: bool  # codes cut to a level (section ... group), which the label set must name


def _codes(field: str) -> LabelSource:
    return LabelSource(lambda r, level: (v for c in getattr(r, field) if (v := c.level(level))), levelled=True)


# A new source is one entry here (docs/extending.md); label sets themselves are configs/label_sets.yaml.
LABEL_SOURCES: Registry[LabelSource] = Registry("label source", {
    "cpc": _codes("cpc"),
    "ipc": _codes("ipc"),
    "labels": LabelSource(lambda r, level: r.labels, levelled=False),  # free landscape labels
})


@dataclass(frozen=True)
class LabelSetSpec:
    name: str
    source: str  # a name in LABEL_SOURCES
    level: Literal["section", "class", "subclass", "group", "code"] | None = None  # for cpc / ipc
    min_support: int = 1
    description: str = ""

    def __post_init__(self):
        if self.source not in LABEL_SOURCES:
            raise ValueError(f"label set {self.name!r}: unknown source {self.source!r}; one of "
                             f"{', '.join(LABEL_SOURCES)}")
        if LABEL_SOURCES.get(self.source).levelled != (self.level is not None):
            raise ValueError(f"label set {self.name!r}: cpc/ipc need a level; landscape labels take none")
        if self.min_support < 1:
            raise ValueError(f"label set {self.name!r}: min_support must be >= 1")

    def labels_of(self, record: PatentRecord) -> list[str]:
        """This record's labels before the support filter, deduplicated, in record order."""
        return list(dict.fromkeys(LABEL_SOURCES.get(self.source).labels(record, self.level)))


def load_label_sets(path: str = "label_sets.yaml") -> dict[str, LabelSetSpec]:
    doc = load_yaml(path)
    where = f"configs/{path}"
    if not isinstance(doc, dict) or set(doc) != {"label_sets"} or not isinstance(doc["label_sets"], dict):
        raise SpecError(f"{where}: expected exactly one top-level key 'label_sets' mapping names to label sets")
    return {str(name): build(LabelSetSpec, {"name": str(name), **(body or {})}, f"{where}: label_sets.{name}")
            for name, body in doc["label_sets"].items()}


def label_support(corpus: Corpus, spec: LabelSetSpec) -> Counter:
    return Counter(label for r in corpus.records() for label in spec.labels_of(r))


def label_matrix(corpus: Corpus, label_set: LabelSetSpec | str) -> tuple[list[str], list[list[str]]]:
    """(record ids, their labels) for records with at least one label of enough support.

    Two streaming passes over the corpus: count support, then collect.
    """
    spec = load_label_sets()[label_set] if isinstance(label_set, str) else label_set
    support = label_support(corpus, spec)
    ids, labels = [], []
    for r in corpus.records():
        kept = [lab for lab in spec.labels_of(r) if support[lab] >= spec.min_support]
        if kept:
            ids.append(r.id)
            labels.append(kept)
    return ids, labels
