"""The catalogue as data: every shipped entry loads and pins its files; a spec names a dataset instead of sources, and
a wrong name or both at once is refused naming the corpus entry (nothing is fetched to check a spec)."""

from __future__ import annotations

import re

import pytest
import yaml


def _spec(tmp_path, corpus: dict) -> str:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({"name": "ds", "models": [{"id": "all-minilm-l6-v2"}], "corpora": [corpus]}))
    return str(path)


def test_every_shipped_dataset_pins_its_files():
    from evalctl.corpus.import_formats.registry import IMPORT_FORMATS
    from evalctl.datasets.catalogue import catalogue

    shipped = catalogue()
    assert {"ops-pizza-1990-2015", "dapfam"} <= set(shipped)
    for ds in shipped.values():
        assert ds.format in IMPORT_FORMATS and ds.licence and ds.attribution
        for f in ds.files:  # a 40-hex commit or revision in every URL: never a branch
            assert any(len(part) == 40 and all(c in "0123456789abcdef" for c in part) for part in f.url.split("/"))
            assert (f.sha256 is None) == (f.bytes is None) == (ds.name == "dapfam"), f.url


def test_a_spec_names_a_dataset_and_reads_it_in_its_format(tmp_path, monkeypatch):
    from evalctl.study.plan.loading import load_experiment

    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    spec = load_experiment(_spec(tmp_path, {"name": "c", "dataset": "lens-pizza-1000"}))
    assert spec.corpora[0].format == "lens" and spec.corpora[0].sources == ()
    assert not (tmp_path / "cache").exists()  # loading fetched nothing
    assert load_experiment("quickstart").corpora[0].dataset == "ops-pizza-1990-2015"


@pytest.mark.parametrize("corpus, says", [
    ({"name": "c", "dataset": "no-such"}, "corpora[0] (c): unknown dataset 'no-such'"),
    ({"name": "c", "dataset": "lens-pizza-1000", "sources": ["x.csv"]}, "give dataset: or sources:, not both"),
    ({"name": "c", "dataset": "lens-pizza-1000", "format": "wipo"}, "is read as format lens, not wipo"),
    ({"name": "c", "format": "lens"}, "give a dataset:"),
])
def test_a_wrong_dataset_entry_is_refused_naming_it(tmp_path, corpus, says):
    from evalctl.config_files import SpecError
    from evalctl.study.plan.loading import load_experiment

    with pytest.raises(SpecError, match=re.escape(says)):
        load_experiment(_spec(tmp_path, corpus))


def test_corpus_import_takes_a_dataset_or_sources_not_both(tmp_path):
    from click.testing import CliRunner

    from evalctl.cli.main import cli

    (tmp_path / "x.csv").write_text("a\n")
    r = CliRunner().invoke(cli, ["corpus", "import", "--dataset", "lens-pizza-1000", str(tmp_path / "x.csv")])
    assert r.exit_code == 2 and "give SOURCES or --dataset, not both" in r.output
    r = CliRunner().invoke(cli, ["corpus", "import", str(tmp_path / "x.csv")])
    assert r.exit_code == 2 and "--format is needed" in r.output
    r = CliRunner().invoke(cli, ["corpus", "import", "--dataset", "nope"])
    assert r.exit_code == 2 and "unknown dataset 'nope'" in r.output and "Traceback" not in r.output
