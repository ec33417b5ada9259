"""Citation qrels on real Espacenet rows: resolution, self/family exclusion, IN/OUT, splits, leakage."""

import dataclasses
import json

import pytest
from click.testing import CliRunner
from conftest import ESPACENET
from corpus_helpers import FIXTURES, isolated_cache  # noqa: F401

from evalctl.cli.main import cli
from evalctl.corpus.importer import import_corpus
from evalctl.corpus.patent_record import Citation, PatentRecord
from evalctl.corpus.qrels import QrelsSpec, build_citation_qrels, domain_label, load_qrels, split_of

pytestmark = pytest.mark.data  # real exports, fetched through the catalogue (tests/real_data.py)

REAL_PAIRS = {("WO2014193417", "US20130040016"), ("US20140037793", "US8920865"), ("GB2507064", "US20130068830")}


@pytest.fixture
def espacenet():
    return import_corpus("espacenet", [FIXTURES / "espacenet_pizza_sample.csv"], name="esp").corpus


def test_real_citations_resolve_with_normalised_numbers(espacenet):
    q = build_citation_qrels(espacenet)
    assert {(p.query_id, p.doc_id) for p in q.pairs} == REAL_PAIRS
    # All three share an IPC class (A21, A23, B65): IN.
    assert {p.domain for p in q.pairs} == {"IN"}
    assert q.manifest["citations_resolved"] == 3
    assert {x.id: x.jurisdiction for x in q.queries} == {"WO2014193417": "WO", "US20140037793": "US", "GB2507064": "GB"}
    assert all(x.exclude == frozenset({x.id}) for x in q.queries)
    # the set a build returns (not read back: a concurrent build may be replacing it) is the one stored
    stored = load_qrels(espacenet, q.name)
    assert (q.path, q.manifest, q.queries, q.pairs) == (stored.path, stored.manifest, stored.queries, stored.pairs)


def test_citing_direction_reverses_queries(espacenet):
    q = build_citation_qrels(espacenet, QrelsSpec(name="fwd", direction="citing"))
    assert {(p.query_id, p.doc_id) for p in q.pairs} == {(b, a) for a, b in REAL_PAIRS}
    both = build_citation_qrels(espacenet, QrelsSpec(name="both", direction="both"))
    assert len(both.pairs) == 6


def test_subclass_level_domain_on_real_rows(espacenet):
    q = build_citation_qrels(espacenet, QrelsSpec(name="ipc4", domain_chars=4))
    by_query = {p.query_id: p.domain for p in q.pairs}
    assert by_query["GB2507064"] == "IN"  # B65D on both sides
    assert by_query["WO2014193417"] == "IN"  # A21D on both sides
    cpc = build_citation_qrels(espacenet, QrelsSpec(name="cpc", domain_scheme="cpc", domain_chars=4))
    assert {p.domain for p in cpc.pairs} == {"IN"}  # A21D, A23D, B65D shared in CPC too
    assert cpc.manifest["spec"]["domain_scheme"] == "cpc"


def test_domain_rule():
    assert domain_label(frozenset({"A61", "B65"}), frozenset({"B65"})) == "IN"
    assert domain_label(frozenset({"A61"}), frozenset({"B65"})) == "OUT"
    assert domain_label(frozenset(), frozenset({"B65"})) == "UNKNOWN"


def _native(tmp_path, records):
    f = tmp_path / "n.jsonl"
    f.write_text("".join(json.dumps(r.to_dict()) + "\n" for r in records))
    return import_corpus("native", [f], name="n", overwrite=True).corpus


def test_family_members_never_relevant_and_excluded(espacenet, tmp_path):
    recs = {r.id: r for r in espacenet.records()}
    wo = recs["WO2014193417"]
    # A sibling in WO's family that WO cites (as family members often do) and an OUT-domain target.
    sibling = PatentRecord(id="US20140999999", family_id=wo.family, title="Sibling", ipc=wo.ipc)
    other = PatentRecord(id="EP2999999", title="Unrelated", ipc=recs["KR20140141940"].ipc)
    wo = dataclasses.replace(wo, citations=wo.citations + (Citation("US20140999999", "applicant"),
                                                           Citation("EP2999999", "examination")))
    corpus = _native(tmp_path, [*[r for k, r in recs.items() if k != wo.id], wo, sibling, other])
    q = build_citation_qrels(corpus)
    rel = q.qrels()["WO2014193417"]
    assert "US20140999999" not in rel and set(rel) == {"US20130040016", "EP2999999"}
    assert q.exclusions()["WO2014193417"] == frozenset({"WO2014193417", "US20140999999"})
    domains = {p.doc_id: p.domain for p in q.pairs if p.query_id == "WO2014193417"}
    assert domains == {"US20130040016": "IN", "EP2999999": "OUT"}  # A21 vs A23


def test_family_level_expands_to_family_members(espacenet, tmp_path):
    recs = {r.id: r for r in espacenet.records()}
    target = recs["US20130040016"]
    member = PatentRecord(id="EP2555555", family_id=target.family, title="Same family as the cited one", ipc=target.ipc)
    corpus = _native(tmp_path, [*recs.values(), member])
    pub = build_citation_qrels(corpus)
    fam = build_citation_qrels(corpus, QrelsSpec(name="fam", level="family"))
    assert set(pub.qrels()["WO2014193417"]) == {"US20130040016"}
    assert set(fam.qrels()["WO2014193417"]) == {"US20130040016", "EP2555555"}


def test_aliases_resolve_citations(tmp_path):
    res = import_corpus("espacenet", [FIXTURES / "espacenet_broken.csv"], name="b")
    q = build_citation_qrels(res.corpus)
    # The last row cites "KR200476323 (Y1)", the second number of row 1.
    assert ("US20140000001", "KR20140005697") in {(p.query_id, p.doc_id) for p in q.pairs}


def test_split_is_deterministic_and_train_pairs_do_not_leak(espacenet):
    spec = QrelsSpec(name="ft", train_fraction=0.4, dev_fraction=0.3, seed="s1")
    a = build_citation_qrels(espacenet, spec)
    b = build_citation_qrels(espacenet, spec, overwrite=True)
    assert [(x.id, x.split) for x in a.queries] == [(x.id, x.split) for x in b.queries]
    held_out = {x.id for x in a.queries if x.split != "train"}
    assert held_out  # something is held out with these fractions
    for citing, cited, _ in a.train_pairs():
        assert not ({citing, cited} & held_out)
    assert len(list(a.train_pairs())) == 3 - len(held_out)  # the 3 edges are disjoint; each held-out one goes
    many = [split_of(f"F{i}", QrelsSpec(dev_fraction=0.2)) for i in range(2000)]
    assert 0.15 < many.count("dev") / 2000 < 0.25 and "train" not in many


def test_existing_set_needs_overwrite(espacenet):
    build_citation_qrels(espacenet)
    with pytest.raises(FileExistsError):
        build_citation_qrels(espacenet)


def test_files_on_disk(espacenet):
    q = build_citation_qrels(espacenet, QrelsSpec(dev_fraction=0.0))
    assert (q.path / "qrels" / "test.tsv").read_text().splitlines()[0] == "query-id\tcorpus-id\tscore"
    assert {"pairs.parquet", "queries.parquet", "train_pairs.tsv", "manifest.json"} <= {p.name for p in q.path.iterdir()}
    assert q.manifest["corpus_hash"] == espacenet.content_hash


def test_full_espacenet_sample_via_cli():
    runner = CliRunner()
    assert runner.invoke(cli, ["corpus", "import", "--format", "espacenet", "--name", "esp", str(ESPACENET)]).exit_code == 0
    out = runner.invoke(cli, ["corpus", "qrels", "esp"])
    assert out.exit_code == 0, out.output
    assert "resolved inside the corpus 3" in out.output
    stats = runner.invoke(cli, ["corpus", "stats", "esp"])
    assert "citations (citations): queries 3" in stats.output and "IN 3 (100.0%)" in stats.output
    bad = runner.invoke(cli, ["corpus", "qrels", "esp", "--name", "x", "--dev-fraction", "1.5"])
    assert bad.exit_code != 0 and "dev_fraction" in bad.output and "Traceback" not in bad.output


# --------------------------------------------------------------------------- known-item qrels


def test_known_item_each_patent_finds_itself(espacenet, tmp_path):
    """Every rendering record is a query relevant to itself only; its family's other members are excluded
    from its ranking, the record itself is not; the split follows the family."""
    from evalctl.corpus.qrels import build_qrels

    recs = {r.id: r for r in espacenet.records()}
    wo = recs["WO2014193417"]
    sibling = PatentRecord(id="US20140999999", family_id=wo.family, title="Sibling of the WO application", ipc=wo.ipc)
    corpus = _native(tmp_path, [*recs.values(), sibling])
    q = build_qrels(corpus, QrelsSpec(name="ki", source="known_item", train_fraction=0.5, dev_fraction=0.0))
    assert q.manifest["kind"] == "known_item" and q.manifest["records_not_rendering"] == 0
    assert len(q.queries) == len(recs) + 1
    assert all(p.query_id == p.doc_id and p.score == 1 for p in q.pairs) and len(q.pairs) == len(q.queries)
    excl = q.exclusions()
    assert excl["WO2014193417"] == {"US20140999999"} and excl["US20140999999"] == {"WO2014193417"}
    assert all(qid not in ex for qid, ex in excl.items())  # the known item is never filtered out
    splits = {x.id: x.split for x in q.queries}
    assert splits["WO2014193417"] == splits["US20140999999"]  # one family, one split
    assert {"train", "test"} == set(splits.values())
    assert not (q.path / "train_pairs.tsv").exists()  # no citation edges to train on


def test_known_item_within_views_keeps_patents_every_view_can_find(espacenet, tmp_path):
    from evalctl.corpus.qrels import build_qrels

    grants = import_corpus("uspto", [FIXTURES / "uspto_grants_sample.csv"], name="g").corpus
    q = build_qrels(grants, QrelsSpec(name="ki", source="known_item", within_views=("TA", "TAC")))
    assert len(q.queries) == len(grants) == 4
    titles_only = build_qrels(espacenet, QrelsSpec(name="ki", source="known_item", within_views=("TA",)))
    assert not titles_only.queries and titles_only.manifest["records_not_rendering"] == len(espacenet)
    with pytest.raises(ValueError, match="within_views applies to source known_item"):
        QrelsSpec(within_views=("TA",))


def test_known_item_via_cli(espacenet):
    runner = CliRunner()
    out = runner.invoke(cli, ["corpus", "qrels", "esp", "--source", "known-item", "--name", "ki", "--within-view", "T"])
    assert out.exit_code == 0, out.output
    assert "(known_item)" in out.output and f"pairs {len(espacenet)};" in out.output
    assert "patents not rendering in T: 0" in out.output
    bad = runner.invoke(cli, ["corpus", "qrels", "esp", "--source", "known-item", "--name", "x", "--within-view", "TX"])
    assert bad.exit_code != 0 and "unknown view(s) ['TX']" in bad.output and "Traceback" not in bad.output
