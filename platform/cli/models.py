"""`evalctl models list | show | add` and `evalctl encode`: thin commands over evalctl.models and
indexers.encode_corpus."""

from __future__ import annotations

import click

from evalctl.cli.choices import MODEL, MODEL_HELP
from evalctl.cli.dataclass_options import build, dataclass_options
from evalctl.cli.runtime_options import runtime_options
from evalctl.atomic import write_text
from evalctl.config_files import SpecError
from evalctl.errors import UserError
from evalctl.indexers.embedding_cache import read_runs
from evalctl.indexers.encode_corpus import encode_corpus
from evalctl.indexers.encode_cost import cost_line, entry_cost
from evalctl.indexers.encode_options import EncodeOptions
from evalctl.indexers.encoder import parse_shard
from evalctl.indexers.model_loader import ModelLoadError, require_weights
from evalctl.model_files import POOLINGS
from evalctl.models import (ROLES, derive_model, derived_dir, get_model, is_reference, load_models, origin,
                            registered_dir, spec_file, spec_yaml, study_dir)
from evalctl.paths import user_models_dir


def _size(params_m: float) -> str:
    return f"{params_m / 1000:.1f}B" if params_m >= 1000 else f"{params_m:.0f}M"


@click.group()
def models() -> None:
    """Embedding model specs: the package's (configs/models/), your own, fine-tuned and derived ones."""


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


def _weights_state(spec) -> str:
    try:
        require_weights(spec)
    except ModelLoadError:
        return "weights missing"
    return ""


def _weights(spec) -> str:
    """Where the weights come from: the offline package(s), the serving endpoint, a folder, or the hub."""
    if spec.endpoint is not None:
        return f"served: {spec.endpoint.model} at {spec.endpoint.url}"
    if spec.offline is not None:
        extra = "" if len(spec.offline.packages) == 1 else f" (+{len(spec.offline.packages) - 1})"
        installed = "installed" if not spec.offline.missing_packages() else "not installed"
        return f"{spec.offline.packages[0]}{extra} [{installed}]"
    return f"folder {spec.path}" if spec.path else "hub"


@models.command("list")
def list_models() -> None:
    """Every model spec with where it comes from (built-in, user, defined in a study spec), size, dimension,
    revision pin, prompt variants and where its weights are (offline package, endpoint, folder, hub), and why the
    unpinned ones are; then the fine-tuned models registered in this cache, with their base model and recipe; then
    the specs derived from hf:ORG/NAME or a folder."""
    try:
        specs = {**load_models(study_dir()), **load_models()}
        tuned = load_models(registered_dir())
        derived = load_models(derived_dir())
    except SpecError as e:
        raise UserError(str(e)) from None
    rows = [(s.id, origin(s.id), s.family, _size(s.params_m), str(s.dim), str(s.max_seq_length),
             s.revision[:10] if s.pinned else f"{s.revision[:10]} (unpinned)", "yes" if s.named_by_study else "",
             ",".join(sorted(s.prompt_variants)), _weights(s))
            for s in sorted(specs.values(), key=lambda s: (origin(s.id) != "built-in", s.family, s.params_m))]
    _table(("id", "from", "family", "size", "dim", "max_len", "revision", "study", "prompt variants", "weights"), rows)
    named = sum(s.named_by_study for s in specs.values())
    with_offline = sum(s.offline is not None for s in specs.values())
    users = sum(origin(s) == "user" for s in specs)
    served = sum(s.endpoint is not None for s in specs.values())
    click.echo(f"{len(specs)} models ({named} named by the study, {with_offline} with an offline source, "
               f"{served} served, {users} of your own in {user_models_dir()})")
    unpinned = [s for s in sorted(specs.values(), key=lambda s: s.id) if not s.pinned]
    if unpinned:
        click.echo(f"\n{len(specs) - len(unpinned)} pinned to a commit; unpinned, and why:")
        for s in unpinned:
            click.echo(f"  {s.id}: {s.unpinned_reason or 'no reason given in its spec'}")
    if tuned:
        click.echo(f"\nfine-tuned models (evalctl finetune; specs in {registered_dir()}):")
        rows = []
        for s in sorted(tuned.values(), key=lambda s: s.id):
            lin = s.lineage or {}
            rows.append(("[fine-tuned] " + s.id, lin.get("base_model", "?"), lin.get("recipe", {}).get("id", "?"),
                         ",".join(c["name"] for c in lin.get("corpora", [])), str(s.dim), s.revision[:10],
                         _weights_state(s)))
        _table(("id", "base", "recipe", "corpora", "dim", "revision", ""), rows)
        click.echo(f"{len(tuned)} fine-tuned model(s); use them by id like any other model")
    if derived:
        click.echo(f"\nderived from a model's files (hf:ORG/NAME or a folder; specs in {derived_dir()}):")
        _table(("id", "dim", "revision", "source"),
               [("[derived] " + s.id, str(s.dim), s.revision[:12], s.source) for s in sorted(derived.values(),
                                                                                          key=lambda s: s.id)])


@models.command("show")
@click.argument("model")
def show(model) -> None:
    """Print the full spec of MODEL (an id, hf:ORG/NAME[@REVISION] or a model folder) as a YAML models file, ready
    to save in your models folder (evalctl models add writes it there)."""
    spec = get_model(model)
    kind, path = origin(spec.id), spec_file(spec.id)
    click.echo(f"# {spec.id} ({kind}{': ' + str(path) if path else ''})\n" + spec_yaml(spec), nl=False)


@models.command("add")
@click.argument("model")
@click.option("--id", "model_id", default=None, help="The id to name it by (default: its derived id).")
@click.option("--pooling", type=click.Choice(POOLINGS), default=None,
              help="How token vectors become one, for a model without a Pooling module (a plain transformers "
                   "folder or repository).")
@click.option("--force", is_flag=True, help="Replace a spec of yours with this id.")
def add(model, model_id, pooling, force) -> None:
    """Save the spec derived from MODEL (hf:ORG/NAME[@REVISION] or a model folder) as your own, in
    EVALCTL_MODELS_DIR or ~/.config/evalctl/models/ (XDG_CONFIG_HOME), so it is named by --id everywhere."""
    if not is_reference(model):
        raise UserError(f"{model!r} is an id, not a model's files: give hf:ORG/NAME[@REVISION] or a model folder "
                        f"(`evalctl models show {model}` prints an id's spec, to copy and edit)")
    spec = derive_model(model, model_id=model_id, pooling=pooling)
    target = user_models_dir() / f"{spec.id}.yaml"
    # a derived spec of the same id is the one being saved; any other definition is refused
    where = spec_file(spec.id) or (registered_dir() if origin(spec.id) == "fine-tuned" else None)
    where = where or (target if target.is_file() else None)
    if where is not None and not (force and where == target):
        raise UserError(f"model id {spec.id!r} is already defined in {where}; "
                        + ("pass --force to replace it" if where == target else "choose another --id"))
    write_text(target, spec_yaml(spec))
    click.echo(f"model {spec.id} ({spec.source}) saved in {target}")
    click.echo(f"  use it: evalctl index --corpus <corpus> --model {spec.id}")


@click.command()
@click.option("--corpus", required=True, help="Corpus name (or folder) in the corpus store.")
@click.option("--model", "model_id", type=MODEL, required=True, help=MODEL_HELP)
@click.option("--view", required=True, help="Text view to encode (configs/views.yaml).")
@click.option("--role", type=click.Choice(ROLES), default="document", show_default=True)
@click.option("--shard", default="0/1", show_default=True, help="i/n: encode part i (0-based) of n, split by id hash.")
@dataclass_options(EncodeOptions)
@runtime_options
def encode(corpus, model_id, view, role, shard, **params) -> None:
    """Encode one view of a corpus into the embedding cache (resumable; cached texts are skipped)."""
    try:
        result = encode_corpus(corpus, model_id, view, build(EncodeOptions, params), role=role,
                               shard=parse_shard(shard))
    except (SpecError, ModelLoadError, KeyError, ValueError, FileNotFoundError) as e:  # a damaged cache: cli.explain
        raise UserError(str(e).strip("'\"")) from None
    r = result.report
    click.echo(f"corpus {result.corpus} ({result.corpus_hash[:12]}), view {result.view}, "
               f"shard {result.shard[0]}/{result.shard[1]}: {result.n_records} records, "
               f"{result.n_without_text} without text for this view")
    click.echo(f"model {model_id}, role {role}, prompt {r.prompt!r}")
    click.echo(f"texts {r.n_texts} ({r.n_unique} distinct): {r.n_cached} cached, {r.n_encoded} encoded "
               f"in {r.seconds:.1f}s ({r.docs_per_s:.1f} docs/s)")
    click.echo(f"truncated (longer than the model's token limit): {r.n_truncated} of {r.n_encoded} encoded "
               f"({100 * r.truncated_share:.1f}%)")
    click.echo(f"precision {r.precision}, batches of up to {r.max_batch_tokens} tokens, "
               f"{r.oom_halvings} out-of-memory halving(s)")
    if r.cost:
        click.echo(f"cost of this run: {cost_line(r.cost)}")
    for cost in entry_cost(read_runs(r.cache_dir)):  # what every run that encoded into the entry took
        click.echo(f"cost of the cached vectors: {cost_line(cost)}")
    click.echo(f"cache: {r.cache_dir}")
