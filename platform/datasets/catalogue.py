"""The dataset catalogue: one YAML file per dataset in configs/datasets/ (data, not code), as BEIR, MTEB and
ir_datasets declare theirs. An entry says where each file is published (a URL pinned to a commit or revision), its
sha256 and size where they are known in advance, the licence and attribution, and how evalctl reads it: an import
format, and where the published files are not in that format, the registered preparation that turns them into it.
evalctl fetches a dataset on first use (datasets/fetch.py); the repository holds no copy of anyone's data."""

from __future__ import annotations

import functools
import re
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalctl.config_files import SpecError, build, configs_dir, load_yaml
from evalctl.names import check_name

_SHA = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class DatasetFile:
    url: str  # pinned: a commit or revision in the URL, never a branch
    sha256: str | None = None  # None: not published in advance; the first download records it (fetch.py)
    bytes: int | None = None
    name: str = ""  # its file name in the dataset's folder (default: the URL's last part)

    def __post_init__(self):
        parts = urllib.parse.urlsplit(self.url)
        if parts.scheme not in ("https", "http") or not parts.netloc or not parts.path.strip("/"):
            raise ValueError(f"url {self.url!r} is not an http(s) URL of a file")
        if self.sha256 is not None and not _SHA.match(self.sha256):
            raise ValueError(f"sha256 of {self.url} must be 64 lower-case hex digits, got {self.sha256!r}")
        if not self.name:
            object.__setattr__(self, "name", urllib.parse.unquote(parts.path.rsplit("/", 1)[-1]))
        check_name(self.name, f"file name of {self.url}")

    @property
    def url_path(self) -> str:
        """The URL's path without its leading slash: where an offline mirror keeps the file."""
        return urllib.parse.unquote(urllib.parse.urlsplit(self.url).path).lstrip("/")


@dataclass(frozen=True)
class Preparation:
    """A registered step (datasets/prepare.py) that turns the fetched files into what the import format reads."""

    step: str
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Dataset:
    name: str
    description: str
    licence: str
    attribution: str
    homepage: str
    format: str  # an import format (corpus/import_formats/registry.py)
    files: tuple[DatasetFile, ...]
    # the file names the import reads (default: every fetched file, or the preparation's output)
    sources: tuple[str, ...] = ()
    prepare: Preparation | None = None
    # for a dataset whose checksums are not published: why, shown by `evalctl data show`
    checksum_note: str = ""

    def __post_init__(self):
        check_name(self.name, "dataset name")
        names = [f.name for f in self.files]
        if len(set(names)) != len(names):
            raise ValueError(f"two files of dataset {self.name} share a name: {names}")
        unknown = [s for s in self.sources if s not in names]
        if unknown and not self.prepare:
            raise ValueError(f"sources {unknown} of dataset {self.name} are not among its files {names}")

    def file(self, name: str) -> DatasetFile:
        return next(f for f in self.files if f.name == name)

    @property
    def total_bytes(self) -> int | None:
        sizes = [f.bytes for f in self.files]
        return None if None in sizes else sum(sizes)  # type: ignore[arg-type]


class UnknownDataset(SpecError):
    pass


def catalogue_dir() -> Path:
    return configs_dir() / "datasets"


@functools.cache
def _entries(folder: Path) -> dict[str, Dataset]:
    out: dict[str, Dataset] = {}
    for path in sorted(folder.glob("*.yaml")):
        where = f"{path.relative_to(folder.parent.parent) if folder.parent.parent in path.parents else path}"
        data = load_yaml(path)
        ds = build(Dataset, data, where)
        if ds.name != path.stem:
            raise SpecError(f"{where}: name {ds.name!r} must be the file's name ({path.stem})")
        out[ds.name] = ds
    return out


def catalogue() -> dict[str, Dataset]:
    """Every declared dataset by name."""
    return _entries(catalogue_dir())


def get_dataset(name: str) -> Dataset:
    datasets = catalogue()
    if name not in datasets:
        raise UnknownDataset(f"unknown dataset {name!r}; the catalogue has {', '.join(datasets)} "
                             "(`evalctl data list`)")
    return datasets[name]
