"""The repository holds what the project writes: code, docs and its own small test records (written inside the
test files). Other people's data is declared in the catalogue (configs/datasets/) and fetched; no copy of it is
committed, and none goes into the wheel."""

from __future__ import annotations

import subprocess

from conftest import REPO

# Files that hold data, whoever made them: a new one fails this test unless the project made it and it is listed.
DATA_SUFFIXES = (".csv", ".json", ".gz", ".rda", ".rds", ".parquet", ".jsonl", ".ndjson", ".tsv", ".xml", ".txt",
                 ".zip", ".bz2", ".xz", ".npy", ".arrow")
PROJECT_MADE: frozenset[str] = frozenset()  # repository paths of data files the project wrote itself


def data_files(paths: list[str]) -> list[str]:
    return sorted(p for p in paths if p.lower().endswith(DATA_SUFFIXES) and p not in PROJECT_MADE)


def test_no_data_file_in_the_repository_but_the_projects_own():
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    assert tracked and "README.md" in tracked
    assert data_files(tracked) == [], "data files in the repository: declare the dataset in configs/datasets/ instead"


def test_the_rule_sees_a_data_file():
    assert data_files(["tests/x/export.CSV", "samples/p01.json.gz", "docs/a.md", "configs/datasets/d.yaml"]) == [
        "samples/p01.json.gz", "tests/x/export.CSV"]
