"""Label sets for classification and clustering, derived from a corpus (configs/label_sets.yaml).

A label set picks a source (CPC, IPC or the free landscape labels) and a code level; labels seen on
fewer than `min_support` records are dropped, and so are records left without any label.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Literal

from evalctl.corpus.store import Corpus
from evalctl.corpus.patent_record import PatentRecord
from evalctl.specs import SpecError, build, load_yaml


@dataclass(frozen=True)
class LabelSetSpec:
    name: str
    source: Literal["cpc", "ipc", "labels"]
    level: Literal["section", "class", "subclass", "group", "code"] | None = None  # for cpc / ipc
    min_support: int = 1
    description: str = ""

    def __post_init__(self):
        if (self.source == "labels") != (self.level is None):
            raise ValueError(f"label set {self.name!r}: cpc/ipc need a level; landscape labels take none")
        if self.min_support < 1:
            raise ValueError(f"label set {self.name!r}: min_support must be >= 1")

    def labels_of(self, record: PatentRecord) -> list[str]:
        """This record's labels before the support filter, deduplicated, in record order."""
        if self.source == "labels":
            return list(dict.fromkeys(record.labels))
        codes = record.cpc if self.source == "cpc" else record.ipc
        return list(dict.fromkeys(v for c in codes if (v := c.level(self.level))))


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
