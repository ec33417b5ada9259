"""The ids a file made elsewhere names, checked against what evalctl holds (`evalctl runs import`, `qrels import`).

A few unknown ids are ordinary: a patent dropped from the landscape since the other system indexed it, a query
the qrels set leaves out. Many mean something else: a file of another corpus, or ids written another way
(publication numbers with and without kind codes), whose scores would be wrong rather than low. So the rows naming
an unknown query or document are dropped and counted (in the stored manifest and on the terminal, never silently)
up to a stated share of the file's rows; past it the import is refused, naming the counts and a few of the ids,
before anything is written.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TypeVar

from evalctl.corpus.store import Corpus
from evalctl.errors import BadInput

R = TypeVar("R")
DEFAULT_MAX_UNKNOWN_SHARE = 0.01  # of the file's rows; an option of both import commands
EXAMPLES = 5  # unknown ids a message and the manifest name, of each kind


class UnknownIds(BadInput, ValueError):
    """More of a file's rows name unknown ids than its import allows; nothing was imported."""


def document_ids(corpus: Corpus) -> frozenset[str]:
    """The ids of the corpus's records: what a run or a judgment may name as a document."""
    return frozenset(r.id for r in corpus.records(columns=()))


@dataclass(frozen=True)
class IdCheck:
    """What the check found: counts of rows (each dropped row counted once, under its query when both are
    unknown) and the distinct unknown ids, in file order."""

    rows: int
    unknown_query_rows: int
    unknown_document_rows: int
    unknown_queries: tuple[str, ...]
    unknown_documents: tuple[str, ...]
    max_share: float

    @property
    def dropped(self) -> int:
        return self.unknown_query_rows + self.unknown_document_rows

    @property
    def share(self) -> float:
        return self.dropped / self.rows if self.rows else 0.0

    def to_manifest(self) -> dict:
        return {"rows": self.rows, "max_unknown_share": self.max_share, "dropped_rows": self.dropped,
                "unknown_query_ids": len(self.unknown_queries), "unknown_query_rows": self.unknown_query_rows,
                "unknown_document_ids": len(self.unknown_documents),
                "unknown_document_rows": self.unknown_document_rows,
                "examples": {"query": list(self.unknown_queries[:EXAMPLES]),
                             "document": list(self.unknown_documents[:EXAMPLES])}}


def describe(check: dict) -> str:
    """A check as a manifest keeps it (IdCheck.to_manifest) in words, e.g. "2 unknown query ids in 40 rows (Q7, Q9),
    3 unknown document ids in 3 rows (X1, X2, X3)": what the refusal and both import commands print."""
    parts = [f"{n} unknown {kind} ids in {rows} rows ({', '.join(check['examples'][kind])}"
             + (", ...)" if n > EXAMPLES else ")")
             for kind, n, rows in (("query", check["unknown_query_ids"], check["unknown_query_rows"]),
                                   ("document", check["unknown_document_ids"], check["unknown_document_rows"])) if n]
    return ", ".join(parts) or "no unknown id"


@dataclass(frozen=True)
class KnownIds:
    """The ids a file may name, where they come from (for messages) and the share of unknown rows it may have."""

    queries: Collection[str]
    documents: Collection[str]
    where: str  # e.g. "qrels set 'citations' of corpus 'pizza'"
    max_share: float = DEFAULT_MAX_UNKNOWN_SHARE

    def keep(self, rows: Sequence[R], ids: Callable[[R], tuple[str, str]], what: str) -> tuple[list[R], IdCheck]:
        """The rows whose (query id, document id) `ids` gives are both known, and the check; UnknownIds, naming
        `what` (the file), when more than `max_share` of the rows are not."""
        kept: list[R] = []
        queries: dict[str, None] = {}  # dicts: distinct ids in file order
        documents: dict[str, None] = {}
        query_rows = document_rows = 0
        for row in rows:
            q, d = ids(row)
            if q not in self.queries:
                queries[q] = None
                query_rows += 1
            elif d not in self.documents:
                documents[d] = None
                document_rows += 1
            else:
                kept.append(row)
        check = IdCheck(len(rows), query_rows, document_rows, tuple(queries), tuple(documents), self.max_share)
        if check.share > self.max_share:
            raise UnknownIds(f"{what}: {check.dropped} of {check.rows} rows ({check.share:.1%}) name ids that are not "
                             f"in {self.where}: {describe(check.to_manifest())}; that is more than --max-unknown-share "
                             f"{self.max_share:.1%}, so nothing was imported (a file of another corpus, or ids written "
                             "another way?)")
        return kept, check
