"""Referees: trec_eval, MTEB, Pyserini and the node's own `_rank_eval` score the same landscape next to evalctl."""

REFEREES = ("trec_eval", "mteb", "pyserini", "rank-eval")  # `evalctl referee --with`, the default set: every one
