"""Publication-number normalisation, classification codes, claim splitting (pure functions)."""

import pytest

from evalctl.corpus.class_codes import parse_code
from evalctl.corpus.import_formats.fields import priority_family, split_claims
from evalctl.corpus.pubnum import parse_pubnum, pubnum_key


@pytest.mark.parametrize("raw", ["US 2013/0101709 A1", "US2013101709 (A1)", "US-20130101709-A1", "us20130101709a1"])
def test_us_pregrant_spellings_match(raw):
    p = parse_pubnum(raw)
    assert (p.key, p.kind) == ("US20130101709", "A1")


@pytest.mark.parametrize("raw,key,kind", [
    ("US 5256432 A", "US5256432", "A"),
    ("US05256432", "US5256432", None),  # zero-padded grant
    ("USD0854732", "USD854732", None),  # USPTO table's padded design number
    ("US D533981 S1", "USD533981", "S1"),  # Lens design number
    ("USRE047000", "USRE47000", None),
    ("KR200367531Y (Y1)", "KR200367531", "Y1"),  # Espacenet repeats the kind letter
    ("AU2003254711A1", "AU2003254711", "A1"),  # WIPO family member, kind glued on
    ("WO 2013/123456 A1", "WO2013123456", "A1"),
    ("EP 1234567 B1", "EP1234567", "B1"),
    ("IN00496MUM2008", "IN00496MUM2008", None),  # other layouts kept as written
])
def test_other_numbers(raw, key, kind):
    p = parse_pubnum(raw)
    assert (p.key, p.kind) == (key, kind)


@pytest.mark.parametrize("raw", ["", "pizza", "12345 (A)", "US", "US ???"])
def test_not_publication_numbers(raw):
    assert pubnum_key(raw) is None


@pytest.mark.parametrize("raw,code,levels", [
    ("A23L1/0067", "A23L1/0067", ("A", "A23", "A23L", "A23L1")),  # Lens / Espacenet
    ("A23L 1/0067", "A23L1/0067", ("A", "A23", "A23L", "A23L1")),
    ("C07D41700", "C07D417/00", ("C", "C07", "C07D", "C07D417")),  # WIPO packed
    ("A61K031426", "A61K31/426", ("A", "A61", "A61K", "A61K31")),
    ("A61K0031426000", "A61K31/426", ("A", "A61", "A61K", "A61K31")),  # full packed 4 + 6
    ("E03D9", "E03D9", ("E", "E03", "E03D", "E03D9")),  # main group only (WPI labels)
    ("A61K", "A61K", ("A", "A61", "A61K", None)),
])
def test_codes_parse_into_levels(raw, code, levels):
    c = parse_code(raw)
    assert c.code == code
    assert (c.section, c.klass, c.subclass, c.group) == levels


@pytest.mark.parametrize("raw", ["NOTACODE", "7C 07D 235:00 J", "123", "A6"])
def test_bad_codes(raw):
    assert parse_code(raw) is None


def test_claims_split_in_order_and_independence():
    text = ("[1. A pizza box having a pH of about 5.0, comprising: 1) a lid;,2) a base.,"
            "2. The box of claim 1, wherein the lid folds.,3. A method of making a pizza box.]")
    claims = split_claims(text)
    assert [c.independent for c in claims] == [True, False, True]
    assert claims[0].text.startswith("A pizza box") and "2) a base" in claims[0].text
    assert claims[1].text == "The box of claim 1, wherein the lid folds."


def test_unnumbered_claim_text_stays_one_claim():
    assert [c.text for c in split_claims("An ornamental design for a pizza box.")] == ["An ornamental design for a pizza box."]


def test_priority_family_ignores_dates_and_order():
    a = priority_family("US 201161550506 P 20111024;;US 29762081 A 19810831")
    b = priority_family("US 29762081 A 19810831;;US 201161550506 P 20111024")
    assert a == b and a.startswith("prio:")
    assert priority_family("") is None
