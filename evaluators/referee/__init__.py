"""Peers as referees: trec_eval, MTEB and Pyserini score the same landscape next to evalctl."""
