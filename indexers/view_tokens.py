"""How long a view's texts are in a model's tokens, against what the model takes in one input: how many documents
the document-level vector truncates, which is what passages (indexers.passages) are for.

Measured once per corpus version x model (and revision) x document prompt x view, when an index gets that view's
passages, with the tokenizer that cuts them; kept in the results store (kind "view-tokens") so a report reads it
without the model or the node.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

import numpy as np

from evalctl import results_store

KIND = "view-tokens"
_BATCH = 256


@dataclass(frozen=True)
class ViewTokens:
    documents: int  # documents that render the view
    limit: int  # tokens of text the model takes in one input (after its prompt and special tokens)
    truncated: int  # documents longer than `limit`: their document vector sees only the first `limit` tokens
    median: float
    p90: float
    max: int

    @property
    def share(self) -> float:
        return self.truncated / self.documents if self.documents else 0.0


def identity(corpus_hash: str, model: str, revision: str | None, prompt: str | None, view: str) -> dict:
    return {"name": f"tokens-{view}-{model}", "corpus_hash": corpus_hash, "model": model, "revision": revision,
            "document_prompt": prompt, "view": view}


def measure(texts: Iterable[str], tokenizer, limit: int) -> ViewTokens:
    """The token counts of `texts` (no special tokens, no prompt: `limit` is net of them)."""
    texts = list(texts)
    counts = np.array([len(ids) for i in range(0, len(texts), _BATCH) for ids in tokenizer(
        texts[i:i + _BATCH], add_special_tokens=False, truncation=False, verbose=False)["input_ids"]], dtype=int)
    if not len(counts):
        return ViewTokens(0, limit, 0, 0.0, 0.0, 0)
    return ViewTokens(len(counts), limit, int((counts > limit).sum()), float(np.median(counts)),
                      float(np.percentile(counts, 90)), int(counts.max()))


def find(corpus: str, ident: dict) -> ViewTokens | None:
    res = results_store.find(KIND, corpus, ident)
    return ViewTokens(**res.manifest["tokens"]) if res else None


def record(corpus: str, ident: dict, tokens: ViewTokens) -> None:
    results_store.write(KIND, corpus, ident, {}, extra={"tokens": asdict(tokens)})


def of_run(manifest: dict) -> ViewTokens | None:
    """The document view's token lengths of a stored retrieval run's index (None: not measured: no passages of the
    view were indexed)."""
    index = manifest.get("index_identity") or {}
    return find(manifest["corpus"], identity(manifest["corpus_hash"], index.get("model"), index.get("revision"),
                                             index.get("document_prompt"), manifest["view"]))
