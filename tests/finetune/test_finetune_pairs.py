"""Recipe pairs on real rows: R1 citations (train side only), R2 shared codes with hard negatives, R3
sections of one patent, R4 mixes; the leakage check; matched-size subsampling. No model needed."""

from __future__ import annotations

import csv
import json

import pytest

from conftest import LENS, USPTO
from evalctl.corpus.importer import import_corpus
from evalctl.finetune.pairs import LeakageError, Pair, PairError, allocate, build_pairs, check_leakage, held_out
from evalctl.finetune.recipes import get_recipe, load_recipes
from evalctl.corpus.qrels import QrelsSpec, build_citation_qrels, load_qrels
from evalctl.config_files import SpecError
from evalctl.corpus.views import load_views

pytestmark = pytest.mark.data  # real exports, fetched through the catalogue (tests/real_data.py)



def uspto_rows(n: int) -> list[dict]:
    csv.field_size_limit(1 << 24)
    with open(USPTO, newline="", encoding="utf-8") as f:
        return [r for _, r in zip(range(n), csv.DictReader(f))]


def native_with_citations(path, n: int = 16):
    """Real USPTO grants (title, abstract, claims) as native records, with a citation chain i -> i+1
    and i -> i+2, and records 0/1 in one family: a tiny landscape with a citation graph."""
    rows = uspto_rows(n)
    ids = [r["grant_id"] for r in rows]
    with open(path, "w", encoding="utf-8") as f:
        for i, r in enumerate(rows):
            cites = [{"target": ids[j], "type": "examination", "direction": "cited"} for j in (i + 1, i + 2) if j < n]
            f.write(json.dumps({
                "id": ids[i], "title": r["patent_title"], "abstract": r["abstract"], "claims": r["claims_text"],
                "family_id": "fam-0" if i < 2 else None, "citations": cites,
            }) + "\n")
    return path


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    root = tmp_path_factory.mktemp("pairs")
    mp = pytest.MonkeyPatch()
    mp.setenv("EVALCTL_CACHE", str(root / "cache"))
    native = import_corpus("native", [native_with_citations(root / "native.jsonl")], name="ft-native").corpus
    lens = import_corpus("lens", [LENS], name="ft-lens").corpus
    qrels = build_citation_qrels(native, QrelsSpec(train_fraction=0.5, dev_fraction=0.2, seed="t1"))
    yield {"native": native, "lens": lens, "qrels": qrels}
    mp.undo()


def test_recipes_load_and_say_which_the_study_names():
    recipes = load_recipes()
    assert list(recipes) == ["R1", "R2", "R3", "R4"]
    assert {r.id for r in recipes.values() if r.named_by_study} == {"R3", "R4"}
    assert [s.generator for s in recipes["R4"].sources] == ["citations", "codes", "sections"]
    assert get_recipe("r3") == recipes["R3"]
    with pytest.raises(SpecError, match="unknown recipe 'R9'"):
        get_recipe("R9")


def test_a_bad_recipe_file_is_named(tmp_path):
    (tmp_path / "x.yaml").write_text("recipe:\n  id: X\n  name: x\n  description: x\n  named_by_study: false\n"
                                     "  sources: [{name: s, generator: sections, view_pairs: [[A, C]], colour: red}]\n")
    with pytest.raises(SpecError, match=r"x.yaml: recipe.sources\[0\]: unknown key\(s\) colour"):
        load_recipes(tmp_path)


def test_r3_pairs_are_two_sections_of_the_same_real_patent(corpora):
    ps = build_pairs(get_recipe("R3"), [corpora["native"]])
    views = load_views()
    records = {r.id: r for r in corpora["native"].records()}
    held = held_out(corpora["native"], "citations", {i: r.family for i, r in records.items()})
    pairs = ps.pairs["sections"]
    usable = [r for r in records.values() if not held.touches(r.id, r.family)]
    assert len(pairs) == 2 * len(usable) > 0  # (A, C) and (T, A) for every record outside the held-out set
    for p in pairs:
        (a, _), (b, _) = p.members
        assert a == b
        r = records[a]
        assert (p.anchor, p.positive) in {(views["A"].render(r), views["C"].render(r)),
                                          (views["T"].render(r), views["A"].render(r))}
        assert p.negative is None


def test_r2_pairs_share_a_cpc_group_and_negatives_only_the_subclass(corpora):
    ps = build_pairs(get_recipe("R2"), [corpora["lens"]], seed=1)
    records = {r.id: r for r in corpora["lens"].records()}
    groups = {i: {c.group for c in r.cpc if c.group} for i, r in records.items()}
    pairs = ps.pairs["codes"]
    assert len(pairs) > 100
    hard = 0
    for p in pairs:
        (a, fa), (b, fb), (n, fn) = p.members
        assert groups[a] & groups[b] and fa != fb
        assert not groups[a] & groups[n] and fn != fa
        hard += bool({g[:4] for g in groups[a]} & {c.subclass for c in records[n].cpc})
    stats = ps.reports[0].stats
    assert hard >= stats["hard_negatives"] > stats["random_negatives"]
    again = build_pairs(get_recipe("R2"), [corpora["lens"]], seed=1)
    assert again.digest() == ps.digest()
    assert build_pairs(get_recipe("R2"), [corpora["lens"]], seed=2).digest() != ps.digest()


def test_r1_uses_train_side_citations_only(corpora):
    ps = build_pairs(get_recipe("R1"), [corpora["native"]])
    qrels = corpora["qrels"]
    train_edges = {(a, b) for a, b, _ in qrels.train_pairs()}
    used = {(p.members[0][0], p.members[1][0]) for p in ps.pairs["citations"]}
    assert used and used <= train_edges
    held = {i for q in qrels.queries if q.split != "train" for i in q.exclude}
    assert held and not {i for pair in used for i in pair} & held
    summary = ps.summary()
    assert summary["leakage_check"]["pairs_checked"] == len(used)
    assert summary["leakage_check"]["held_out"][0]["queries"] == sum(q.split != "train" for q in qrels.queries)


def test_r1_refuses_qrels_without_a_train_side(tmp_path, monkeypatch):
    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    native = import_corpus("native", [native_with_citations(tmp_path / "n.jsonl", 6)], name="no-train").corpus
    build_citation_qrels(native, QrelsSpec(train_fraction=0.0))
    with pytest.raises(PairError, match="--train-fraction"):
        build_pairs(get_recipe("R1"), [native])


def test_leakage_check_fails_on_a_held_out_query_or_its_citation(corpora):
    native, qrels = corpora["native"], corpora["qrels"]
    records = {r.id: r for r in native.records()}
    guard = held_out(native, "citations", {i: r.family for i, r in records.items()})
    test_q = next(q for q in qrels.queries if q.split != "train")
    cited = next(p.doc_id for p in qrels.pairs if p.query_id == test_q.id)
    other = next(i for i in records if not guard.touches(i, records[i].family) and i != cited)
    ok = Pair("x", native.name, "a", "b", None, ((other, records[other].family), (other, records[other].family)))
    assert check_leakage([ok], [guard]) == 1
    touching = Pair("x", native.name, "a", "b", None, ((other, records[other].family), (test_q.id, "f")))
    with pytest.raises(LeakageError, match=test_q.id):
        check_leakage([ok, touching], [guard])
    # the query's family member counts as the query (records 0 and 1 share fam-0)
    fam = Pair("x", native.name, "a", "b", None, ((other, "?"), ("anything", records[test_q.id].family)))
    with pytest.raises(LeakageError):
        check_leakage([fam], [guard])


def test_guard_corpus_keeps_its_held_out_records_out_of_training(corpora):
    # Train R3 on the native corpus while guarding the same corpus: nothing held out gets through,
    # and the check names both guards.
    ps = build_pairs(get_recipe("R3"), [corpora["native"]], guard=(f"{corpora['native'].name}:citations",))
    assert len(ps.guards) == 2
    held = {i for q in corpora["qrels"].queries if q.split != "train" for i in q.exclude}
    assert not {m[0] for p in ps.pairs["sections"] for m in p.members} & held


def test_match_size_subsamples_every_recipe_to_the_same_seeded_size(corpora):
    full = build_pairs(get_recipe("R3"), [corpora["native"]], seed=5)
    a = build_pairs(get_recipe("R3"), [corpora["native"]], seed=5, match_size=7)
    b = build_pairs(get_recipe("R3"), [corpora["native"]], seed=5, match_size=7)
    c = build_pairs(get_recipe("R3"), [corpora["native"]], seed=6, match_size=7)
    assert a.counts() == {"sections": 7} and a.digest() == b.digest() != c.digest()
    assert set(a.pairs["sections"]) <= set(full.pairs["sections"])
    r2 = build_pairs(get_recipe("R2"), [corpora["lens"]], seed=5, match_size=7)
    assert sum(r2.counts().values()) == 7
    with pytest.raises(PairError, match="lower --match-size"):
        build_pairs(get_recipe("R3"), [corpora["native"]], match_size=10_000)


def test_r4_mixes_sources_by_weight_across_corpora(corpora):
    r1 = build_pairs(get_recipe("R1"), [corpora["native"]])
    n_cit = r1.counts()["citations"]
    ps = build_pairs(get_recipe("R4"), [corpora["native"], corpora["lens"]], match_size=30)
    counts = ps.counts()
    assert sum(counts.values()) == 30
    available = {k: sum(v.values()) for k, v in ps.summary()["generated"].items()}
    assert available["citations"] == n_cit < 10
    # a source short of its third gives all it has; the others take more than their third
    for source, n in counts.items():
        assert n == available[source] or n > 10
    assert ps.summary()["generated"]["codes"]["ft-native"] == 0  # no codes in the native corpus
    unsized = build_pairs(get_recipe("R4"), [corpora["native"], corpora["lens"]])
    assert sum(unsized.counts().values()) == sum(sum(g.values()) for g in unsized.summary()["generated"].values())


def test_allocate_by_weight_with_shortfall():
    assert allocate({"a": 100, "b": 100}, {"a": 1, "b": 1}, 10) == {"a": 5, "b": 5}
    assert allocate({"a": 100, "b": 100, "c": 100}, {"a": 1, "b": 1, "c": 1}, 10) == {"a": 4, "b": 3, "c": 3}
    assert allocate({"a": 2, "b": 100, "c": 100}, {"a": 1, "b": 1, "c": 1}, 30) == {"a": 2, "b": 14, "c": 14}
    assert allocate({"a": 10, "b": 100}, {"a": 3, "b": 1}, 20) == {"a": 10, "b": 10}
    with pytest.raises(PairError, match="only 12 available"):
        allocate({"a": 2, "b": 10}, {"a": 1, "b": 1}, 13)


def test_pairs_command_previews_counts_and_leakage(corpora):
    from click.testing import CliRunner

    from evalctl.cli.main import cli

    res = CliRunner().invoke(cli, ["pairs", "--recipe", "R1", "--corpus", corpora["native"].name, "-n", "1"])
    assert res.exit_code == 0, res.output
    assert "citations: generated" in res.output and "0 violations" in res.output
    bad = CliRunner().invoke(cli, ["pairs", "--recipe", "R3", "--corpus", corpora["native"].name, "--match-size", "9999"])
    assert bad.exit_code != 0 and "lower --match-size" in bad.output and "Traceback" not in bad.output
    assert load_qrels(corpora["native"], "citations").manifest["spec"]["train_fraction"] == 0.5
