"""What a cross-landscape transfer is asked with, declared once: `evalctl transfer` generates its options from
these fields, evalctl.evaluators.tasks.transfer.transfer takes them, and a study's transfer entry declares the
ones it shares alike. Light to import (transfer.py needs pandas and scipy)."""

from __future__ import annotations

from dataclasses import dataclass

from evalctl.evaluators.scoring.significance_params import PAIRED_TESTS
from evalctl.parameters import param

METHODS = ("exact", "dense")  # brute force (no ANN noise in the test) or HNSW


@dataclass(frozen=True)
class TransferParams:
    corpus: str = param(help="The second landscape: corpus with a qrels set, indexed for every model.")
    view: str = param("TAC")
    method: str = param("exact", choices=METHODS)
    qrels: str = param("citations")
    split: str = param("test", help="Qrels split; 'all' for every query.")
    metric: str = param("ndcg@10")
    test: str = param("wilcoxon", choices=PAIRED_TESTS)
    alpha: float = param(0.05, min=0, max=1, min_open=True, max_open=True)
    k: int = 100  # hits per query of each model's run
