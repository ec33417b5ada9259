"""Shared bits of the corpus tests: an isolated cache, fixture paths, the shared sample folder."""

from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
# The sibling shared/ checkout (../shared beside the repository); tests using it skip when it is absent.
SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

needs_shared = pytest.mark.skipif(not SHARED_DATA.is_dir(), reason=f"{SHARED_DATA} not present")


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    """Every test gets its own cache root, so corpora never leak between tests or into ~/.cache."""
    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"
