"""`evalctl data ...`: the dataset catalogue (list, show) and fetching a dataset into the cache."""

from __future__ import annotations

import click

from evalctl.datasets.catalogue import catalogue, get_dataset
from evalctl.datasets.fetch import MIRROR, dataset_folder, expected, fetch, mirror_setting, recorded_checksums


@click.group()
def data() -> None:
    """Declared public datasets: fetched on first use, verified by sha256, converted for import."""


def _size(n: int | None) -> str:
    return "unknown until fetched" if n is None else f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n:,} bytes"


@data.command("list")
def list_cmd() -> None:
    """Every dataset of the catalogue, with its format, size and whether it is in the cache."""
    for ds in catalogue().values():
        cached = "cached" if all((dataset_folder(ds) / "files" / f.name).exists() for f in ds.files) else "not fetched"
        click.echo(f"{ds.name:28} {ds.format:10} {_size(ds.total_bytes):>22}  {cached}")


@data.command("show")
@click.argument("name")
def show(name: str) -> None:
    """A dataset's description, licence, files (URL, sha256, size) and where it is cached."""
    ds = get_dataset(name)
    recorded = recorded_checksums(ds)
    click.echo(f"{ds.name}: {' '.join(ds.description.split())}")
    click.echo(f"  import format: {ds.format}" + (f", prepared by {ds.prepare.step}" if ds.prepare else ""))
    click.echo(f"  licence: {' '.join(ds.licence.split())}")
    click.echo(f"  attribution: {ds.attribution}")
    click.echo(f"  homepage: {ds.homepage}")
    click.echo(f"  size: {_size(ds.total_bytes)}")
    if ds.checksum_note:
        click.echo(f"  checksums: {' '.join(ds.checksum_note.split())}")
    for f in ds.files:
        sha, size = expected(f, recorded)
        origin = "declared" if f.sha256 else "recorded at first download" if sha else "not known yet"
        click.echo(f"  - {f.url}\n    sha256 {sha or '-'} ({origin}), {_size(size)}")
    click.echo(f"  cache: {dataset_folder(ds)}")
    click.echo(f"  mirror: {MIRROR}={mirror_setting()}" if mirror_setting() else f"  mirror: none ({MIRROR} not set)")


@data.command("fetch")
@click.argument("names", nargs=-1, required=True)
@click.option("--verify", is_flag=True, help="Check the sha256 of files already in the cache too (fetched again on "
              "a mismatch).")
def fetch_cmd(names: tuple[str, ...], verify: bool) -> None:
    """Fetch NAMES into the cache (from their URLs, or the mirror EVALCTL_DATA_MIRROR), verify and prepare them."""
    for name in names:
        got = fetch(get_dataset(name), verify=verify, progress=True)
        click.echo(f"{name}: {len(got.files)} file(s) verified in {got.folder}; import reads "
                   + ", ".join(str(s) for s in got.sources))
