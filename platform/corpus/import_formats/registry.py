"""The import-format registry: `evalctl corpus import --format`, spec validation and the importer (corpus/importer.py) read it.

An entry opens a format's files: `open_<format>(paths, log) -> Source` (source.Source: the files it
reads and a stream of (where, PatentRecord | None)), reporting bad rows to the ProblemLog. A new format is
one parser module and one line below (docs/extending.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from evalctl.registry import Registry

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from evalctl.corpus.import_formats.problems import ProblemLog
    from evalctl.corpus.import_formats.source import Source

    Opener = Callable[[list[Path], ProblemLog], Source]

IMPORT_FORMATS: Registry[Opener] = Registry("import format", {
    "native": "evalctl.corpus.import_formats.native:open_native",
    "lens": "evalctl.corpus.import_formats.csv_exports:open_lens",
    "espacenet": "evalctl.corpus.import_formats.csv_exports:open_espacenet",
    "uspto": "evalctl.corpus.import_formats.csv_exports:open_uspto",
    "wipo": "evalctl.corpus.import_formats.csv_exports:open_wipo",
    "beir": "evalctl.corpus.import_formats.beir:open_beir",
    "dapfam": "evalctl.corpus.import_formats.dapfam:open_dapfam",
    "ops": "evalctl.corpus.import_formats.ops:open_ops",
})
