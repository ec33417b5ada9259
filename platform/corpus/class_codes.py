"""CPC and IPC codes, parsed into section / class / subclass / main group levels.

Accepted spellings: "A23L1/0067", "A23L 1/0067", WIPO's packed "C07D41700" / "A61K031426"
(3-digit main group then subgroup) and the full packed "A61K0031426000" (4 + 6 digits), main-group
only "E03D9", subclass only "A61K". Everything is stored as "A61K31/426", "E03D9" or "A61K".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SUBCLASS = r"([A-HY]\d{2}[A-Z])"
_SLASHED = re.compile(_SUBCLASS + r"\s*(\d{1,4})\s*/\s*(\d{1,6})$")
_PACKED_FULL = re.compile(_SUBCLASS + r"(\d{4})(\d{6})$")
_PACKED_WIPO = re.compile(_SUBCLASS + r"(\d{3})(\d{2,4})$")
_GROUP_ONLY = re.compile(_SUBCLASS + r"(\d{1,4})$")
_SUBCLASS_ONLY = re.compile(_SUBCLASS + r"$")
# Trailing annotations some exports add, e.g. "A23L1/00 (2013.01)" or "A23L1/00 A I".
_ANNOTATION = re.compile(r"\s*(\(\d{4}\.\d{2}\)|\s[A-Z]\s?[A-Z]?)$")


@dataclass(frozen=True)
class ClassCode:
    """One normalised code; the levels are prefixes of it."""

    code: str

    @property
    def section(self) -> str:  # A
        return self.code[0]

    @property
    def klass(self) -> str:  # A61 ("IPC3")
        return self.code[:3]

    @property
    def subclass(self) -> str:  # A61K
        return self.code[:4]

    @property
    def group(self) -> str | None:  # A61K31 (main group), None for a bare subclass
        return self.code.split("/")[0] if len(self.code) > 4 else None

    def level(self, name: str) -> str | None:
        return {"section": self.section, "class": self.klass, "subclass": self.subclass,
                "group": self.group, "code": self.code}[name]


LEVELS = ("section", "class", "subclass", "group", "code")


def parse_code(raw: str) -> ClassCode | None:
    s = _ANNOTATION.sub("", raw.strip().upper())
    if m := _SLASHED.match(s):
        sub, main, subgroup = m.groups()
    elif m := _PACKED_FULL.match(s):
        sub, main, subgroup = m.groups()
        subgroup = subgroup.rstrip("0").ljust(2, "0")
    elif m := _PACKED_WIPO.match(s):
        sub, main, subgroup = m.groups()
    elif m := _GROUP_ONLY.match(s):
        return ClassCode(m.group(1) + str(int(m.group(2))))
    elif m := _SUBCLASS_ONLY.match(s):
        return ClassCode(m.group(1))
    else:
        return None
    return ClassCode(f"{sub}{int(main)}/{subgroup}")


def split_codes(raw: str) -> list[str]:
    """Split a cell of codes: Lens ";;", Espacenet "; ", WIPO " | ", or commas."""
    return [p.strip() for p in re.split(r"[;|,]", raw) if p.strip()]
