"""Declared datasets: the catalogue (configs/datasets/), fetching and verifying their files, preparing them for import."""
