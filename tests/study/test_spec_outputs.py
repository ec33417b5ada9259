"""Hostile but honest specs and output folders (issue 25): a spec name is never a path; every spec field that
can be checked without the node is checked at load (so `evalctl run --dry-run` refuses it, exit 2, naming the
field); a report never replaces files evalctl did not write; report.md carries no raw HTML from a spec
(a corpus export's folder: corpus/test_corpus_export_folders.py; compare and referee outputs:
evaluators/test_output_folders.py; the shared home and helpers: cli_home.py). Each case goes through the real CLI with inputs made here, a private cache, and asserts: no traceback,
the exit code, the message naming the field, nothing written outside the cache or the target, foreign files
byte-identical. Only the missing-qrels report case needs the node."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from cli_home import PIZZA, home, invoke, listing, plant_links, untouched  # noqa: F401 - home: a fixture

pytestmark = pytest.mark.data  # real exports, fetched through the catalogue (tests/real_data.py)

FOREIGN_HTML = b"<html><body>someone else's report</body></html>\n"


def base_spec(**extra) -> dict:
    return {"name": "hs-study",
            "corpora": [{"name": "hs-pizza", "format": "espacenet", "sources": [str(PIZZA)],
                         "qrels": {"name": "citations"}}],
            "models": [{"id": "all-minilm-l6-v2"}], **extra}


def write_spec(home: Path, doc: dict) -> Path:
    path = home / "spec.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


ALL_COMMANDS = (("run", "--dry-run"), ("run",), ("report",))


def refused(home: Path, doc: dict, message: str, commands=ALL_COMMANDS, *more: str) -> None:
    """Every command refuses the spec at load: exit 2, the exact message (and `more`), nothing written anywhere."""
    spec = write_spec(home, doc)
    before = listing(home)
    for command in commands:
        out = invoke(command[0], spec, *command[1:])
        assert out.exit_code == 2, (command, out.output)
        assert f"Error: {spec}: {message}" in out.output, (command, out.output)
        assert all(m in out.output for m in more), (command, out.output)
    assert listing(home) == before
    assert not (home / "inside" / "cache").exists()


# --------------------------------------------------------------------------- a spec name is never a path


@pytest.mark.parametrize("bad", ["{victim}", "../../../../{victim_name}", "a/b", ".hidden"])
def test_spec_name_is_never_a_path(home, bad):
    """`name: /some/folder` or `../../x` is refused at load: the report never lands there, and an existing
    report.html there stays byte-identical."""
    victim = home / "victim"
    victim.mkdir()
    (victim / "report.html").write_bytes(FOREIGN_HTML)
    name = bad.format(victim=victim, victim_name=victim.name)
    # a long value is shown cut at 60 characters
    refused(home, base_spec(name=name), f"name '{name[:40]}", ALL_COMMANDS, "is not a valid name",
            "(a name is never a path)")
    assert (victim / "report.html").read_bytes() == FOREIGN_HTML and sorted(victim.iterdir()) == [victim / "report.html"]


@pytest.mark.parametrize("where, message", [
    ("corpora", "corpora[0]: name '../x' is not a valid name"),
    ("models", "models[0]: model '../x': no such folder"),  # a path names a model folder, its id is derived
    ("retrieval", "retrieval[0]: qrels '../x' is not a valid name"),
])
def test_names_that_become_paths_follow_the_name_rule(home, where, message):
    doc = base_spec(retrieval=[{"corpus": "hs-pizza", "views": ["T"], "methods": ["bm25"]}])
    if where == "corpora":
        doc["corpora"][0]["name"] = "../x"
        doc["retrieval"][0]["corpus"] = "../x"
    elif where == "models":
        doc["models"][0]["id"] = "../x"
    else:
        doc["retrieval"][0]["qrels"] = "../x"
    refused(home, doc, message)


def test_qrels_set_name_in_a_corpus_entry(home):
    doc = base_spec()
    doc["corpora"][0]["qrels"]["name"] = "../../x"
    spec = write_spec(home, doc)
    out = invoke("run", spec, "--dry-run")
    assert out.exit_code == 2 and f"{spec}.corpora[0].qrels: qrels name '../../x' is not a valid name" in out.output


def test_a_fine_tuned_model_id_too_long_for_a_name(home):
    """The id a recipe gives the tuned model becomes a folder: checked at load, not after training."""
    long = "c" * 90
    doc = base_spec(finetune=[{"corpus": long, "recipes": ["R3"]}])
    doc["corpora"][0]["name"] = long
    refused(home, doc, "finetune[0]: fine-tuned model id 'all-minilm-l6-v2+r3@ccc")


# --------------------------------------------------------------------------- late validation, now at load


RETRIEVAL = {"corpus": "hs-pizza", "views": ["T"], "methods": ["bm25", "hybrid"]}


@pytest.mark.parametrize("change, message", [
    ({"k": -5}, "retrieval[0]: k -5 is outside the allowed range 1-10000"),
    ({"k": 100000000}, "retrieval[0]: k 100000000 is outside the allowed range 1-10000"),
    ({"k": 0}, "retrieval[0]: k 0 is outside the allowed range 1-10000"),
    ({"split": "validation"}, "retrieval[0]: unknown split 'validation' (one of train, dev, test, all)"),
    ({"split": "../test"}, "retrieval[0]: unknown split '../test'"),
    ({"dense_weight": 7.5}, "retrieval[0]: dense_weight: dense weight 7.5 is outside [0, 1]"),
    ({"dense_weight": -0.1}, "retrieval[0]: dense_weight: dense weight -0.1 is outside [0, 1]"),
    ({"dense_weights": [0.5, 1.5]}, "retrieval[0]: dense_weights[1]: dense weight 1.5 is outside [0, 1]"),
    ({"dense_weights": [0.5], "split": "dev"}, "retrieval[0]: dense_weights are tuned on the dev queries"),
    ({"views": ["T", "A", "T"]}, "retrieval[0]: views[0] and views[2]: view 'T' given twice"),
    ({"methods": ["bm25", "bm25"]}, "retrieval[0]: methods[0] and methods[1]: method 'bm25' given twice"),
])
def test_retrieval_fields_are_checked_at_load(home, change, message):
    refused(home, base_spec(retrieval=[{**RETRIEVAL, **change}]), message)


EXPECTED = {"task": "retrieval", "corpus": "hs-pizza", "model": "all-minilm-l6-v2", "view": "T",
            "method": "dense", "metric": "ndcg@10", "value": 0.1}


@pytest.mark.parametrize("change, message", [
    ({"metric": "ndcg@11"}, "expected[0]: unknown metric 'ndcg@11' for a retrieval score (one of ndcg@10, "),
    ({"tolerance": -0.01}, "expected[0]: tolerance -0.01 must be a number >= 0"),
    ({"tolerance": float("nan")}, "expected[0]: tolerance nan must be a number >= 0"),
    ({"method": None}, "expected[0]: a retrieval score needs a method"),
    ({"view": "XYZ"}, "expected[0]: unknown view 'XYZ'"),
    ({"task": "clustering", "method": None, "label_set": "cpc_subclass", "metric": "class/v_measure"},
     "expected[0]: unknown metric 'class/v_measure' for a clustering score (one of subclass/v_measure, "),
    ({"task": "classification", "method": None, "label_set": "cpc_subclass", "metric": "logreg/f1"},
     "expected[0]: unknown metric 'logreg/f1' for a classification score (one of logreg/micro_f1, "),
    ({"task": "classification", "method": None, "metric": "logreg/micro_f1"},
     "expected[0]: a classification score needs a label_set"),
])
def test_expected_entries_are_checked_at_load(home, change, message):
    refused(home, base_spec(expected=[{**EXPECTED, **change}]), message)


def test_the_same_model_twice_is_refused_naming_both(home):
    doc = base_spec()
    doc["models"] += [{"id": "all-mpnet-base-v2"}, {"id": "all-minilm-l6-v2", "prompt_variant": None}]
    refused(home, doc, "models[0] and models[2]: model id 'all-minilm-l6-v2' given twice")


@pytest.mark.parametrize("change, message", [
    ({"batch_size": 0}, "finetune[0]: batch_size 0 must be at least 1"),
    ({"max_steps": -1}, "finetune[0]: max_steps -1 must be at least 1"),
    ({"recipes": ["R3", "R3"]}, "finetune[0]: recipes[0] and recipes[1]: recipe 'R3' given twice"),
])
def test_finetune_fields_are_checked_at_load(home, change, message):
    refused(home, base_spec(finetune=[{"corpus": "hs-pizza", "recipes": ["R3"], **change}]), message)


@pytest.mark.parametrize("change, message", [
    ({"alpha": 2}, "statistics: alpha: 2.0 must be below 1"),
    ({"n_permutations": 500}, "statistics: n_permutations: 500 must be at least 1000"),
    ({"exact_up_to": 30}, "statistics: exact_up_to: 30 must be at most 20"),
    ({"family": "all"}, "statistics.family: 'all' is not one of 'metric', 'table'"),
    ({"permutations": 5}, "statistics: unknown key(s) permutations for StatsProtocol"),
])
def test_statistics_fields_are_checked_at_load(home, change, message):
    refused(home, base_spec(statistics=change), message)


def test_split_all_is_accepted_as_retrieve_takes_it(home):
    """`split: all` asks every query, as `evalctl retrieve --split all` does (RetrievalSpec's split None)."""
    from evalctl.study.plan.loading import load_experiment

    spec = write_spec(home, base_spec(retrieval=[{**RETRIEVAL, "split": "all"}, {**RETRIEVAL, "views": ["A"]}]))
    entries = load_experiment(str(spec)).entries("retrieval")
    assert [e.query_split for e in entries] == [None, "test"]
    out = invoke("run", spec, "--dry-run")
    assert out.exit_code == 0 and "retrieve hs-pizza all-minilm-l6-v2 T hybrid: to run" in out.output, out.output


def test_split_all_runs_every_query(home, os_client):
    """A spec's `split: all` runs against the node as `retrieve --split all` does: every query of the set."""
    import os

    doc = base_spec(retrieval=[{"corpus": "hs-pizza", "views": ["T"], "methods": ["bm25"], "split": "all"}])
    doc.pop("models")
    doc["corpora"][0]["qrels"]["dev_fraction"] = 0.5
    try:
        out = invoke("run", write_spec(home, doc))
        assert out.exit_code == 0, out.output
        queries = json.loads((home / "inside/cache/corpora/hs-pizza/qrels/citations/manifest.json").read_text())["queries"]
        assert len(queries) > 1 and f"({sum(queries.values())} queries" in out.output, (queries, out.output)
    finally:
        os_client.indices.delete(index=f"{os.environ['EVALCTL_INDEX_PREFIX']}-*", ignore_unavailable=True)


def test_a_beir_given_set_keeps_its_own_split_names(home):
    """A BEIR corpus's `given` qrels carry the split its qrels/<split>.tsv names: any safe name."""
    from evalctl.study.plan.loading import load_experiment

    doc = {"name": "hs-beir", "corpora": [{"name": "hs-b", "format": "beir", "sources": ["x"]}],
           "retrieval": [{"corpus": "hs-b", "views": ["T"], "methods": ["bm25"], "qrels": "given",
                          "split": "validation"}]}
    assert load_experiment(str(write_spec(home, doc))).entries("retrieval")[0].split == "validation"
    doc["retrieval"][0]["split"] = "../test"
    refused(home, doc, "retrieval[0]: split '../test' is not a valid name", commands=(("run", "--dry-run"),))


def test_the_shipped_specs_still_load():
    from evalctl.study.plan.loading import experiment_path, load_experiment

    shipped = sorted(p.stem for p in experiment_path("quickstart").parent.glob("*.yaml"))
    assert {"quickstart", "study", "passages", "dapfam-passages", "claims-known-item"} <= set(shipped)
    for name in shipped:
        assert load_experiment(name).name == name


# --------------------------------------------------------------------------- the report's folder


def report_spec(home: Path, description: str = "A study.") -> Path:
    """A spec without tasks: its report needs no node (and no imported corpus)."""
    doc = base_spec(description=description)
    doc.pop("models")
    return write_spec(home, doc)


def test_report_never_replaces_a_report_html_it_did_not_write(home):
    spec, out_dir = report_spec(home), home / "theirs"
    out_dir.mkdir()
    (out_dir / "report.html").write_bytes(FOREIGN_HTML)
    before = listing(home)
    out = invoke("report", spec, "--out", out_dir)
    assert out.exit_code == 2 and f"{out_dir} holds files that are not an evalctl report" in out.output, out.output
    assert "--force" in out.output and listing(home) == before
    # --force writes into it, as asked
    out = invoke("report", spec, "--out", out_dir, "--force")
    assert out.exit_code == 0, out.output
    assert (out_dir / "report.html").read_bytes().startswith(b"<!doctype html>")


def test_report_rewrites_its_own_folder_even_after_a_cut(home):
    spec, out_dir = report_spec(home), home / "mine"
    assert invoke("report", spec, "--out", out_dir).exit_code == 0
    assert {p.name for p in out_dir.iterdir()} >= {"report.md", "report.html", "inputs.json"}
    # a report cut short after report.md: the folder is still evalctl's to finish
    (out_dir / "report.html").unlink()
    (out_dir / "inputs.json").unlink()
    out = invoke("report", spec, "--out", out_dir)
    assert out.exit_code == 0 and (out_dir / "report.html").is_file(), out.output
    # a report folder written before folders were marked: recognised by its inputs.json
    (out_dir / ".evalctl-output").unlink()
    report_spec(home, "Another study.")
    assert invoke("report", spec, "--out", out_dir).exit_code == 0
    assert "Another study." in (out_dir / "report.md").read_text()


@pytest.mark.parametrize("force", [(), ("--force",)])
def test_report_refuses_a_symlink(home, force):
    spec, real = report_spec(home), home / "real"
    real.mkdir()
    (home / "link").symlink_to(real)
    before = listing(home)
    out = invoke("report", spec, "--out", home / "link", *force)
    assert out.exit_code == 2 and f"{home / 'link'} is a symbolic link" in out.output
    assert listing(home) == before and not any(real.iterdir())


@pytest.mark.parametrize("text", ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>"])
def test_report_md_carries_no_html_from_the_spec(home, text):
    spec, out_dir = report_spec(home, f"Hostile {text} description & more."), home / "r"
    assert invoke("report", spec, "--out", out_dir).exit_code == 0
    md, page = (out_dir / "report.md").read_text(), (out_dir / "report.html").read_text()
    for written in (md, page):
        assert text not in written and "<script" not in written and "<img" not in written
    assert f"Hostile {text.replace('<', '&lt;')} description &amp; more." in md


def test_markdown_tables_and_headings_are_escaped():
    import pandas as pd

    from evalctl.study.page.document import Layout, Report

    r = Report("t <b>x</b>")
    r.h("<i>h</i>")
    r.table(pd.DataFrame([{"<th>": "<td>", "n": 1}]))
    r.img("a.png", "<c>", (), Layout(990, 13.75))
    md = r.markdown()
    assert "<" not in md and "&lt;td>" in md and "&lt;th>" in md and "|   1 |" in md and "# t &lt;b>x&lt;/b>" in md


def test_report_names_a_missing_qrels_set(home, os_client):
    """A retrieval step whose qrels set is not there: a message naming the set and how to build it."""
    spec = write_spec(home, base_spec(retrieval=[{"corpus": "hs-pizza", "views": ["T"], "methods": ["bm25"],
                                                  "qrels": "nope"}]))
    assert invoke("corpus", "import", "--format", "espacenet", "--name", "hs-pizza", PIZZA).exit_code == 0
    before = listing(home)
    out = invoke("report", spec, "--out", home / "r")
    assert out.exit_code == 2, out.output
    assert ("corpus 'hs-pizza' has no qrels set 'nope' (it has: none): build it with "
            "`evalctl corpus qrels hs-pizza --name nope`") in out.output
    assert listing(home) == before and not (home / "r").exists()


# --------------------------------------------------------------------------- links planted in its folder (issue 37)


def test_report_replaces_links_planted_in_its_folder(home):
    """A link named report.md (or any file a report writes) in evalctl's own report folder is replaced, its
    target untouched: the report lands in the folder the path names."""
    spec, out_dir = report_spec(home), home / "mine"
    assert invoke("report", spec, "--out", out_dir).exit_code == 0
    names = [p.name for p in out_dir.iterdir() if p.is_file() and p.name != ".evalctl-output"]
    before = plant_links(out_dir, home / "elsewhere", files=names)
    report_spec(home, "Changed, so the report is written again.")
    out = invoke("report", spec, "--out", out_dir)
    assert out.exit_code == 0, out.output
    untouched(home / "elsewhere", before)
    assert not any(p.is_symlink() for p in out_dir.iterdir())
    assert "Changed, so" in (out_dir / "report.md").read_text()
