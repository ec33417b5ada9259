"""Preparations: registered steps that turn a dataset's published files into what its import format reads, when
they are not in it already. A catalogue entry names one (`prepare: {step: ..., options: ...}`); adding a step is a
function here and one line in PREPARATIONS.

The output is made in a private folder and renamed into place, stamped with the step, its options and the sha256 of
every input, so it is made again only when one of those changed."""

from __future__ import annotations

import csv
import gzip
import json
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from evalctl.atomic import replace_dir, staging_dir
from evalctl.config_files import SpecError
from evalctl.downloads import sha256_of
from evalctl.errors import Failure
from evalctl.registry import Registry

if TYPE_CHECKING:
    from evalctl.datasets.catalogue import Dataset

STAMP = "PREPARED.stamp"  # not a .json: a folder of JSON pages is read whole
# Bumped when a step's output changes for the same inputs, so caches made by an older step are made again.
VERSION = 1


class PreparationError(Failure):
    pass


def _r_value(value: Any, where: str) -> Any:
    """An R object as JSON: a named list an object (its stored key order), an unnamed list an array, a length-1
    character vector a string, an empty named list {}."""
    if isinstance(value, dict):
        return {k: _r_value(v, f"{where}${k}") for k, v in value.items()}
    if isinstance(value, list):
        return [_r_value(v, f"{where}[[{i + 1}]]") for i, v in enumerate(value)]
    if isinstance(value, np.ndarray) and value.shape == (1,) and value.dtype.kind == "U":
        return str(value[0])
    raise PreparationError(f"{where}: an R value JSON pages do not hold ({type(value).__name__} "
                           f"{getattr(value, 'dtype', '')} {getattr(value, 'shape', '')})")


def rda_ops_pages(files: dict[str, Path], out: Path, options: dict) -> None:
    """R data files each holding one list of OPS biblio-search responses (as rOPS-style packages save them) -> one
    gzipped JSON page per element, `{prefix}_pNN.json.gz` with options `pages: {file name: prefix}`. The R reader is
    pure Python (about 1 s per 10k R objects): the files are read side by side, one process per core."""
    jobs = [(files[name], prefix, out) for name, prefix in options["pages"].items()]
    with ProcessPoolExecutor(max_workers=max(1, min(len(jobs), os.cpu_count() or 1))) as pool:
        list(pool.map(_rda_pages, *zip(*jobs)))


def _rda_pages(path: Path, prefix: str, out: Path) -> None:
    import rdata  # 1 s (pandas, xarray): only a dataset published as R data pays it

    try:
        objects = rdata.conversion.convert(rdata.parser.parse_file(path))
    except Exception as e:  # noqa: BLE001 - the reader's own words, naming the file
        raise PreparationError(f"{path}: not readable as R data ({type(e).__name__}: {e})") from None
    if len(objects) != 1 or not isinstance(pages := next(iter(objects.values())), list):
        raise PreparationError(f"{path}: expected one R list of OPS responses, found {list(objects)}")
    for i, page in enumerate(pages, 1):
        text = json.dumps(_r_value(page, f"{path.name}[[{i}]]"), indent=2, ensure_ascii=False) + "\n"
        # no file name and mtime 0 in the gzip header: the same inputs give the same bytes
        with open(out / f"{prefix}_p{i:02d}.json.gz", "wb") as raw, \
                gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as g:
            g.write(text.encode("utf-8"))


def csv_head(files: dict[str, Path], out: Path, options: dict) -> None:
    """The header and first `rows` records of the CSV `file`, values unchanged (Python's csv writer)."""
    name, rows = options["file"], int(options["rows"])
    with open(files[name], newline="", encoding="utf-8") as f, \
            open(out / options.get("as", name), "w", newline="", encoding="utf-8") as o:
        reader, writer = csv.reader(f), csv.writer(o)
        for i, row in enumerate(reader):
            if i > rows:
                break
            writer.writerow(row)


PREPARATIONS: Registry[Callable[[dict[str, Path], Path, dict], None]] = Registry("dataset preparation", {
    "rda-ops-pages": rda_ops_pages,
    "csv-head": csv_head,
})


def prepared_folder(ds: Dataset, files: dict[str, Path], dest: Path) -> Path:
    """`dest` holding the preparation's output for these inputs, made now unless its stamp says it was."""
    assert ds.prepare is not None
    if ds.prepare.step not in PREPARATIONS:
        raise SpecError(f"dataset {ds.name}: unknown preparation {ds.prepare.step!r}; one of "
                        f"{', '.join(PREPARATIONS)}")
    stamp = {"step": ds.prepare.step, "version": VERSION, "options": ds.prepare.options,
             "inputs": {name: sha256_of(p) for name, p in sorted(files.items())}}
    try:
        if json.loads((dest / STAMP).read_text()) == stamp:
            return dest
    except (OSError, ValueError):
        pass
    with staging_dir(dest) as tmp:
        PREPARATIONS.get(ds.prepare.step)(files, tmp, ds.prepare.options)
        (tmp / STAMP).write_text(json.dumps(stamp, indent=2, sort_keys=True) + "\n")
        replace_dir(tmp, dest)
    return dest
