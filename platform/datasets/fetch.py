"""A declared dataset on local disk: each file downloaded once into the cache (from its URL, or from the offline
mirror EVALCTL_DATA_MIRROR), checked against its declared sha256 and size, then prepared for import (prepare.py).

The cache holds, per dataset, `files/` (the published bytes, each renamed into place only when complete and
verified), `checksums.json` (for files whose checksums are not published in advance: what their first download
gave, so a later download that differs is refused) and `prepared/` (the preparation's output, stamped with the
inputs it was made from)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from tqdm import tqdm

from evalctl.atomic import write_text
from evalctl.datasets.catalogue import Dataset, DatasetFile, get_dataset
from evalctl.datasets.prepare import prepared_folder
from evalctl.downloads import (DEFAULT_POLICY, ChecksumMismatch, DownloadError, NotThere, Offline, Policy, download,
                               sha256_of)
from evalctl.errors import Failure
from evalctl.paths import cache_root

MIRROR = "EVALCTL_DATA_MIRROR"
CHECKSUMS = "checksums.json"


class DatasetUnavailable(Failure):
    """A dataset file that could not be fetched; names the dataset, the URL and the mirror setting."""


def datasets_root() -> Path:
    return cache_root() / "datasets"


def dataset_folder(ds: Dataset, root: Path | None = None) -> Path:
    """Where `ds` is cached: under `root`, else the cache's datasets/ folder."""
    return (root or datasets_root()) / ds.name


def mirror_setting() -> str | None:
    return os.environ.get(MIRROR) or None


def location(f: DatasetFile, mirror: str | None) -> str:
    """Where the file is fetched from: its URL, or the mirror's copy at the URL's path (a folder or an http(s)
    base URL laid out as the URL's path)."""
    if mirror is None:
        return f.url
    if mirror.startswith(("http://", "https://")):
        return mirror.rstrip("/") + "/" + quote(f.url_path)
    return (Path(mirror).expanduser().resolve() / f.url_path).as_uri()


@dataclass(frozen=True)
class Fetched:
    dataset: Dataset
    folder: Path
    files: dict[str, Path]  # file name -> its verified copy
    sources: tuple[Path, ...]  # what the import format reads

    @property
    def format(self) -> str:
        return self.dataset.format

    def provenance(self) -> dict:
        """What a corpus imported from it records: the dataset's name, licence and each published file's URL and
        sha256, so a table traces back to the bytes it came from."""
        ds = self.dataset
        return {"name": ds.name, "licence": ds.licence, "attribution": ds.attribution,
                "files": [{"url": f.url, "sha256": f.sha256 or sha256_of(self.files[f.name]),
                           "bytes": self.files[f.name].stat().st_size} for f in ds.files],
                "prepare": {"step": ds.prepare.step, "options": ds.prepare.options} if ds.prepare else None}


def recorded_checksums(ds: Dataset) -> dict[str, dict]:
    """{url: {sha256, bytes}} of the dataset's files whose checksums were recorded at their first download."""
    return _recorded(dataset_folder(ds))


def _recorded(folder: Path) -> dict[str, dict]:
    try:
        return json.loads((folder / CHECKSUMS).read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise Failure(f"{folder / CHECKSUMS}: unreadable ({e}); delete it to record the checksums again") from None


def expected(f: DatasetFile, recorded: dict[str, dict]) -> tuple[str | None, int | None]:
    """The sha256 and size a download of `f` must have: declared, else recorded at its first download."""
    seen = recorded.get(f.url, {})
    return f.sha256 or seen.get("sha256"), f.bytes if f.bytes is not None else seen.get("bytes")


def fetch_file(ds: Dataset, f: DatasetFile, *, verify: bool = False, progress: bool = False,
               policy: Policy = DEFAULT_POLICY, root: Path | None = None) -> Path:
    folder = dataset_folder(ds, root)
    dest = folder / "files" / f.name
    recorded = _recorded(folder)
    sha, size = expected(f, recorded)
    if dest.exists():
        if (size is None or dest.stat().st_size == size) and not (verify and sha and sha256_of(dest) != sha):
            return dest
        dest.unlink()  # a damaged cache file (it was complete when renamed in): fetched again
    mirror = mirror_setting()
    source = location(f, mirror)
    where = f"the mirror {MIRROR}={mirror}" if mirror else f"no mirror ({MIRROR} is not set)"
    try:
        with _bar(f"fetch {ds.name}/{f.name}", size, progress) as bar:
            digest = download(source, dest, sha256=sha, size=size, policy=policy, progress=bar)
    except ChecksumMismatch as e:
        via = f" (fetched from {source})" if source != f.url else ""
        raise DatasetUnavailable(f"dataset {ds.name}: {f.url}{via}: {str(e).removeprefix(source + ': ')}") from None
    except (Offline, NotThere) as e:
        raise DatasetUnavailable(
            f"dataset {ds.name}: cannot fetch {f.url} ({str(e).removeprefix(source + ': ')}); {where}. Connect to the network, or point {MIRROR} at a "
            "folder or http(s) URL laid out as the URL's path (e.g. a copy of a mirror on a disk); nothing was "
            "changed") from None
    except DownloadError as e:
        raise DatasetUnavailable(f"dataset {ds.name}: {e} ({where})") from None
    if f.sha256 is None and f.url not in recorded:
        recorded[f.url] = {"sha256": digest, "bytes": dest.stat().st_size}
        write_text(folder / CHECKSUMS, json.dumps(recorded, indent=2, sort_keys=True) + "\n")
    return dest


def is_imported(ds: Dataset, provenance: dict) -> bool:
    """Whether a corpus manifest's `dataset` record (Fetched.provenance) was made from this dataset's files as the
    catalogue now declares them (a checksum recorded at a first download counts as declared)."""
    recorded = recorded_checksums(ds)
    want = [{"url": f.url, "sha256": expected(f, recorded)[0]} for f in ds.files]
    got = [{"url": f.get("url"), "sha256": f.get("sha256")} for f in provenance.get("files", [])]
    prepare = {"step": ds.prepare.step, "options": ds.prepare.options} if ds.prepare else None
    return provenance.get("name") == ds.name and got == want and provenance.get("prepare") == prepare


def dataset_sources(name: str, progress: bool = False) -> Fetched:
    """The named dataset of the catalogue on local disk, fetched on first use."""
    return fetch(get_dataset(name), progress=progress)


def fetch(ds: Dataset, *, verify: bool = False, progress: bool = False, policy: Policy = DEFAULT_POLICY,
          root: Path | None = None) -> Fetched:
    """Every file of `ds` on disk and verified, prepared for import when the dataset declares a preparation."""
    files = {f.name: fetch_file(ds, f, verify=verify, progress=progress, policy=policy, root=root) for f in ds.files}
    if ds.prepare:
        out = prepared_folder(ds, files, dataset_folder(ds, root) / "prepared")
        sources = tuple(out / s for s in ds.sources) if ds.sources else (out,)
    else:
        sources = tuple(files[s] for s in (ds.sources or files))
    return Fetched(ds, dataset_folder(ds, root), files, sources)


class _bar:
    """A tqdm bar for one file (evalctl's own: it passes disable= itself), as a progress(done, total) callback."""

    def __init__(self, desc: str, total: int | None, enabled: bool):
        self.desc, self.total, self.enabled, self.bar = desc, total, enabled, None

    def __enter__(self) -> Callable[[int, int | None], None]:
        self.bar = tqdm(total=self.total, unit="B", unit_scale=True, desc=self.desc, disable=not self.enabled)
        return self._update

    def _update(self, done: int, total: int | None) -> None:
        if self.bar.total is None and total is not None:
            self.bar.total = total
        self.bar.update(done - self.bar.n)

    def __exit__(self, *exc) -> None:
        self.bar.close()
