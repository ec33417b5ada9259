"""`evalctl referee`: the same landscape scored by evalctl, trec_eval, MTEB and Pyserini, side by side."""

from __future__ import annotations

from pathlib import Path

import click

from evalctl.errors import UserError


@click.command("referee")
@click.argument("corpus_name")
@click.option("--model", default="all-minilm-l6-v2", show_default=True, help="Model of the dense (exact) run.")
@click.option("--view", default="TA", show_default=True, help="Document view.")
@click.option("--query-view", default=None, help="Query view (default: --view).")
@click.option("--qrels", "qrels_name", default="citations", show_default=True)
@click.option("--split", default="test", show_default=True)
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder for the BEIR export and the table (default: <cache>/referee/<corpus>).")
def referee(corpus_name, model, view, query_view, qrels_name, split, out_dir) -> None:
    """Score CORPUS_NAME's landscape with evalctl and its referees (trec_eval, MTEB, Pyserini); print the table."""
    from evalctl.opensearch.connection import make_client
    from evalctl.corpus.export import ExportError
    from evalctl.corpus.store import CorpusNotFound
    from evalctl.evaluators.referee.table import LandscapeSpec, referee_landscape
    from evalctl.evaluators.retrieval.retrieve import RetrievalError
    from evalctl.paths import cache_root

    out_dir = out_dir or cache_root() / "referee" / corpus_name
    spec = LandscapeSpec(corpus_name, model, view, query_view, qrels_name, split)
    try:
        report = referee_landscape(make_client(), spec, out_dir)
    except (CorpusNotFound, FileNotFoundError, ExportError, RetrievalError) as e:
        raise UserError(str(e)) from None
    text = report.markdown()
    (out_dir / "referee.md").write_text(text + "\n")
    click.echo(text)
    click.echo(f"\n(written to {out_dir / 'referee.md'})")
