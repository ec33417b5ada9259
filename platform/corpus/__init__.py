"""Corpus room: import formats -> validated patent records -> the corpus store; qrels, label sets, views."""
