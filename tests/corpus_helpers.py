"""Shared bits of the corpus tests: an isolated cache, and the files they import by name: small real samples
(tests/real_data.py, cut from datasets of the catalogue) and one Espacenet export the tests write themselves."""

import tempfile
from pathlib import Path

import pytest

from real_data import ESPACENET_SAMPLE, LENS_SAMPLE, USPTO_SAMPLE, WIPO_SAMPLE

# An Espacenet export made by hand with Espacenet's header: one row per problem kind (a good row, a truncated row, no
# publication number, no title, a duplicate number, non-UTF-8 bytes in the title, an unparsable IPC code, an
# unparsable cited number, an impossible date (31/02), and a good row citing the first row by its second number).
ESPACENET_COLUMNS = (
    b'Title',
    b'Publication number',
    b'Publication date',
    b'Inventor(s)',
    b'Applicant(s)',
    b'International classification',
    b'Cooperative Patent Classification',
    b'Application number',
    b'Date of application',
    b'Priority number(s)',
    b'Patents cited in the search report',
    b'Literature cited in the search report',
    b'Patents cited during examination',
    b'Literature cited during examination',
    b'Other patent citations',
    b'Other literature citations',
    b'Patents used in opposition',
    b'Literature used in opposition',
    b'Patents cited by the applicant',
    b'Literature cited by the applicant',
    b'International search citation',
    b'International search NPL citation',
    b'Supplementary international search citation',
    b'Supplementary international search NPL citation',
)
ESPACENET_BROKEN = (
    b'PIZZA BOX,KR20140005697 (U); KR200476323 (Y1),06/11/2014,,,B65D5/49; B65D85/36,,,,,,,,,,,,,,,,,,',
    b'Truncated row,KR20140000681 (U),04/02/2014',
    b'No number,,04/02/2014,,,,,,,,,,,,,,,,,,,,,',
    b',KR20140006240 (U),12/12/2014,,,B65D5/18,,,,,,,,,,,,,,,,,,',
    b'PIZZA BOX again,KR20140005697 (U),06/11/2014,,,,,,,,,,,,,,,,,,,,,',
    b'Pizza \xff\xfe oven,KR20130006269 (U),30/10/2013,,,A47J27/00,,,,,,,,,,,,,,,,,,',
    b'Pizza liner,PH22014000369 (Y1),25/07/2014,,,B65D5/18; NOTACODE,B65D5/36,,,,,,,,,,,,,,,,,',
    b'Pizza bag,KR20130002692 (U),06/05/2013,,,A47J47/14,,,,,12345 (A); US2013068830 (A1),,,,,,,,,,,,,',
    b'Rice pizza,KR20140142438 (A),31/02/2014,,,A21D6/00,,,,,,,,,,,,,,,,,,',
    b'Pizza box cover,US2014000001 (A1),02/01/2014,,,B65D5/64,,,,,KR200476323 (Y1),,,,,,,,,,,,,',
)


class _Files:
    """`FIXTURES / name`: the file of that name."""

    def __init__(self):
        self._written = Path(tempfile.mkdtemp(prefix="evalctl-test-files-"))
        self._named = {"espacenet_pizza_sample.csv": ESPACENET_SAMPLE, "lens_pizza_sample.csv": LENS_SAMPLE,
                       "uspto_grants_sample.csv": USPTO_SAMPLE, "wipo_ritonavir_sample.csv": WIPO_SAMPLE}

    def __truediv__(self, name: str) -> Path:
        if name == "espacenet_broken.csv":
            path = self._written / name
            path.write_bytes(b"\n".join((b",".join(ESPACENET_COLUMNS), *ESPACENET_BROKEN, b"")))
            return path
        return self._named[name]


FIXTURES = _Files()


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    """Every test gets its own cache root, so corpora never leak between tests or into ~/.cache."""
    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"
