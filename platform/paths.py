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


# The folders the scoring, plotting and referee libraries write: ranx imports ir_datasets (which makes
# ~/.ir_datasets/<dataset> folders) and matplotlib (font cache and config under ~/.cache and ~/.config); MTEB
# (`evalctl referee`) keeps its results cache in ~/.cache/mteb.
LIBRARY_DIRS = {"NUMBA_CACHE_DIR": numba_cache, "IR_DATASETS_HOME": lambda: cache_root() / "ir_datasets",
                "MPLCONFIGDIR": lambda: cache_root() / "matplotlib", "MTEB_CACHE": lambda: cache_root() / "mteb"}


def confine_libraries() -> None:
    """Point numba, ir_datasets, matplotlib and MTEB at folders under the cache root (unless the user set them),
    so evalctl writes nothing under $HOME outside EVALCTL_CACHE. Each reads its variable when imported or
    first used: call this first."""
    for var, folder in LIBRARY_DIRS.items():
        Path(os.environ.setdefault(var, str(folder()))).mkdir(parents=True, exist_ok=True)


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


def _config_home() -> Path:
    return Path(os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")) / "evalctl"


def config_file() -> Path:
    """User config (connection settings): EVALCTL_CONFIG, else ~/.config/evalctl/config.yaml."""
    if os.environ.get("EVALCTL_CONFIG"):
        return Path(os.environ["EVALCTL_CONFIG"])
    return _config_home() / "config.yaml"


def user_models_dir() -> Path:
    """The user's own model specs, read beside the package's: EVALCTL_MODELS_DIR, else
    $XDG_CONFIG_HOME/evalctl/models (~/.config/evalctl/models)."""
    if os.environ.get("EVALCTL_MODELS_DIR"):
        return Path(os.environ["EVALCTL_MODELS_DIR"]).expanduser()
    return _config_home() / "models"
