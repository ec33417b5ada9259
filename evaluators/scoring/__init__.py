"""Runs and their numbers: stored runs, the one door to ranx, metrics, significance tests and comparison tables."""
