"""Fusion of a BM25 and a dense ranking: its settings, the neural-search pipelines (native), client-side fusion
with ranx, neural-search's fusion read into Python, and native-vs-client parity."""
