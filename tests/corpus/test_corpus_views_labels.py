"""Text views, label sets and `corpus stats` on real rows."""

import pytest
from click.testing import CliRunner
from corpus_helpers import FIXTURES, isolated_cache  # noqa: F401

from evalctl.cli.main import cli
from evalctl.corpus.importer import import_corpus
from evalctl.corpus.label_sets import LabelSetSpec, label_matrix, load_label_sets
from evalctl.config_files import SpecError, build
from evalctl.corpus.views import ViewSpec, load_views, view_coverage

pytestmark = pytest.mark.data  # real exports, fetched through the catalogue (tests/real_data.py)


@pytest.fixture
def uspto():
    return import_corpus("uspto", [FIXTURES / "uspto_grants_sample.csv"], name="uspto").corpus


def test_six_views_with_field_order():
    views = load_views()
    assert list(views) == ["T", "A", "C", "TA", "TAC", "TACD"]
    assert views["TAC"].fields == ("title", "abstract", "claims") and views["TAC"].name == "TAC"


def test_render_joins_in_order_and_none_when_missing(uspto):
    views = load_views()
    r = next(x for x in uspto.records() if x.kind == "B2")
    tac = views["TAC"].render(r)
    assert tac.startswith(r.title + "\n" + r.abstract + "\n" + r.claims[0].text)
    assert views["T"].render(r) == r.title
    assert views["TACD"].render(r) is None and views["TACD"].missing(r) == ("description",)
    first = ViewSpec("C1", ("first_claim",))
    assert first.render(r) == r.claims[0].text
    lenient = ViewSpec("TACD?", ("title", "abstract", "claims", "description"), optional=("description",))
    assert lenient.render(r) == tac


def test_reading_a_views_columns_renders_the_same_text(uspto):
    """Passes that read only a view's columns (read-back) render what the full records render."""
    views = {**load_views(), "C1": ViewSpec("C1", ("first_claim",)), "IC": ViewSpec("IC", ("independent_claims",))}
    assert views["TAC"].columns == ("title", "abstract", "claims") and views["C1"].columns == ("claims",)
    full = list(uspto.records())
    for view in views.values():
        partial = list(uspto.records(columns=(*view.columns, "cpc")))
        assert [r.id for r in partial] == [r.id for r in full]
        assert [view.render(r) for r in partial] == [view.render(r) for r in full], view.name
        assert [r.cpc for r in partial] == [r.cpc for r in full] and not any(r.citations for r in partial)


def test_coverage_reports_missing_fields(uspto):
    cov = view_coverage(uspto.records(), load_views())
    assert cov["TAC"].rendered == 4 and cov["TACD"].rendered == 0
    assert cov["TACD"].missing["description"] == 4 and len(cov["TACD"].examples) == 3


def test_bad_view_config_is_a_spec_error():
    with pytest.raises(SpecError, match="colour"):
        build(ViewSpec, {"name": "X", "fields": ["title"], "colour": "red"}, "views.yaml")
    with pytest.raises(SpecError, match="not one of"):
        build(ViewSpec, {"name": "X", "fields": ["headline"]}, "views.yaml")


def test_label_matrix_min_support():
    c = import_corpus("espacenet", [FIXTURES / "espacenet_pizza_sample.csv"], name="esp", labels=("pizza",)).corpus
    ids, labels = label_matrix(c, LabelSetSpec("s", "ipc", "subclass", min_support=2))
    assert len(ids) == len(labels) > 0
    flat = [lab for ls in labels for lab in ls]
    assert all(flat.count(lab) >= 2 for lab in set(flat)) and "B65D" in flat
    ids1, labels1 = label_matrix(c, LabelSetSpec("s", "ipc", "subclass", min_support=1))
    assert len(ids1) >= len(ids) and all(len(ls) >= 1 for ls in labels1)
    assert label_matrix(c, "landscape") == ([r.id for r in c.records()], [["pizza"]] * len(c))
    assert set(load_label_sets()) >= {"cpc_subclass", "cpc_group", "ipc_subclass", "ipc3", "landscape"}
    with pytest.raises(SpecError):
        build(LabelSetSpec, {"name": "x", "source": "cpc"}, "label_sets.yaml")  # cpc needs a level


def test_stats_cli():
    runner = CliRunner()
    src = str(FIXTURES / "espacenet_pizza_sample.csv")
    assert runner.invoke(cli, ["corpus", "import", "--format", "espacenet", "--name", "esp", src]).exit_code == 0
    assert runner.invoke(cli, ["corpus", "qrels", "esp"]).exit_code == 0
    out = runner.invoke(cli, ["corpus", "stats", "esp"])
    assert out.exit_code == 0, out.output
    for text in ["records: 12", "T      12/12", "A      0/12  missing: abstract 12", "ipc3", "queries 3",
                 "IN/OUT: IN 3 (100.0%)", "query jurisdictions:", "\njurisdictions: KR"]:
        assert text in out.output, text
