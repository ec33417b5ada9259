"""`evalctl vectors export`, `evalctl classify`, `evalctl cluster`, `evalctl tables`: the vector tasks."""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path

import click

from evalctl.cli.choices import MODEL, MODEL_HELP
from evalctl.cli.dataclass_options import build, dataclass_options
from evalctl.cli.params import comma_items
from evalctl.corpus.default import corpus_for_command
from evalctl.corpus.label_sets import LABEL_SOURCES, load_label_sets
from evalctl.corpus.store import CorpusNotFound, load_corpus
from evalctl.corpus.views import load_views
from evalctl.errors import UserError
from evalctl.evaluators.tasks.classification import ClassifySettings, TooFewExamples, run_classification
from evalctl.evaluators.tasks.clustering import ClusterSettings, run_clustering
from evalctl.evaluators.vectors.export import ReadbackError, ViewVectors, export_vectors
from evalctl.indexers.encode_merge import merge_caches
from evalctl.indexers.encode_options import PromptChoice
from evalctl.indexers.vectors_import import import_vectors, read_npy, read_parquet
from evalctl.models import get_model
from evalctl.opensearch.connection import make_client
from evalctl.output_folder import check_file, write_into
from evalctl.study.abstasks.registry import TASKS


def _resolve(corpus_name: str | None, view_name: str):
    try:
        corpus = load_corpus(corpus_for_command(corpus_name))
    except CorpusNotFound as e:
        raise UserError(str(e)) from None
    views = load_views()
    if view_name not in views:
        raise UserError(f"unknown view {view_name}; configs/views.yaml has {', '.join(views)}")
    return corpus, views[view_name]


def _label_set(name: str, min_support: int | None):

    sets = load_label_sets()
    if name not in sets:
        raise UserError(f"unknown label set {name!r}; configs/label_sets.yaml has {', '.join(sets)}")
    return sets[name] if min_support is None else dataclasses.replace(sets[name], min_support=min_support)


def _run(fn, *args, **kwargs):
    """Call a task function, turning unusable indexes and label sets into one clear message."""
    try:
        return fn(*args, **kwargs)
    except (ReadbackError, TooFewExamples) as e:
        raise UserError(str(e)) from None


def _settings(cls, params: dict, seeds: str):
    """The task's settings from the command's options (its generated ones taken out of `params`) and --seeds."""
    try:
        return build(cls, params, seeds=_seeds(seeds))
    except ValueError as e:  # a setting the task's dataclass rejects
        raise UserError(str(e)) from None


def _common(f):
    for opt in reversed((
        click.option("--corpus", "corpus_name", default=None,
                     help="Corpus name or folder (default: the configured default, else the only imported one)."),
        click.option("--model", "model_id", type=MODEL, required=True, help=MODEL_HELP),
        click.option("--view", "view_name", default="TAC", show_default=True, help="View whose vectors are used."),
    )):
        f = opt(f)
    return f


def _label_options(f):
    for opt in reversed((
        click.option("--label-set", "label_set", default="cpc_subclass", show_default=True,
                     help="Label set from configs/label_sets.yaml."),
        click.option("--min-support", type=click.IntRange(min=1), default=None,
                     help="Override the label set's min_support."),
        click.option("--seeds", default="0,1,2,3,4", show_default=True, help="Comma-separated seeds."),
        click.option("--vectors", type=click.Choice(["task", "document"]), default="task", show_default=True,
                     help="task: the view's vectors under the model's prompt for this task where it differs "
                          "from the document prompt (MTEB's convention); document: the document vectors."),
    )):
        f = opt(f)
    return f


def _vectors_line(manifest: dict) -> str:
    """Which vectors a result read: the field and the prompt that made them."""
    v = manifest["vectors"]
    return f"{v['field']} ({'the ' + v['task'] if v['task'] else 'the document'} prompt {v['prompt']!r})"


def _seeds(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(s) for s in comma_items(text))
    except ValueError:
        raise UserError(f"--seeds {text!r}: expected comma-separated integers, e.g. 0,1,2") from None


@click.group()
def vectors() -> None:
    """Vectors read back from an index, or imported into the embedding cache."""


@vectors.command("export")
@_common
@click.option("--force", is_flag=True, help="Export again even when a matching export exists.")
def export(corpus_name, model_id, view_name, force) -> None:
    """Stream a view's vectors and codes out of the index into the cache (checked against corpus and cache)."""
    corpus, view = _resolve(corpus_name, view_name)
    rep = _run(export_vectors, make_client(), ViewVectors(corpus, view, model_id), force=force)
    exp = rep.export
    how = "reused" if rep.reused else f"streamed in {rep.seconds:.1f}s ({rep.vectors_per_s:.0f} vectors/s)"
    click.echo(f"{exp.manifest['index']} {exp.manifest['field']}: {len(exp.ids)} x {exp.manifest['dim']} {how}")
    for line in rep.checks:
        click.echo(f"ok    {line}")
    click.echo(f"-> {exp.path}")


@vectors.command("import")
@_common
@click.option("--npy", "npy", type=click.Path(path_type=Path), default=None,
              help="Vectors as a .npy float matrix [n, dim]; its row ids come from --ids or --beir-corpus.")
@click.option("--ids", type=click.Path(path_type=Path), default=None, help="Text file of the .npy's row ids, one a line.")
@click.option("--beir-corpus", type=click.Path(path_type=Path), default=None,
              help="A BEIR corpus.jsonl whose _id order is the .npy's row order.")
@click.option("--parquet", type=click.Path(path_type=Path), default=None, help="Parquet with an id and a vector column.")
@click.option("--id-column", default="id", show_default=True, help="Parquet: the id column.")
@click.option("--vector-column", default="vector", show_default=True, help="Parquet: the vector (list) column.")
@click.option("--precision", type=click.Choice(["float32", "float16", "bfloat16"]), required=True,
              help="The precision the model ran at when it made them (part of the cache key).")
@dataclass_options(PromptChoice)
@click.pass_context
def import_cmd(ctx, corpus_name, model_id, view_name, npy, ids, beir_corpus, parquet, id_column, vector_column,
               precision, **prompts) -> None:
    """Bring embeddings made elsewhere into the embedding cache (checked; `evalctl index` then uses them)."""
    if (npy is None) == (parquet is None):
        raise UserError("give the vectors as --npy (with --ids or --beir-corpus) or as --parquet")
    corpus, view = _resolve(corpus_name, view_name)
    src = read_npy(npy, ids, beir_corpus) if npy else read_parquet(parquet, id_column, vector_column)
    command = shlex.join(["evalctl", *ctx.command_path.split()[1:], *(
        s for p in ctx.command.params if ctx.params.get(p.name) is not None for s in (p.opts[0], str(ctx.params[p.name])))])
    rep = import_vectors(corpus, view, get_model(model_id), src, precision=precision,
                         prompts=build(PromptChoice, prompts), command=command)
    click.echo(f"{rep.n_rows} rows: {rep.n_imported} vectors imported (one per distinct text), {rep.n_already} "
               f"already held, {rep.n_no_text} rows of records without view {view.name} text")
    click.echo(f"coverage: {rep.n_covered} of {rep.n_view_records} records of view {view.name} in corpus {corpus.name} "
               f"({100 * rep.coverage:.1f}%)" + (f"; missing e.g. {', '.join(rep.missing_example)} (evalctl index "
                                                 "encodes them, where the model's weights are here)"
                                                 if rep.missing_example else ""))
    click.echo(f"-> {rep.cache_dir}")


@vectors.command("merge")
@_common
@click.argument("sources", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False, path_type=Path))
@dataclass_options(PromptChoice)
def merge_cmd(corpus_name, model_id, view_name, sources, **prompts) -> None:
    """Merge the caches of `evalctl encode --shard i/n` runs (SOURCES: their EVALCTL_CACHE folders) into this one,
    checking that every text of the view is there, each under this machine's key and once."""
    corpus, view = _resolve(corpus_name, view_name)
    rep = merge_caches(corpus, view, get_model(model_id), list(sources), prompts=build(PromptChoice, prompts))
    for src, n in rep.per_source.items():
        click.echo(f"{src}: {n} texts of view {view.name}")
    click.echo(f"{rep.n_records} records, {rep.n_texts} distinct texts: all present; {rep.n_merged} merged, "
               f"{rep.n_already} already here, {rep.n_in_several} held by several sources (the same vectors, kept once)")
    click.echo(f"-> {rep.cache_dir}")


@click.command()
@_common
@_label_options
@dataclass_options(ClassifySettings)
def classify(corpus_name, model_id, view_name, label_set, min_support, seeds, vectors, **params) -> None:
    """Multi-label classification probes (logistic regression, kNN) on the view's vectors."""
    corpus, view = _resolve(corpus_name, view_name)
    spec = _label_set(label_set, min_support)
    settings = _settings(ClassifySettings, params, seeds)
    res = _run(run_classification, make_client(), ViewVectors(corpus, view, model_id, vectors), spec, settings)
    m = res.manifest
    click.echo(f"{m['index']} {_vectors_line(m)}, label set {spec.name}: {m['n_records']} records, "
               f"{m['n_labels']} labels ({len(m['labels_dropped'])} dropped below support {spec.min_support}, "
               f"{m['n_unlabelled']} records without a kept label), {len(settings.seeds)} splits "
               f"{1 - settings.test_size:.0%}/{settings.test_size:.0%}")
    for probe, summary in m["summary"].items():
        click.echo(f"  {probe:<7}" + "  ".join(f"{k} {100 * v['mean']:.1f} ± {100 * v['sd']:.1f}"
                                               for k, v in summary.items()))
    click.echo(f"-> {res.path}")


@click.command("cluster")
@_common
@_label_options
@dataclass_options(ClusterSettings)
def cluster_cmd(corpus_name, model_id, view_name, label_set, min_support, seeds, vectors, **params) -> None:
    """MiniBatchKMeans (k = gold classes) on the view's vectors: V-measure, ARI, NMI, AMI."""
    corpus, view = _resolve(corpus_name, view_name)
    spec = _label_set(label_set, min_support)
    settings = _settings(ClusterSettings, params, seeds)

    if settings.levels and not LABEL_SOURCES.get(spec.source).levelled:
        raise UserError(f"--levels: label set {spec.name!r} holds free labels, which have no code levels")
    res = _run(run_clustering, make_client(), ViewVectors(corpus, view, model_id, vectors), spec, settings)
    m = res.manifest
    click.echo(f"{m['index']} {_vectors_line(m)}, label set {spec.name}, rule {settings.rule}, {len(settings.seeds)} seeds")
    for level, s in m["summary"].items():
        click.echo(f"  {level:<9} n={s['n']} k={s['k']}  " + "  ".join(
            f"{k} {100 * s[k]['mean']:.1f} ± {100 * s[k]['sd']:.1f}" for k in ("v_measure", "ari", "nmi", "ami")))
    click.echo(f"-> {res.path}")


@click.command()
@click.option("--task", type=click.Choice(["classification", "clustering"]), required=True)
@click.option("--corpus", "corpus_name", default=None, help="Only this corpus.")
@click.option("--format", "fmt", type=click.Choice(["markdown", "csv"]), default="markdown", show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write here, not stdout.")
def tables(task, corpus_name, fmt, out) -> None:
    """Classification or clustering results across models and views, with bootstrap 95% CIs."""
    from evalctl.study.tasks.labels.tables import task_table, to_csv, to_markdown  # pandas, scipy

    if out:
        check_file(out)
    rows = task_table(task, TASKS.get(task).unit_metrics, corpus_name)
    text = to_markdown(rows, task) if fmt == "markdown" else to_csv(rows)
    if out:
        write_into(out.parent, out.name, text + "\n")
        click.echo(f"{len(rows)} rows -> {out}")
    else:
        click.echo(text)
