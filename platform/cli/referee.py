"""`evalctl referee`: the same landscape scored by evalctl, trec_eval, MTEB and Pyserini, side by side."""

from __future__ import annotations

from pathlib import Path

import click

from evalctl.cli.choices import MODEL, MODEL_HELP
from evalctl.corpus.store import CorpusNotFound
from evalctl.errors import UserError
from evalctl.evaluators.referee import REFEREES
from evalctl.evaluators.retrieval.retrieve import RetrievalError
from evalctl.opensearch.connection import make_client
from evalctl.output_folder import check_folder, claim_folder, write_into
from evalctl.paths import cache_root


@click.command("referee")
@click.argument("corpus_name")
@click.option("--model", type=MODEL, default="all-minilm-l6-v2", show_default=True,
              help="Model of the dense (exact) run. " + MODEL_HELP)
@click.option("--view", default="TA", show_default=True, help="Document view.")
@click.option("--query-view", default=None, help="Query view (default: --view).")
@click.option("--qrels", "qrels_name", default="citations", show_default=True)
@click.option("--split", default="test", show_default=True)
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder for the BEIR export and the table (default: <cache>/referee/<corpus>).")
@click.option("--with", "referees", multiple=True, type=click.Choice(REFEREES),
              help="A referee to run (repeatable; default: every one): trec_eval, MTEB and Pyserini as installed "
                   "(pip install 'evalctl[referee]'), rank-eval the node's own Ranking Evaluation API.")
@click.option("--force", is_flag=True, help="Write into an --out folder holding files that are not an evalctl "
              "referee table (replacing the files of the same names).")
def referee(corpus_name, model, view, query_view, qrels_name, split, out_dir, referees, force) -> None:
    """Score CORPUS_NAME's landscape with evalctl and its referees (trec_eval, MTEB, Pyserini, the node's
    `_rank_eval`); print the table."""
    from evalctl.corpus.export import ExportError  # pyarrow
    from evalctl.evaluators.referee.table import LandscapeSpec, referee_landscape  # pandas

    out_dir = out_dir or cache_root() / "referee" / corpus_name
    # an export cut short is recognised by its beir/export.json: the mark comes once the table is scored
    check_folder(out_dir, "referee table", ("beir/export.json", "corpus_hash"), force=force)
    spec = LandscapeSpec(corpus_name, model, view, query_view, qrels_name, split, referees=referees or REFEREES)
    try:
        report = referee_landscape(make_client(), spec, out_dir)
    except (CorpusNotFound, FileNotFoundError, ExportError, RetrievalError) as e:
        raise UserError(str(e)) from None
    text = report.markdown()
    claim_folder(out_dir, "referee table")
    write_into(out_dir, "referee.md", text + "\n")
    click.echo(text)
    click.echo(f"\n(written to {out_dir / 'referee.md'})")
