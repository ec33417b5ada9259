"""`evalctl finetune`, `evalctl recipes list`, `evalctl pairs`, `evalctl transfer`: thin commands over
evalctl.finetune.train / pairs / recipes and evalctl.evaluators.tasks.transfer."""

from __future__ import annotations

import json

import click

from evalctl.cli.choices import MODEL, MODEL_HELP
from evalctl.cli.dataclass_options import build, dataclass_options
from evalctl.config_files import SpecError
from evalctl.corpus.store import CorpusNotFound
from evalctl.errors import UserError
from evalctl.evaluators.retrieval.retrieve import RetrievalError
from evalctl.evaluators.tasks.transfer_params import TransferParams
from evalctl.finetune.pairs import LeakageError, PairError, build_pairs
from evalctl.finetune.params import FinetuneOptions, FinetuneParams
from evalctl.finetune.recipes import get_recipe, load_recipes
from evalctl.finetune.train import FinetuneError, finetune as run_finetune, registered_models
from evalctl.indexers.model_loader import ModelLoadError
from evalctl.opensearch.connection import make_client


def _user_errors():
    """The exception types that are bad input, not bugs (imported lazily: torch is slow to import)."""
    return (SpecError, CorpusNotFound, FinetuneError, ModelLoadError, PairError, LeakageError, FileNotFoundError)


def _pair_options(f):
    for opt in reversed([
        click.option("--recipe", "recipe_id", required=True, help="Recipe id (`evalctl recipes list`), e.g. R3."),
        click.option("--corpus", "corpora", multiple=True, required=True,
                     help="Training corpus (repeatable: the recipe's generators run on each)."),
        click.option("--match-size", type=click.IntRange(min=1), default=None,
                     help="Subsample to exactly N pairs (seeded), so recipes compare at equal size."),
        click.option("--seed", type=int, default=13, show_default=True),
        click.option("--qrels", "qrels_name", default="citations", show_default=True,
                     help="Qrels set whose train side feeds citation pairs and whose dev/test side is held out."),
        click.option("--guard", multiple=True,
                     help="Evaluation corpus not trained on whose dev/test queries must not appear (repeatable)."),
    ]):
        f = opt(f)
    return f


def _print_pairs(summary: dict) -> None:
    click.echo(f"recipe {summary['recipe']}: seed {summary['seed']}, size {summary['size'] or 'all'}")
    for source, per_corpus in summary["generated"].items():
        made = ", ".join(f"{c} {n}" for c, n in per_corpus.items())
        click.echo(f"  {source}: generated {sum(per_corpus.values())} ({made}), used {summary['used'].get(source, 0)}")
        if source in summary["stats"]:
            click.echo(f"    {summary['stats'][source]}")
        for note in summary["notes"].get(source, []):
            click.echo(f"    note: {note}")
    leak = summary["leakage_check"]
    held = ", ".join(f"{h['corpus']}/{h['qrels'] or '-'}: {h['queries']} queries, {h['records']} records"
                     for h in leak["held_out"])
    click.echo(f"  leakage check: {leak['pairs_checked']} pairs checked, 0 violations (held out: {held})")


@click.group("recipes")
def recipes() -> None:
    """Fine-tuning recipes (configs/recipes/)."""


@recipes.command("list")
def list_recipes() -> None:
    """Every recipe with its generators, loss and training defaults."""
    try:
        specs = load_recipes()
    except SpecError as e:
        raise UserError(str(e)) from None
    for r in specs.values():
        srcs = ", ".join(f"{s.name}({s.generator}, w={s.weight:g})" for s in r.sources)
        origin = "named by the study" if r.named_by_study else "our reading"
        t = r.training
        click.echo(f"{r.id}  {r.name} [{origin}]: {srcs}; loss {r.loss.name} scale {r.loss.scale:g}; "
                   f"epochs {t.epochs:g}, batch {t.batch_size}, lr {t.learning_rate:g}, max_len {t.max_seq_length}")


@click.command("pairs")
@_pair_options
@click.option("-n", "--examples", type=click.IntRange(min=0), default=2, show_default=True, help="Example pairs shown per source.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def pairs(recipe_id, corpora, match_size, seed, qrels_name, guard, examples, as_json) -> None:
    """Preview a recipe's training pairs: counts per source, the leakage check, examples."""
    try:
        ps = build_pairs(get_recipe(recipe_id), list(corpora), match_size=match_size, seed=seed,
                         qrels_name=qrels_name, guard=guard)
    except _user_errors() as e:
        raise UserError(str(e)) from None
    if as_json:
        click.echo(json.dumps(ps.summary(), indent=1))
        return
    _print_pairs(ps.summary())
    for source, items in ps.pairs.items():
        for p in items[:examples]:
            click.echo(f"  [{source}] {' | '.join(m[0] for m in p.members)}")
            click.echo(f"     anchor:   {p.anchor[:120]!r}")
            click.echo(f"     positive: {p.positive[:120]!r}")
            if p.negative is not None:
                click.echo(f"     negative: {p.negative[:120]!r}")


@click.group("finetune", invoke_without_command=True)
@click.option("--model", "model_id", type=MODEL, help="Base model. " + MODEL_HELP)
@click.option("--recipe", "recipe_id", help="Recipe id (`evalctl recipes list`), e.g. R3.")
@click.option("--corpus", "corpora", multiple=True, help="Training corpus (repeatable).")
@dataclass_options(FinetuneParams)
@dataclass_options(FinetuneOptions)
@click.pass_context
def finetune(ctx, model_id, recipe_id, corpora, **params) -> None:
    """Fine-tune a model with a recipe and register it as a new model (resumable from checkpoints)."""
    if ctx.invoked_subcommand is not None:
        return
    missing = [o for o, v in (("--model", model_id), ("--recipe", recipe_id), ("--corpus", corpora)) if not v]
    if missing:
        raise UserError(f"{', '.join(missing)} required (or use the subcommand `list`)")

    try:
        res = run_finetune(model_id, recipe_id, list(corpora), build(FinetuneParams, params),
                           build(FinetuneOptions, params))
    except _user_errors() as e:
        raise UserError(str(e)) from None
    _print_pairs(res.pairs)
    if res.skipped:
        click.echo(f"{res.model_id}: already trained the same way; nothing to do ({res.model_dir})")
        return
    resumed = f", resumed from {res.resumed_from}" if res.resumed_from else ""
    click.echo(f"trained {res.steps} steps in {res.seconds:.0f}s, train loss {res.train_loss:.4f}{resumed}")
    click.echo(f"registered model {res.model_id}  ({res.spec_file})")
    click.echo(f"  weights: {res.model_dir}")
    click.echo(f"  next: evalctl index --corpus <corpus> --model {res.model_id}")


@finetune.command("list")
def list_finetuned() -> None:
    """Fine-tuned models registered in this cache, with their lineage."""
    specs = registered_models()
    if not specs:
        click.echo("no fine-tuned models registered (evalctl finetune --model M --recipe R --corpus C)")
    for s in specs.values():
        lin = s.lineage or {}
        t = lin.get("training", {})
        click.echo(f"{s.id}  base={lin.get('base_model')}  recipe={lin.get('recipe', {}).get('id')}  "
                   f"corpora={','.join(c['name'] for c in lin.get('corpora', []))}  pairs={lin.get('pairs', {}).get('used')}  "
                   f"seed={lin.get('seed')}  steps={t.get('max_steps')}  batch={t.get('batch_size')}  rev={s.revision}")


@click.command("transfer")
@click.option("--tuned", multiple=True, required=True, help="Fine-tuned model id (repeatable: Holm over all).")
@click.option("--base", type=MODEL, default=None, help="Base model (default: each tuned model's lineage base).")
@dataclass_options(TransferParams)
def transfer(tuned, base, **params) -> None:
    """Compare fine-tuned models with their bases on another corpus: paired tests, Holm-corrected."""
    from evalctl.evaluators.tasks.transfer import save_report, transfer as run_transfer  # pandas, scipy

    asked = build(TransferParams, params)
    try:
        rep = run_transfer(make_client(), list(tuned), asked, base=base)
    except (*_user_errors(), RetrievalError, ValueError) as e:
        raise UserError(str(e)) from None
    click.echo(rep.table(), nl=False)
    click.echo(f"{len(rep.degraded)} of {len(rep.rows)} combinations degrade significantly "
               f"({asked.test}, Holm, alpha {asked.alpha}): {', '.join(rep.degraded) or 'none'}")
    click.echo(f"saved: {save_report(rep).path}")
