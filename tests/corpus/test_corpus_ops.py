"""EPO OPS biblio JSON on the real pages of the dataset ops-pizza-1990-2015: OPS's shapes, languages,
a broken page, the citation-phase filter and family-level documents in qrels.

Expected counts are the ones verified with a separate reader when the pages were first converted.
"""

import gzip
import json
import shutil
from collections import Counter

import pytest
from click.testing import CliRunner
from corpus_helpers import isolated_cache  # noqa: F401

from evalctl.cli.main import cli
from evalctl.corpus.importer import import_corpus
from evalctl.corpus.import_formats.ops import _items, _text, ops_files, read_page
from evalctl.corpus.import_formats.problems import CorpusImportError, ProblemLog
from evalctl.corpus.qrels import QrelsSpec, build_citation_qrels
from real_data import OPS

pytestmark = pytest.mark.data  # real exports, fetched through the catalogue (tests/real_data.py)

PAGES = OPS
SEARCH_REPORTS = ("search_report", "international_search")


def _raw(page: str, row: int) -> dict:
    return read_page(PAGES / page, ProblemLog())[row - 1]


@pytest.fixture
def publications():
    return import_corpus("ops", [PAGES], name="ops-pub").corpus


@pytest.fixture
def families():
    return import_corpus("ops", [PAGES], name="ops-fam", documents="family").corpus


def test_shapes_of_ops_json():
    assert _items(None) == [] and _items({}) == [] and _items({"a": 1}) == [{"a": 1}] and _items([1, 2]) == [1, 2]
    assert _text({"$": "x", "@lang": "en"}) == "x"
    assert _text({"@lang": "en", "p": [{"$": "one"}, {"$": "two"}]}) == "one\ntwo"
    assert _text({}) is None


def test_real_pages_counts_match_source(publications):
    m = publications.manifest
    recs = list(publications.records())
    # 13 publications (in 12 of the 2,282 families) have neither title nor abstract in any language:
    # reported, not imported.
    assert m["rows_read"] == 2986 and len({r.family for r in recs}) == 2282 - 12
    assert m["problems"] == {"missing_field": 13} and m["record_count"] == 2986 - 13
    assert sum(r.title_lang == "en" for r in recs) == 2952 and sum(r.abstract_lang == "en" for r in recs) == 2465
    assert sum(r.english_text("title", "abstract") for r in recs) == 2453
    assert m["fields"]["cpc"] == 1804 - 1 and m["fields"]["ipc"] == 2860 - 13  # minus codes of text-less ones
    assert {c.type for r in recs for c in r.citations} == {"search_report", "international_search", "applicant",
                                                            "examination", "opposition"}
    assert m["source"]["format"] == "ops" and len(m["source"]["files"]) == 31 and m["documents"] == "publication"


def test_single_object_array_and_empty_elements(publications):
    recs = {r.id: r for r in publications.records()}
    # An abstract in two languages (array, "ol" first) and parties as {}: English text kept, no applicants.
    raw = _raw("pizza_2011-2015_p01.json.gz", 7)
    assert raw["bibliographic-data"]["parties"] == {} and isinstance(raw["abstract"], list)
    en = next(a for a in raw["abstract"] if a["@lang"] == "en")["p"]["$"]
    kr = recs["KR20150144232"]
    assert kr.abstract == " ".join(en.split()) and kr.abstract_lang == "en" and kr.applicants == ()
    assert kr.family_id == raw["@family-id"] == "55084266"
    # One abstract as an object, one IPCR entry as an object (subclass-level and slashed codes normalised).
    ca = recs["CA2935333"]
    one_ipcr = _raw("pizza_2011-2015_p01.json.gz", 1)["bibliographic-data"]["classifications-ipcr"]["classification-ipcr"]
    assert isinstance(one_ipcr, dict) and one_ipcr["text"]["$"].startswith("F26B   7/    00")
    assert [c.code for c in ca.ipc] == ["F26B7/00"]
    assert ca.abstract and ca.abstract_lang == "en"
    # A single citation (object, not array) with its DOCDB number and phase.
    us = recs["US4959905"]
    cit = _raw("pizza_1990-2000_p02.json.gz", 61)["bibliographic-data"]["references-cited"]["citation"]
    docdb = next(d for d in cit["patcit"]["document-id"] if d["@document-id-type"] == "docdb")
    assert isinstance(cit, dict) and [(c.target, c.type) for c in us.citations] == [
        (docdb["country"]["$"] + docdb["doc-number"]["$"], "search_report")]


def test_ipcr_cpc_applicants_and_dates_on_a_real_page(publications):
    raw = _raw("pizza_1990-2000_p01.json.gz", 1)
    rec = next(r for r in publications.records() if r.id == raw["@country"] + raw["@doc-number"])
    assert [c.code for c in rec.ipc] == ["A21C9/04", "A21C9/08", "A21C11/00", "A21D13/00"]  # from "A21C   9/    04  A I"
    assert [c.code for c in rec.cpc] == ["A21C9/04", "A21C9/083", "A21C11/00", "A21C11/006", "A21D13/007"]
    assert rec.publication_date.isoformat() == "2000-11-25" and rec.priority_date.isoformat() == "1997-08-19"
    us = next(r for r in publications.records() if r.applicants and r.jurisdiction == "US")
    assert all("[" in a for a in us.applicants)  # the epodoc form, with its country tag


def test_record_without_english_text_is_kept_and_counted(publications):
    recs = {r.id: r for r in publications.records()}
    it = recs["ITRM940783"]  # Italian title without @lang, abstract in "ol" (original language)
    assert it.title.startswith("MODIFICHE AD UN MACCHINARIO") and (it.title_lang, it.abstract_lang) == ("und", "ol")
    no_english = [r for r in recs.values() if (r.title_lang or r.abstract_lang)
                  and not r.english_text("title") and not r.english_text("abstract")]
    assert publications.manifest["languages"]["no English text"] == len(no_english) > 0
    # A French title with an English abstract: the title stays French, recorded as such.
    fr = recs["FR2681582"]
    assert fr.title_lang == "fr" and fr.abstract_lang == "en"


def test_broken_page_loses_only_itself(tmp_path):
    pages = sorted(PAGES.glob("*.json.gz"))[:3]
    folder = tmp_path / "pages"
    folder.mkdir()
    for p in pages:
        shutil.copy(p, folder)
    good = sum(len(read_page(p, ProblemLog())) for p in pages[1:])
    data = pages[0].read_bytes()
    (folder / pages[0].name).write_bytes(data[: len(data) // 2])  # a truncated download
    (folder / "extra.json").write_text(gzip.decompress(pages[1].read_bytes()).decode()[:5000])  # cut JSON, 160 lines
    res = import_corpus("ops", [folder], name="broken")
    malformed = [p for p in res.problems if p.kind == "malformed_row"]
    assert {p.where.file for p in malformed} == {pages[0].name, "extra.json"}
    assert res.rows_read == good and len(res.corpus) == good - res.problem_counts.get("missing_field", 0)
    with pytest.raises(CorpusImportError, match="extra.json, line 160: malformed_row"):  # sorted first
        import_corpus("ops", [folder], name="strict", strict=True)


def test_published_data_response_and_plain_json(tmp_path, publications):
    """The published-data biblio shape (no ops:biblio-search), one document as an object, plain .json."""
    raw = _raw("pizza_2011-2015_p01.json.gz", 7)
    f = tmp_path / "biblio.json"
    f.write_text(json.dumps({"ops:world-patent-data": {"exchange-documents": {"exchange-document": raw}}}))
    assert ops_files([tmp_path]) == [f]
    one = list(import_corpus("ops", [f], name="one").corpus.records())
    assert one == [r for r in publications.records() if r.id == "KR20150144232"]
    # A document of a foreign shape is reported by position; the good one beside it is kept.
    bad = {**raw, "@doc-number": "1", "bibliographic-data": {**raw["bibliographic-data"], "priority-claims": "?"}}
    f.write_text(json.dumps({"ops:world-patent-data": {"exchange-documents": [
        {"exchange-document": bad}, {"exchange-document": raw}]}}))
    res = import_corpus("ops", [f], name="two")
    assert [str(p.where) for p in res.problems] == ["biblio.json, row 1"] and len(res.corpus) == 1


def test_cli_import_and_phase_filter(publications):
    out = CliRunner().invoke(cli, ["corpus", "import", "--format", "ops", "--name", "cli-ops", str(PAGES)])
    assert out.exit_code == 0, out.output
    assert "records 2973" in out.output and "title:en 2952" in out.output
    everything = build_citation_qrels(publications, QrelsSpec(name="all", query_languages=()))
    search = build_citation_qrels(publications, QrelsSpec(name="search", citation_types=SEARCH_REPORTS,
                                                          query_languages=()))
    pairs_all = {(p.query_id, p.doc_id) for p in everything.pairs}
    pairs_search = {(p.query_id, p.doc_id) for p in search.pairs}
    # SOURCE.md: 2,163 in-set pairs, one of them to a publication without text (not imported).
    assert len(pairs_all) == 2162 and pairs_search < pairs_all
    recs = {r.id: r for r in publications.records()}
    only_other = pairs_all - pairs_search
    assert only_other and all(not any(c.type in SEARCH_REPORTS for c in recs[a].citations
                                      if c.target in (b, *recs[b].aliases)) for a, b in only_other)
    out = CliRunner().invoke(cli, ["corpus", "qrels", "ops-pub", "--name", "cli-search", "--citation-type",
                                   "search_report", "--citation-type", "international_search", "--query-language", "any"])
    assert out.exit_code == 0, out.output
    assert f"; pairs {len(pairs_search)};" in out.output


def test_english_pairs_and_in_out_match_source(publications):
    q = build_citation_qrels(publications, QrelsSpec(name="en"))
    recs = {r.id: r for r in publications.records()}
    assert all(recs[x.id].title_lang in (None, "en") and recs[x.id].abstract_lang in (None, "en") for x in q.queries)
    both = [p for p in q.pairs if recs[p.query_id].english_text("title", "abstract")
            and recs[p.doc_id].english_text("title", "abstract")]
    assert len(both) == 2089
    assert Counter(p.domain for p in both) == {"IN": 1801, "OUT": 281, "UNKNOWN": 7}
    assert {x.split for x in q.queries} == {"dev", "test"}
    assert all(x.exclude == frozenset({x.id} | {r.id for r in recs.values() if r.family == recs[x.id].family})
               for x in q.queries)


def test_family_level_documents_and_qrels(publications, families):
    pubs = list(publications.records())
    fams = {r.id: r for r in families.records()}
    assert families.manifest["documents"] == "family" and families.manifest["rows_read"] == 2986
    # One record per family that has any text (12 families have none at all).
    assert len(fams) == len({r.family for r in pubs}) == 2282 - 12
    by_family = {r.family: r for r in fams.values()}
    assert len(by_family) == len(fams)
    for p in pubs:  # every publication is its family record or one of its aliases
        f = by_family[p.family]
        assert p.id == f.id or p.id in f.aliases
    # Text comes from a member with English title + abstract whenever the family has one.
    en_families = {p.family for p in pubs if p.english_text("title", "abstract")}
    assert all(by_family[f].english_text("title", "abstract") for f in en_families)
    multi = next(f for f in by_family.values() if len(f.aliases) >= 2 and f.family in en_families)
    members = [p for p in pubs if p.family == multi.family]
    assert multi.ipc == tuple(dict.fromkeys(c for m in sorted(members, key=lambda m: m.id != multi.id) for c in m.ipc))

    q = build_citation_qrels(families, QrelsSpec(name="fam"))
    assert all(x.exclude == frozenset({x.id}) for x in q.queries)  # the family is the one record
    assert all(fams[p.query_id].family != fams[p.doc_id].family for p in q.pairs)
    # Citations to any member resolve: every publication-level pair appears between the two families.
    pub_q = build_citation_qrels(publications, QrelsSpec(name="pub", query_languages=()))
    fam_q = build_citation_qrels(families, QrelsSpec(name="fam-any", query_languages=()))
    fam_pairs = {(fams[a].family, fams[b].family) for a, b in ((p.query_id, p.doc_id) for p in fam_q.pairs)}
    pub_fam = {r.id: r.family for r in pubs}
    assert {(pub_fam[p.query_id], pub_fam[p.doc_id]) for p in pub_q.pairs} <= fam_pairs
