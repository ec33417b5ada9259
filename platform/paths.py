"""Where evalctl keeps what it downloads and produces: never inside the source tree."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """EVALCTL_CACHE, else $XDG_CACHE_HOME/evalctl, else ~/.cache/evalctl."""
    if os.environ.get("EVALCTL_CACHE"):
        return Path(os.environ["EVALCTL_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "evalctl"


def numba_cache() -> Path:
    """Where numba keeps ranx's compiled kernels (NUMBA_CACHE_DIR): under the cache root, so a machine
    compiles them once, not once per process."""
    return cache_root() / "numba"


def opensearch_home() -> Path:
    """Downloads, assembled distribution and run directory of the managed node.

    Not under EVALCTL_CACHE, so pointing the data caches elsewhere (as tests do) never loses the node.
    As root the node runs as an unprivileged user that cannot enter /root, so its home then defaults
    to /var/cache/evalctl/opensearch.
    """
    if os.environ.get("EVALCTL_OPENSEARCH_HOME"):
        return Path(os.environ["EVALCTL_OPENSEARCH_HOME"])
    if os.geteuid() == 0:
        return Path("/var/cache/evalctl/opensearch")
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "evalctl" / "opensearch"


def config_file() -> Path:
    """User config (connection settings): EVALCTL_CONFIG, else ~/.config/evalctl/config.yaml."""
    if os.environ.get("EVALCTL_CONFIG"):
        return Path(os.environ["EVALCTL_CONFIG"])
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "evalctl" / "config.yaml"
