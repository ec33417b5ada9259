"""Real public data for the tests, asked of evalctl's dataset catalogue (configs/datasets/): the repository holds
no copy of anyone's data. Each name below is a Path to where the session's dataset cache keeps a file; the first
test that reads it fetches the dataset (on CI from the offline mirror EVALCTL_DATA_MIRROR, else from its published
URL), verified by sha256. Without network and mirror that test fails with evalctl's own message naming the dataset,
the URL and the mirror setting: never skipped.

A test module that reads these without a node or a model is marked `data` (left out of the unit tier, which reads
only records the tests write themselves); a unit test that reads one fails, naming the dataset."""

from __future__ import annotations

import functools
from pathlib import Path, PosixPath

from evalctl import paths

# The tests' dataset cache, fixed when the session starts: tests point EVALCTL_CACHE at folders of their own, and
# each would otherwise fetch again.
ROOT = paths.cache_root() / "datasets"
EXCERPTS = ROOT.parent / "test-excerpts"
running_unit_test: list[str] = []  # the unit test now running (tests/conftest.py), which must read no dataset


@functools.cache
def _fetched(dataset: str):
    from evalctl.datasets.catalogue import get_dataset
    from evalctl.datasets.fetch import fetch

    if running_unit_test:
        raise RuntimeError(f"{running_unit_test[0]} is a unit test but reads the dataset {dataset}: write the records "
                           "it needs in the test, or mark its module `data`")
    return fetch(get_dataset(dataset), root=ROOT)


class DataFile(PosixPath):
    """A Path that makes sure its dataset is fetched before anything reads it: its parts are what every use of a
    Path reads (opening, listing, naming it, or making a plain Path of it)."""

    def __new__(cls, path, ready=None):
        self = super().__new__(cls, path)
        self._ready = ready
        return self

    @property
    def _parts(self):
        ready = self.__dict__.get("_ready")
        if ready is not None:
            ready()
        return self.__dict__["_stored_parts"]

    @_parts.setter
    def _parts(self, value):
        self.__dict__["_stored_parts"] = value

    def _make_child(self, args):  # a path inside it: the same dataset, asked for when that path is used
        drv, root, parts = self._parse_args(args)
        drv, root, parts = self._flavour.join_parsed_parts(self._drv, self._root, self.__dict__["_stored_parts"],
                                                           drv, root, parts)
        child = self._from_parsed_parts(drv, root, parts)
        child._ready = self.__dict__.get("_ready")
        return child


def dataset_file(dataset: str, name: str) -> Path:
    """One published file of the dataset."""
    return DataFile(ROOT / dataset / "files" / name, lambda: _fetched(dataset))


def dataset_source(dataset: str, name: str | None = None) -> Path:
    """What the import reads of a dataset with a preparation: its prepared folder, or one file in it."""
    return DataFile(ROOT / dataset / "prepared" / (name or ""), lambda: _fetched(dataset))


def excerpt(dataset: str, name: str, lines: list[int], eol: bytes, final: bool, as_name: str) -> Path:
    """Some physical lines of a published file (split on its own line end, counted from 0 = the header), bytes
    unchanged: a small real sample with the rows a test needs."""
    dest = EXCERPTS / as_name  # a plain Path: making the file must not ask for it again

    def make() -> None:
        if dest.exists():
            return
        parts = dataset_file(dataset, name).read_bytes().split(eol)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.tmp")
        tmp.write_bytes(eol.join(parts[i] for i in lines) + (eol if final else b""))
        tmp.replace(dest)

    return DataFile(dest, make)


def _span(*parts: int | tuple[int, int]) -> list[int]:
    return [i for p in parts for i in (range(p[0], p[1] + 1) if isinstance(p, tuple) else (p,))]


USPTO = dataset_file("uspto-grants-2019", "patent_grants.csv")  # 150 grants: title, abstract, claims
USPTO_60 = dataset_source("uspto-grants-2019-60", "patent_grants_60.csv")
LENS = dataset_file("lens-pizza-1000", "pizza_lens_1000_raw.csv")
ESPACENET = dataset_file("espacenet-pizza-2013-2014", "pizza_sliced_20132014_274.csv")
WIPO = dataset_file("wipo-ritonavir", "ritonavir.csv")
OPS = dataset_source("ops-pizza-1990-2015")  # 31 OPS pages, the quickstart's

# The header, the first 6 rows, a row with two publication numbers, and the six records whose citations resolve
# inside the file: 12 records, 3 citation queries. CR line ends and non-UTF-8 bytes as published.
ESPACENET_SAMPLE = excerpt("espacenet-pizza-2013-2014", "pizza_sliced_20132014_274.csv",
                           _span((0, 6), 17, 100, 121, 206, 222, 234), b"\r", False, "espacenet_pizza_sample.csv")
# rows 1-12, 842-848 (IT numbers published as both A1 and U1) and 938 (a non-UTF-8 byte in the title)
LENS_SAMPLE = excerpt("lens-pizza-1000", "pizza_lens_1000_raw.csv", _span((0, 12), (842, 848), 938), b"\r", False,
                      "lens_pizza_sample.csv")
# rows 1-13 (row 13 has old-edition IPC strings) and 23-24 (Indian numbers such as IN00496MUM2008)
WIPO_SAMPLE = excerpt("wipo-ritonavir", "ritonavir.csv", _span((0, 13), 23, 24), b"\n", True,
                      "wipo_ritonavir_sample.csv")
# three utility grants with short claims and the first design patent
USPTO_SAMPLE = excerpt("uspto-grants-2019", "patent_grants.csv", _span(0, 3, 8, 11, 20), b"\n", True,
                       "uspto_grants_sample.csv")
# the parser's sample output: its first 3 rows and row 17 (US10360345, also in USPTO)
USPTO_OTHER_4 = excerpt("uspto-grants-2019-sample", "sample_output.csv", _span((0, 3), 17), b"\n", True,
                        "sample_output_4.csv")
