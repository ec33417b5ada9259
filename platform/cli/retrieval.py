"""`evalctl retrieve | evaluate | compare | fusion-sweep | latency`: citation retrieval runs, metrics, tables and
serving latency."""

from __future__ import annotations

import contextlib
from pathlib import Path

import click

from evalctl.cli.dataclass_options import build, dataclass_options
from evalctl.cli.params import comma_items
from evalctl.config_files import SpecError
from evalctl.corpus.default import corpus_for_command
from evalctl.corpus.store import CorpusNotFound
from evalctl.errors import UserError
from evalctl.evaluators.fusion.client_fusion import FusionUnsupported
from evalctl.evaluators.fusion.search_pipelines import NeuralSearchMissing
from evalctl.evaluators.retrieval.fusion_sweep import SWEEP_SETS, fusion_sweep as sweep
from evalctl.evaluators.retrieval.latency import LatencyError, LatencyParams, measure_latency
from evalctl.evaluators.retrieval.params import RetrievalOptions, RetrievalParams
from evalctl.evaluators.retrieval.retrieve import (RetrievalError, SearchFailed, retrieval_spec,
                                                   retrieve as run_retrieval)
from evalctl.evaluators.retrieval.serving_cost import RULES as COST_RULES, cost_cells, latest_cost, unmeasured
from evalctl.evaluators.scoring.metrics import ann_loss, evaluate_and_store
from evalctl.evaluators.scoring.runs import RunNotFound, load_run
from evalctl.evaluators.scoring.significance_params import StatsProtocol
from evalctl.indexers.model_loader import ModelLoadError
from evalctl.opensearch.connection import make_client
from evalctl.output_folder import check_file, check_folder, claim_folder, write_into

FORMATS = {"md": "md", "latex": "tex", "csv": "csv"}


@contextlib.contextmanager
def _user_errors():
    """Known failures become one-line UserErrors; anything else keeps its traceback."""
    from evalctl.evaluators.scoring.compare import NotComparable  # pandas, scipy

    try:
        yield
    except (CorpusNotFound, FileNotFoundError, RetrievalError, SearchFailed, RunNotFound, NotComparable,
            NeuralSearchMissing, FusionUnsupported, SpecError, ModelLoadError, LatencyError) as e:
        raise UserError(str(e)) from None


_corpus_option = click.option("--corpus", "corpus_name", default=None, help="Corpus name or folder (default: the "
                              "configured default, else the only imported one).")


def _spec(params: dict, **given):
    """The RetrievalSpec of a command's options (`params`: RetrievalParams' taken out) and `given` fields."""
    return retrieval_spec(build(RetrievalParams, params, corpus=corpus_for_command(params.pop("corpus_name")), **given))


def _echo_scores(label: str, scores) -> None:
    click.echo(f"{label}: {scores.n_queries} queries  " + "  ".join(f"{m}={v:.4f}" for m, v in scores.mean.items()))


@click.command()
@_corpus_option
@dataclass_options(RetrievalParams, exclude=("corpus",))
@dataclass_options(RetrievalOptions)
@click.option("--rerun", is_flag=True, help="Search again even if this exact run is stored.")
def retrieve(rerun, **params) -> None:
    """Run one retrieval method over a qrels split; store the run and its metrics."""
    spec = _spec(params)
    opts = build(RetrievalOptions, params, reuse=not rerun)
    client = make_client()
    with _user_errors():
        run = run_retrieval(client, spec, opts)
        m = run.manifest
        click.echo(f"run {run.id}  ({run.result.path})")
        click.echo(f"  {m.get('n_queries')} queries, {m.get('n_empty')} with no hit, {m.get('n_no_text', 0)} without "
                   f"{spec.qview} text, depth {spec.k}" + (f", engine took {m['took_ms']} ms" if "took_ms" in m else ""))
        _echo_scores("  metrics", evaluate_and_store(run))
        if spec.method == "exact":
            dense = run_retrieval(client, spec.with_(method="dense"), RetrievalOptions(
                batch_size=opts.batch_size, concurrency=opts.concurrency, progress=False))
            click.echo("  ANN vs exact: " + "  ".join(f"{k_}={v:.4f}" for k_, v in ann_loss(dense, run).items()))


@click.command()
@click.argument("runs", nargs=-1, required=True)
@click.option("--domain", type=click.Choice(["IN", "OUT", "UNKNOWN"]), default=None,
              help="Score against the pairs of this domain only (queries without one are dropped).")
def evaluate(runs, domain) -> None:
    """Score stored runs (result folders or ids) with nDCG@10/100, Recall@10/100, MAP@100, MRR@10."""
    with _user_errors():
        for ref in runs:
            run = load_run(ref)
            _echo_scores(f"{run.id} {run.label}", evaluate_and_store(run, domain=domain))


@click.command()
@click.argument("runs", nargs=-1, required=True)
@click.option("--baseline", default=None, help="Test every run against this one only (default: all pairs).")
@click.option("--format", "fmt", type=click.Choice(list(FORMATS)), default="md", show_default=True)
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Also write comparison.md, .tex and .csv and ranx's tables ranx.tex, ranx.md here.")
@click.option("--latex", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write ranx's LaTeX table (Report.to_latex) to this file.")
@click.option("--markdown", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write ranx's table as Markdown to this file.")
@dataclass_options(StatsProtocol)
@click.option("--cost", is_flag=True, help="Add each run's serving cost: latency and QPS of its newest `evalctl "
              "latency`, index size and HNSW memory, document-encoding time.")
@click.option("--force", is_flag=True, help="Write --out into a folder holding files that are not an evalctl "
              "comparison (replacing the files of the same names).")
def compare(runs, baseline, fmt, out, latex, markdown, cost, force, **params) -> None:
    """Comparison table of runs: means with 95% CIs, paired tests with Holm correction, IN/OUT and
    jurisdiction breakdowns; ranx's Report tables with --latex / --markdown."""
    from evalctl.evaluators.scoring.compare import compare_runs, ranx_latex, ranx_markdown, render  # pandas, scipy

    with _user_errors():
        for path in (latex, markdown):
            if path is not None:
                check_file(path)
        if out:
            check_folder(out, "comparison", force=force)
        loaded = [load_run(r) for r in runs]
        base = load_run(baseline) if baseline else None
        rep = compare_runs(loaded, base, protocol=build(StatsProtocol, params))
        corpus = loaded[0].manifest["corpus"]  # one for all: compare_runs refuses runs of two corpora
        manifests = {r.id: r.manifest for r in (*loaded, base) if r is not None}
        measured = [(latest_cost(corpus, i), unmeasured(manifests[i])) for i in rep.run_ids] if cost else []

    def shown(f: str) -> str:
        costs = [cost_cells(c, text=f != "csv", why_none=why) for c, why in measured] if cost else None
        return render(rep, f, costs, COST_RULES)

    click.echo(shown(fmt))
    if out:
        claim_folder(out, "comparison")
        for f, ext in FORMATS.items():
            write_into(out, f"comparison.{ext}", shown(f))
        write_into(out, "ranx.tex", ranx_latex(rep))
        write_into(out, "ranx.md", ranx_markdown(rep))
        click.echo(f"written to {out}/comparison.{{md,tex,csv}} and {out}/ranx.{{tex,md}}")
    for path, table in ((latex, ranx_latex), (markdown, ranx_markdown)):
        if path is not None:
            write_into(path.parent, path.name, table(rep))
            click.echo(f"ranx table written to {path}")


@click.command("fusion-sweep")
@_corpus_option
@dataclass_options(RetrievalParams, exclude=("corpus", *SWEEP_SETS))
@dataclass_options(RetrievalOptions)
@click.option("--weights", default="0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9", show_default=True,
              help="Dense weights to try on the dev queries.")
@click.option("--mode", type=click.Choice(["native", "client", "auto"]), default="native", show_default=True,
              help="native: inline neural-search pipelines; client: ranx fusion of stored runs; auto: native when "
                   "the node has neural-search, else client.")
def fusion_sweep(weights, mode, **params) -> None:
    """Tune the BM25/dense weight on dev queries, report the chosen weight on --split (test)."""
    try:
        grid = [float(w) for w in comma_items(weights)]
    except ValueError:
        raise UserError(f"--weights {weights!r}: expected comma-separated numbers") from None
    spec = _spec(params, method="hybrid")
    with _user_errors():
        res = sweep(make_client(), spec, grid, mode=None if mode == "auto" else mode,
                    options=build(RetrievalOptions, params))
    click.echo(f"fusion sweep ({res.mode}, {spec.fusion.normalization}/{spec.fusion.combination}), "
               f"{res.metric} on dev queries:")
    for p in res.points:
        click.echo(f"  dense weight {p.dense_weight:.2f}: {p.dev_score:.4f}" + ("  <- chosen" if p.dense_weight == res.best.dense_weight else ""))
    click.echo(f"{spec.split} queries, dense weight {res.best.dense_weight:.2f}: {res.metric}={res.test_score:.4f}  "
               f"run {res.test_run.id}")


def _ms(spread, attr: str) -> str:
    return "-" if spread is None else f"{getattr(spread, attr):.1f}"


@click.command()
@_corpus_option
@dataclass_options(RetrievalParams, exclude=("corpus",))
@dataclass_options(LatencyParams)
def latency(**params) -> None:
    """Serving latency of one retrieval system: each query one `_search` request, after a warm-up, at each
    --concurrency; client latency and the engine's took (p50/p95/p99), QPS and errors, stored with the host's
    and the node's settings. Query encoding happens before timing and is not counted."""
    spec = _spec(params)
    with _user_errors():
        how = build(LatencyParams, params)
        lat = measure_latency(make_client(pool_size=max(how.concurrency)), spec, how)
    m = lat.result.manifest
    click.echo(f"latency of {spec.method} on {m['index']} ({spec.split or 'all'} queries; {m['warmup_sent']} warm-up "
               f"queries not measured; query encoding not counted)")
    click.echo(f"{'concurrency':>11} {'n':>5} {'errors':>6} {'client p50/p95/p99 ms':>22} {'took p50/p95/p99 ms':>20} "
               f"{'QPS':>8}")
    for p in lat.passes:
        c, t = p.client_ms, p.took_ms
        click.echo(f"{p.concurrency:>11} {p.sent:>5} {p.errors:>6} "
                   f"{'/'.join(_ms(c, a) for a in ('p50', 'p95', 'p99')):>22} "
                   f"{'/'.join(_ms(t, a) for a in ('p50', 'p95', 'p99')):>20} {p.qps:>8.1f}"
                   + ("  (time limit)" if p.stopped_by == "time limit" else ""))
        if p.first_error:
            click.echo(f"  first error: {p.first_error}")
    load = m["load_average"]
    click.echo(f"load average {load['before'][0]:.2f} -> {load['after'][0]:.2f} on {m['client_host']['cpus']} CPUs"
               + ("  (busy: other work held the machine)" if m["busy"] else ""))
    click.echo(f"result {lat.result.id}  ({lat.result.path})")
