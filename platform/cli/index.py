"""`evalctl index`: load, verify and list corpus x model indexes."""

from __future__ import annotations

import json

import click

from evalctl.cli.choices import MODEL, MODEL_HELP
from evalctl.cli.dataclass_options import build, dataclass_options
from evalctl.cli.runtime_options import runtime_options
from evalctl.corpus.default import corpus_for_command
from evalctl.corpus.store import CorpusNotFound, load_corpus
from evalctl.corpus.views import load_views
from evalctl.errors import UserError
from evalctl.indexers.encode_options import EncodeOptions
from evalctl.indexers.passages import PassageSpec
from evalctl.indexers.index_cost import cost_lines
from evalctl.indexers.index_layout import (BM25_ONLY, MAX_SHARDS, index_prefix, load_index_settings, owned_by_prefix,
                                           vector_field)
from evalctl.indexers.index_loader import index_corpus, read_manifest
from evalctl.indexers.index_verify import index_status, verify_index
from evalctl.models import get_model
from evalctl.opensearch.connection import make_client

DEFAULT_MODEL_VIEWS = ("TAC",)  # the study's best view; BM25-only indexes take every view


def _resolve(corpus_name: str | None, model_id: str | None, view_names: tuple[str, ...]):
    try:
        corpus = load_corpus(corpus_for_command(corpus_name))
    except CorpusNotFound as e:
        raise UserError(str(e)) from None
    model = None if model_id in (None, BM25_ONLY) else get_model(model_id)
    views = load_views()
    names = view_names or (DEFAULT_MODEL_VIEWS if model else tuple(views))
    unknown = [v for v in names if v not in views]
    if unknown:
        raise UserError(f"unknown view(s) {', '.join(unknown)}; configs/views.yaml has {', '.join(views)}")
    return corpus, model, views, list(names)


@click.group(invoke_without_command=True)
@click.option("--corpus", "corpus_name", help="Corpus name (from `evalctl corpus import --name`) or folder "
              "(default: EVALCTL_DEFAULT_CORPUS, `default_corpus` in the config file, else the only imported one).")
@click.option("--model", "model_id", type=MODEL, default=None, help=f"{MODEL_HELP} Omit or `bm25` for text only.")
@click.option("--view", "view_names", multiple=True, help="View(s) to index (default: TAC with a model, all without).")
@dataclass_options(EncodeOptions, only=("variant", "device", "batch_size"))
@runtime_options
@click.option("--chunk-docs", type=click.IntRange(min=1), default=2000, show_default=True,
              help="Documents encoded and loaded per step (the unit of resumption).")
@click.option("--shards", type=click.IntRange(1, MAX_SHARDS), default=None,
              help="Primary shards of a new index (default: configs/index.yaml). Fixed once the index exists: "
                   "another count is refused.")
@click.option("--replicas", type=click.IntRange(min=0), default=None,
              help="Copies of each shard on other nodes of a cluster (default: configs/index.yaml); an existing "
                   "index is changed to this.")
@click.option("--vectors", type=click.Choice(["task", "document"]), default="task", show_default=True,
              help="task: also each view's vectors under the model's classification and clustering prompts "
                   "where they differ from its document prompt (what classify/cluster read); document: only "
                   "the document vectors.")
@click.option("--passages", "passage_settings", multiple=True, metavar="WINDOW[:STRIDE]",
              help="Also each view's passages: windows of WINDOW of the model's tokens every STRIDE tokens (default: "
                   "a quarter overlaps), one vector each, for passage methods (dense-maxp). Repeat for several.")
@click.pass_context
def index(ctx, corpus_name, model_id, view_names, chunk_docs, shards, replicas, vectors, passage_settings,
          **params) -> None:
    """Index a corpus: BM25 text per view and the model's vectors per view (resumable)."""
    if ctx.invoked_subcommand is not None:
        return

    corpus, model, views, names = _resolve(corpus_name, model_id, view_names)
    settings_given = tuple(dict.fromkeys(PassageSpec.parse(v) for v in passage_settings))
    # A node that stops answering is reported by the CLI (cli.explain): loaded chunks are kept and resumed.
    rep = index_corpus(make_client(), corpus, [views[n] for n in names], model,
                       encoding=build(EncodeOptions, params), chunk_docs=chunk_docs,
                       settings=load_index_settings(shards=shards, replicas=replicas),
                       label_tasks=None if vectors == "task" else {}, passages={n: settings_given for n in names})
    click.echo(f"{rep.index}: loaded {rep.n_loaded} documents ({rep.docs_per_s:.0f} docs/s), "
               f"{rep.n_already} already present, corpus has {rep.n_corpus}")
    for task, tv in rep.task_vectors.items():
        click.echo(f"  {task} vectors ({', '.join(vector_field(v, task) for v in tv['views'])}): "
                   f"prompt {tv['prompt']!r}")
    for v, n in rep.missing_view.items():
        if n:
            click.echo(f"  view {v}: {n} records lack its fields (no text or vector for them)")
    for why in rep.warnings:
        click.echo(f"warning: {why}", err=True)
    if rep.failed:
        shown = "\n  ".join(rep.failed[:20])
        if rep.explained == len(rep.failed):  # a setting or a vector, named for each: not the records' text
            raise UserError(f"{len(rep.failed)} documents were refused by OpenSearch, each for the cause named below; "
                            "the others are loaded. A rerun sends the same again: change what is named (the "
                            f"passage setting, the model or its server) first:\n  {shown}")
        # the loader has already retried what a busy node refused (429); any other refusal is the document's own
        raise UserError(f"{len(rep.failed)} documents were refused by OpenSearch (its reason for each below); the "
                        "others are loaded. A rerun sends only these again, which helps only where the reason is a "
                        "busy node (429); any other reason lies in the record: correct it in the source and import "
                        f"again (`evalctl corpus import --overwrite`), or leave it out:\n  {shown}")


@index.command()
@click.option("--corpus", "corpus_name", default=None, help="Corpus (default: as for `evalctl index`).")
@click.option("--model", "model_id", type=MODEL, default=None, help=MODEL_HELP)
@click.option("--sample", type=int, default=50, show_default=True, help="Vectors per view compared with the cache.")
def verify(corpus_name, model_id, sample) -> None:
    """Check document and vector counts, dimensions, and sampled vectors against the embedding cache."""
    corpus, model, views, _ = _resolve(corpus_name, model_id, ())
    rep = verify_index(make_client(), corpus, views, model, sample=sample)
    for line in rep.checks:
        click.echo(f"ok    {line}")
    for line in rep.problems:
        click.echo(f"FAIL  {line}")
    if not rep.ok:
        raise UserError(f"{rep.index}: {len(rep.problems)} problem(s)")
    click.echo(f"{rep.index}: verified")


@index.command()
@click.option("--json", "as_json", is_flag=True, help="Print the full manifests as JSON.")
def status(as_json) -> None:
    """List evalctl indexes with their manifests, sizes and counts."""
    rows = index_status(make_client())
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    click.echo(f"index prefix: {index_prefix()} (EVALCTL_INDEX_PREFIX or opensearch.index_prefix in the config)")
    if not rows:
        click.echo("no evalctl indexes with this prefix")
    for r in rows:
        click.echo(f"{r['index']}  docs={r['docs']}  size={r['size_mb']}MB  corpus={r.get('corpus')}  "
                   f"model={r.get('model')}@{(r.get('revision') or '-')[:12]}  views={','.join(r.get('views', []))}  "
                   f"engine={r.get('engine')}  code={r.get('code_version')}")
        click.echo(f"  shards={r['shards']} replicas={r['replicas']} health={r['health']}: " + ", ".join(
            f"{c['shard']}{c['copy'][0]} {c['node'] or c['state']}" for c in r["shard_copies"]))
        for line in cost_lines(r.get("cost")):
            click.echo(f"  {line}")


@index.command()
@click.argument("name")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def delete(name, yes) -> None:
    """Delete one evalctl index."""
    client = make_client()
    prefix = index_prefix()
    if not owned_by_prefix(name, read_manifest(client, name) or {}, prefix):
        raise UserError(f"{name} is not an evalctl index of prefix {prefix!r} (names start with {prefix}-; "
                        "another prefix's indexes are deleted with that EVALCTL_INDEX_PREFIX)")
    if not yes:
        click.confirm(f"Delete index {name}?", abort=True)
    client.indices.delete(index=name)
    click.echo(f"deleted {name}")
