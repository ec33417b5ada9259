"""Shared bits of the corpus tests: an isolated cache and the fixture folder."""

from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    """Every test gets its own cache root, so corpora never leak between tests or into ~/.cache."""
    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"
