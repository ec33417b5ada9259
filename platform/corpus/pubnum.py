"""Publication numbers: one canonical form so citations match across Lens, Espacenet and DOCDB styles.

"US 2013/0101709 A1" (Lens), "US2013101709 (A1)" (Espacenet) and "US-20130101709-A1" (DOCDB/ucid)
all become country "US", number "20130101709", kind "A1"; the matching key is country + number
("US20130101709"), kind dropped, because A1/B1/B2 of one number are the same document for citation
purposes. The rules are documented in docs/corpus-format.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_KIND_IN_PARENS = re.compile(r"\(\s*([A-Z]\d?)\s*\)\s*$")
_COUNTRY_REST = re.compile(r"^([A-Z]{2})[\s\-_]*(.+)$")
_KIND_SEPARATED = re.compile(r"[\s\-_]+([A-Z]\d?)$")
_PUNCTUATION = re.compile(r"[\s/\-_,.]")
# Optional letter prefix (D design, RE reissue, PP plant, H/T ...), digits, optional glued kind.
_BODY = re.compile(r"^([A-Z]{0,2})(\d+)([A-Z]\d?)?$")
_OTHER_BODY = re.compile(r"^[A-Z0-9]*\d[A-Z0-9]*$")


@dataclass(frozen=True)
class PubNum:
    country: str
    number: str
    kind: str | None

    @property
    def key(self) -> str:
        """The matching key: country + number, kind dropped."""
        return self.country + self.number


def parse_pubnum(raw: str) -> PubNum | None:
    """Parse one publication number; None when it does not look like one."""
    s = raw.strip().upper()
    kind = None
    m = _KIND_IN_PARENS.search(s)
    if m:
        kind, s = m.group(1), s[: m.start()].strip()
    m = _COUNTRY_REST.match(s)
    if not m:
        return None
    country, rest = m.groups()
    if kind is None:
        m = _KIND_SEPARATED.search(rest)
        if m and re.search(r"\d", rest[: m.start()]):
            kind, rest = m.group(1), rest[: m.start()]
    body = _PUNCTUATION.sub("", rest)
    m = _BODY.match(body)
    if not m:
        # Other layouts (e.g. Indian "IN00496MUM2008") are kept as written, minus punctuation.
        return PubNum(country, body, kind) if _OTHER_BODY.match(body) else None
    prefix, digits, glued_kind = m.groups()
    # Espacenet writes "KR200367531Y (Y1)": the glued letter repeats the kind, so it is dropped.
    kind = kind or glued_kind
    if country == "US":
        digits = _us_digits(prefix, digits)
    return PubNum(country, prefix + digits, kind)


def _us_digits(prefix: str, digits: str) -> str:
    # Pre-grant publications are 4-digit year + 7-digit serial; Espacenet drops the serial's leading
    # zero (US2013101709 = US 2013/0101709), so a 10-digit number starting with a year gets it back.
    if not prefix and len(digits) == 10 and digits[:2] in ("19", "20"):
        return digits[:4] + "0" + digits[4:]
    # Grants, designs and reissues are sometimes zero-padded to 8 digits (USD0854732 = US D854732).
    if len(digits) <= 8:
        return digits.lstrip("0") or "0"
    return digits


def loose_key(raw: str) -> str:
    """A deliberately lax form (country + number without zeros or kind) that different spellings of one
    number share, used only to count citations that look like in-set numbers but do not resolve."""
    p = parse_pubnum(raw)
    return p.country + p.number.replace("0", "") if p else raw.strip().upper()


def pubnum_key(raw: str) -> str | None:
    p = parse_pubnum(raw)
    return p.key if p else None


def split_pubnums(raw: str) -> list[str]:
    """Split a cell listing several numbers ("A (A1); B (B2)", "A | B", "A;;B")."""
    return [part.strip() for part in re.split(r"[;|]", raw) if part.strip()]
