"""`evalctl runs import | list` and `evalctl qrels import`: runs and judgments made elsewhere, stored as evalctl's
own are, and the stored runs."""

from __future__ import annotations

from pathlib import Path

import click

from evalctl.cli.dataclass_options import build, dataclass_options
from evalctl.corpus.default import corpus_for_command
from evalctl.corpus.known_ids import describe
from evalctl.corpus.qrels_import import QrelsImportParams, import_qrels
from evalctl.corpus.store import load_corpus
from evalctl.evaluators.scoring.run_import import RunImportParams, import_run
from evalctl.evaluators.scoring.runs import KIND, run_label
from evalctl.results_store import iter_results

_file = click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
_corpus = click.option("--corpus", "corpus_name", default=None, help="Corpus name (default: the configured default, "
                       "else the only imported one).")


def _echo_dropped(check: dict, *others: str) -> None:
    """What an import dropped, each count named (never silently): unknown ids, then the import's own `others`."""
    click.echo(f"  dropped: {check['dropped_rows']} of {check['rows']} rows for ids evalctl does not hold "
               f"({describe(check)}; at most {check['max_unknown_share']:.1%} allowed)"
               + "".join(f", {o}" for o in others))


@click.group()
def runs() -> None:
    """Runs made elsewhere, brought in to be scored and compared like evalctl's own; the stored runs."""


@runs.command("import")
@_file
@_corpus
@dataclass_options(RunImportParams, exclude=("corpus",))
def import_cmd(file, corpus_name, **params) -> None:
    """Store FILE, a run made by another system on an imported corpus, as a run: `evalctl evaluate` and `compare`
    take its id. Ordered by score (then document id), as trec_eval orders it, whatever its rank column says."""
    imported = import_run(file, build(RunImportParams, params, corpus=corpus_for_command(corpus_name)))
    run, m = imported.run, imported.run.manifest
    click.echo(f"{'unchanged (this file is already imported)' if imported.unchanged else 'imported'}: run {run.id}  "
               f"({run.result.path})")
    click.echo(f"  {run.label} on qrels {m['qrels']}/{m['split'] or 'all'}: {m['n_queries']} queries, {m['n_empty']} "
               f"with no row (scored 0), depth {m['k']}; rows out of score order by their rank column "
               f"{m['rank_disagreements']} (scored by score)")
    _echo_dropped(m["id_check"], f"{m['other_split_rows']} of queries of another split",
                  f"{m['excluded_rows']} hits on the query or its family")


@runs.command("list")
@click.option("--corpus", default=None, help="Only this corpus's runs (default: every corpus's).")
def list_cmd(corpus) -> None:
    """Stored runs, evalctl's and imported ones: id, system and views, corpus, qrels set and split, queries."""
    for r in iter_results(KIND, corpus):
        m = r.manifest
        origin = f"  from {m['source_file']}" if m.get("source_file") else ""  # an imported run's file
        click.echo(f"{r.id}  {run_label(m)}  {m['corpus']} {m['qrels']}/{m['split'] or 'all'}  "
                   f"{m.get('n_queries', '?')} queries{origin}")


@click.group()
def qrels() -> None:
    """Qrels sets made elsewhere, imported as named sets of a corpus (`evalctl corpus qrels` builds evalctl's own)."""


@qrels.command("import")
@_file
@_corpus
@dataclass_options(QrelsImportParams)
def qrels_import_cmd(file, corpus_name, **params) -> None:
    """Store FILE's judgments as qrels set --name of the corpus, in one split: `--qrels NAME` then scores against it
    (`evalctl retrieve`, `runs import`, a spec)."""
    corpus = load_corpus(corpus_for_command(corpus_name))
    imported = import_qrels(corpus, file, build(QrelsImportParams, params))
    q, m = imported.qrels, imported.qrels.manifest
    click.echo(f"{'unchanged (this file is already imported)' if imported.unchanged else 'imported'}: qrels {q.name} "
               f"of corpus {corpus.name} at {q.path}")
    click.echo(f"  from {m['imported']['file']} ({m['imported']['sha256']}); queries "
               + ", ".join(f"{k} {v}" for k, v in sorted(m["queries"].items())) + f"; pairs {m['pairs']}; domains "
               f"{m['domains']}")
    _echo_dropped(m["id_check"], f"{m['not_relevant_judgments']} judged not relevant (0 or less)",
                  f"{m['own_family_judgments']} of the query's own family")
