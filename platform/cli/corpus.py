"""`evalctl corpus ...`: import, qrels, stats, export. Each command calls one library function."""

from __future__ import annotations

from pathlib import Path

import click

from evalctl.cli.choices import RegistryChoice
from evalctl.config_files import SpecError, build
from evalctl.corpus.import_formats.problems import CorpusImportError
from evalctl.corpus.import_formats.registry import IMPORT_FORMATS
from evalctl.corpus.importer import import_corpus
from evalctl.corpus.patent_record import CITATION_TYPES
from evalctl.corpus.qrels import QrelsSpec, build_qrels, load_qrels
from evalctl.corpus.stats import corpus_stats, format_stats
from evalctl.corpus.store import CorpusNotFound, load_corpus
from evalctl.datasets.fetch import dataset_sources
from evalctl.errors import UserError


def _load(name_or_path: str):
    try:
        return load_corpus(name_or_path)
    except CorpusNotFound as e:
        raise UserError(str(e)) from None


@click.group()
def corpus() -> None:
    """Import patent corpora, build citation qrels, print statistics."""


@corpus.command("import")
@click.argument("sources", nargs=-1, type=click.Path(exists=True, path_type=Path))
@click.option("--dataset", default=None, help="A dataset of the catalogue (`evalctl data list`), fetched on first use, "
              "instead of SOURCES; its format and name are the defaults.")
@click.option("--format", "fmt", default=None, type=RegistryChoice(IMPORT_FORMATS),
              help="Source layout (docs/corpus-format.md). beir/dapfam take one folder; ops files and/or folders.")
@click.option("--name", default=None, help="Corpus name: stored under <cache>/corpora/<name>/.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None, help="Store here instead.")
@click.option("--strict", is_flag=True, help="Any problem (bad row, code, date, encoding ...) aborts the import.")
@click.option("--label", "labels", multiple=True, help="Landscape label added to every record (repeatable).")
@click.option("--overwrite", is_flag=True, help="Replace a different corpus already stored under that name.")
@click.option("--documents", type=click.Choice(["publication", "family"]), default="publication", show_default=True,
              help="family: one record per family (text from its best-described member, the others as aliases).")
@click.option("--show", type=click.IntRange(min=0), default=100, show_default=True, help="Problems to print (all are in problems.jsonl).")
def import_cmd(sources, dataset, fmt, name, out, strict, labels, overwrite, documents, show) -> None:
    """Import SOURCES (files, or one folder for beir/dapfam), or a catalogue --dataset, into a corpus."""
    provenance = None
    if dataset:
        if sources:
            raise UserError("give SOURCES or --dataset, not both")
        fetched = dataset_sources(dataset, progress=True)
        if fmt and fmt != fetched.format:
            raise UserError(f"dataset {dataset} is read as --format {fetched.format}, not {fmt}")
        fmt, sources, name = fetched.format, fetched.sources, name or (None if out else dataset)
        provenance = fetched.provenance()
    elif not sources:
        raise UserError("give the SOURCES to import, or --dataset NAME (`evalctl data list`)")
    elif not fmt:
        raise UserError("--format is needed with SOURCES (one of " + ", ".join(IMPORT_FORMATS) + ")")
    try:
        res = import_corpus(fmt, list(sources), name=name, out=out, strict=strict, labels=labels, overwrite=overwrite,
                            documents=documents, dataset=provenance)
    except CorpusImportError as e:
        raise UserError(str(e)) from None
    for p in res.problems[:show]:
        click.echo(f"  {p}", err=True)
    if len(res.problems) > show:
        click.echo(f"  ... {len(res.problems) - show} more in {res.corpus.path / 'problems.jsonl'}", err=True)
    m = res.corpus.manifest
    state = "unchanged (same content hash already stored)" if res.unchanged else "imported"
    click.echo(f"{state}: {res.corpus.name} at {res.corpus.path}")
    click.echo(f"  rows read {res.rows_read}, records {m['record_count']}, queries {m['queries_count']}")
    if m["languages"]:
        click.echo("  text languages: " + ", ".join(f"{k} {v}" for k, v in m["languages"].items()))
    click.echo("  problems: " + (", ".join(f"{k} {v}" for k, v in res.problem_counts.items()) or "none"))
    click.echo(f"  content hash {m['content_hash']}")


@corpus.command("qrels")
@click.argument("corpus_name")
@click.option("--name", default="citations", show_default=True, help="Name of the qrels set.")
@click.option("--source", type=click.Choice(["citations", "known-item"]), default="citations", show_default=True,
              help="citations: the citation graph; known-item: each patent is relevant to a query made from its "
                   "own text (a sanity task for corpora without citations).")
@click.option("--within-view", "within_views", multiple=True,
              help="known-item: only patents that render in this view become queries (repeatable).")
@click.option("--direction", type=click.Choice(["cited", "citing", "both"]), default="cited", show_default=True,
              help="cited: documents the query cites; citing: documents citing it.")
@click.option("--level", type=click.Choice(["publication", "family"]), default="publication", show_default=True)
@click.option("--citation-type", "citation_types", multiple=True,
              help="Only these citation types (repeatable; default all). Search reports only: "
                   "--citation-type search_report --citation-type international_search.")
@click.option("--query-language", "query_languages", multiple=True, default=("en",), show_default=True,
              help="Queries need title/abstract in these languages where the source records them (OPS); "
                   "'any' for no filter (repeatable).")
@click.option("--domain-scheme", type=click.Choice(["ipc", "cpc"]), default="ipc", show_default=True)
@click.option("--domain-chars", type=click.Choice(["3", "4"]), default="3", show_default=True,
              help="Code prefix length for IN/OUT: 3 = class (A61), 4 = subclass (A61K).")
@click.option("--dev-fraction", type=float, default=0.2, show_default=True)
@click.option("--train-fraction", type=float, default=0.0, show_default=True,
              help="Queries held out for fine-tuning; their citation pairs go to train_pairs.tsv.")
@click.option("--seed", default="evalctl", show_default=True)
@click.option("--overwrite", is_flag=True)
def qrels_cmd(corpus_name, name, source, within_views, direction, level, citation_types, query_languages,
              domain_scheme, domain_chars, dev_fraction, train_fraction, seed, overwrite) -> None:
    """Build retrieval qrels from CORPUS_NAME's citation graph, or a known-item task."""
    try:
        spec = build(QrelsSpec, dict(name=name, source=source.replace("-", "_"), within_views=list(within_views),
                                     direction=direction, level=level,
                                     citation_types=list(citation_types or CITATION_TYPES),
                                     query_languages=[x for x in query_languages if x != "any"],
                                     domain_scheme=domain_scheme, domain_chars=int(domain_chars),
                                     dev_fraction=dev_fraction, train_fraction=train_fraction, seed=seed),
                     "evalctl corpus qrels options")
        q = build_qrels(_load(corpus_name), spec, overwrite=overwrite)
    except (SpecError, FileExistsError) as e:
        raise UserError(str(e)) from None
    m = q.manifest
    click.echo(f"qrels {q.name} ({m['kind']}) at {q.path}")
    if m["kind"] == "citations":
        click.echo(f"  citations {m['citations']}, resolved inside the corpus {m['citations_resolved']}, "
                   f"edges {m['citation_edges']}; records whose text language may not ask {m['records_not_asking']}")
        if m.get("citations_unresolved_like_in_set"):
            click.echo(f"  warning: {m['citations_unresolved_like_in_set']} citations did not resolve although they look "
                       "like numbers of this corpus written another way (docs/corpus-format.md, normalisation)")
    else:
        click.echo(f"  patents not rendering in {', '.join(spec.within_views)}: {m['records_not_rendering']}")
    click.echo(f"  queries {', '.join(f'{k} {v}' for k, v in sorted(m['queries'].items())) or 'none'}; pairs {m['pairs']}; "
               f"domains {m['domains']}" + (f"; train pairs {m['train_pairs']}" if "train_pairs" in m else ""))


@corpus.command("stats")
@click.argument("corpus_name")
def stats_cmd(corpus_name) -> None:
    """Sizes, view coverage, label cardinality, queries, IN/OUT and jurisdiction shares."""
    try:
        click.echo(format_stats(corpus_stats(_load(corpus_name))))
    except SpecError as e:
        raise UserError(str(e)) from None


@corpus.command("export")
@click.argument("corpus_name")
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["beir", "dapfam"]), default="beir", show_default=True)
@click.option("--view", required=True, help="Document view (configs/views.yaml), e.g. TA.")
@click.option("--query-view", default=None, help="Query view (default: --view).")
@click.option("--qrels", "qrels_name", default="citations", show_default=True, help="Qrels set.")
@click.option("--split", default="test", show_default=True)
@click.option("--force", is_flag=True, help="Write into OUT_DIR even when it holds files that are not an evalctl export.")
def export_cmd(corpus_name, out_dir, fmt, view, query_view, qrels_name, split, force) -> None:
    """Write CORPUS_NAME's landscape (view text, queries, qrels) as BEIR or DAPFAM files in OUT_DIR."""
    from evalctl.corpus.export import ExportError, export_landscape  # pyarrow

    corpus = _load(corpus_name)
    try:
        s = export_landscape(corpus, load_qrels(corpus, qrels_name), fmt, out_dir, view=view, split=split,
                             query_view=query_view, force=force)
    except (ExportError, FileNotFoundError, SpecError) as e:
        raise UserError(str(e)) from None
    click.echo(f"exported {s.corpus} ({s.format}, view {s.view}, queries {s.query_view}, {s.qrels}/{s.split}) to {out_dir}")
    click.echo(f"  documents {s.documents}, queries {s.queries}, pairs {s.pairs} "
               f"(to documents outside the view {s.pairs_outside_view}), excluded pairs {s.excluded_pairs}")
    if s.queries_without_text:
        click.echo(f"  {s.queries_without_text} {s.split} queries do not render in view {s.query_view}: left out "
                   "(evalctl scores them 0)")
