"""Fine-tune a model with a recipe, save it, and register it as a new model spec.

Layout (never inside the repository):
  cache_root()/models/finetuned/<id>/run.json        the lineage: base model, recipe, corpora, pairs,
                                                      seed, hyperparameters (identity of the run)
  cache_root()/models/finetuned/<id>/pairs.jsonl      the training pairs, as used
  cache_root()/models/finetuned/<id>/checkpoints/     Trainer checkpoints (resume after interruption)
  cache_root()/models/finetuned/<id>/model/           the final SentenceTransformer folder
  cache_root()/models/registered/<id>.yaml            the ModelSpec, found by evalctl.models.get_model

The registered spec keeps the base model's geometry and prompts, names the local folder in `path`
(so it loads offline, never from the hub) and a digest of the saved weights as `revision`, so the
embedding cache and index manifests tell two trainings under one id apart.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from evalctl.atomic import replace_dir, staging_dir, write_text
from evalctl.clock import utc_now
from evalctl.errors import Failure
from evalctl.corpus.store import Corpus, load_corpus
from evalctl.indexers.model_loader import load_model
from evalctl.finetune.pairs import PairSet, build_pairs
from evalctl.finetune.params import FinetuneOptions, FinetuneParams
from evalctl.finetune.recipes import LoraSpec, RecipeSpec, default_model_id, get_recipe
from evalctl.models import ModelSpec, get_model, load_models, registered_dir
from evalctl.names import check_name
from evalctl.paths import cache_root
from evalctl.provenance import code_version

_ID = re.compile(r"^[a-z0-9][a-z0-9_.+@-]*$")


class FinetuneError(Failure, RuntimeError):
    """A run that cannot go ahead as asked (name clash, a different run under this id); says what to do."""


@dataclass(frozen=True)
class FinetuneResult:
    model_id: str
    model_dir: Path
    spec_file: Path
    pairs: dict
    lineage: dict
    resumed_from: str | None
    skipped: bool  # the same run was already complete: nothing trained
    train_loss: float | None
    steps: int
    seconds: float


def finetuned_dir(model_id: str) -> Path:
    return cache_root() / "models" / "finetuned" / model_id


def uses_lora(spec: ModelSpec, lora: LoraSpec) -> bool:
    return lora.use == "on" or (lora.use == "auto" and spec.params_m >= lora.min_params_m)


def add_lora(model, lora: LoraSpec) -> None:
    """Wrap the model's transformer in a fresh LoRA adapter (peft); only the adapter is trained.

    peft is used directly rather than through transformers' add_adapter, which pins a newer peft."""
    from peft import LoraConfig, get_peft_model  # optional: finetune

    target = lora.target_modules if isinstance(lora.target_modules, str) else list(lora.target_modules)
    module = model[0]
    module.model = get_peft_model(module.auto_model, LoraConfig(r=lora.r, lora_alpha=lora.alpha,
                                                                 lora_dropout=lora.dropout, target_modules=target))


def merge_lora(model) -> None:
    """Fold the adapter into the base weights, so the saved folder is a plain model (loads without peft)."""
    module = model[0]
    module.model = module.model.merge_and_unload()


def weights_digest(folder: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(f.relative_to(folder).as_posix().encode())
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return "ft-" + h.hexdigest()[:16]


def _datasets(pairs: PairSet):
    from datasets import Dataset  # optional: finetune

    out = {}
    for name, ps in pairs.pairs.items():
        cols = {"anchor": [p.anchor for p in ps], "positive": [p.positive for p in ps]}
        if ps[0].negative is not None:
            cols["negative"] = [p.negative for p in ps]
        out[name] = Dataset.from_dict(cols)
    return out


def _loss(model, recipe: RecipeSpec):
    from sentence_transformers.sentence_transformer import losses  # deferred: sentence_transformers

    if recipe.loss.name == "cached-mnrl":
        return losses.CachedMultipleNegativesRankingLoss(model, scale=recipe.loss.scale,
                                                         mini_batch_size=recipe.loss.mini_batch_size)
    return losses.MultipleNegativesRankingLoss(model, scale=recipe.loss.scale)


def _prompts(base: ModelSpec) -> dict[str, str]:
    """Train with the prompts the model is evaluated with: anchors as queries, the rest as documents."""
    q, d = base.prompt_for("query", "retrieval"), base.prompt_for("document", "retrieval")
    return {k: v for k, v in {"anchor": q, "positive": d, "negative": d}.items() if v}


def train(model, pairs: PairSet, recipe: RecipeSpec, out_dir: Path, *, prompts: dict[str, str] | None = None,
          options: FinetuneOptions = FinetuneOptions()):
    """Run SentenceTransformerTrainer on the pairs with the recipe's loss and training settings, seeded with the
    pairs' seed (one seed draws the pairs and drives the trainer); resumes from the newest checkpoint in out_dir."""
    # deferred: sentence_transformers, transformers
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.base.sampler import BatchSamplers
    from transformers.trainer_callback import PrinterCallback
    from transformers.trainer_utils import get_last_checkpoint

    data, training, seed = _datasets(pairs), recipe.training, pairs.seed
    args = SentenceTransformerTrainingArguments(
        output_dir=str(out_dir), num_train_epochs=training.epochs, max_steps=training.max_steps,
        per_device_train_batch_size=training.batch_size, learning_rate=training.learning_rate,
        # transformers 5: a float warmup_steps below 1 is a ratio of the training steps (warmup_ratio is deprecated)
        warmup_steps=training.warmup_ratio, seed=seed, data_seed=seed,
        # duplicate texts in one batch would be false in-batch negatives
        batch_sampler=BatchSamplers.NO_DUPLICATES,
        save_strategy="steps", save_steps=training.save_steps, save_total_limit=2,
        logging_steps=max(1, min(10, training.save_steps)), report_to="none", disable_tqdm=not options.progress,
        use_cpu=options.device == "cpu", prompts=prompts or None,
        dataloader_pin_memory=model.device.type != "cpu",  # pinned memory speeds host-to-GPU copies only
    )
    trainer = SentenceTransformerTrainer(
        model=model, args=args, train_dataset=data if len(data) > 1 else next(iter(data.values())),
        loss=_loss(model, recipe),
    )
    if not options.progress:  # without its bar the trainer prints each log dict; the caller reports the loss
        trainer.remove_callback(PrinterCallback)
    last = get_last_checkpoint(str(out_dir)) if out_dir.is_dir() else None
    output = trainer.train(resume_from_checkpoint=last)
    return output, last


def finetune(base_id: str, recipe_id: str, corpora: list[str | Corpus], params: FinetuneParams = FinetuneParams(),
             options: FinetuneOptions = FinetuneOptions()) -> FinetuneResult:
    started = time.perf_counter()
    base = get_model(base_id)
    recipe = get_recipe(recipe_id)
    corpora = [c if isinstance(c, Corpus) else load_corpus(c) for c in corpora]
    tuned = params.recipe(recipe)  # the recipe with the run's training settings
    training = tuned.training
    model_id = check_name(options.name or default_model_id(base.id, recipe.id, [c.name for c in corpora],
                                                           params.match_size), "model name")
    if not _ID.match(model_id):
        raise FinetuneError(f"model id {model_id!r}: use lowercase letters, digits and _ . + @ - only "
                            "(it becomes part of OpenSearch index names)")
    if model_id in load_models():
        raise FinetuneError(f"model id {model_id!r} is a configured model (configs/models/); choose another --name")
    pairs = build_pairs(recipe, corpora, match_size=params.match_size, seed=params.seed, qrels_name=params.qrels,
                        guard=params.guard)
    lora = uses_lora(base, training.lora)
    lineage = {
        "base_model": base.id, "base_hf_id": base.hf_id, "base_revision": base.revision,
        "recipe": recipe.to_dict(), "corpora": [{"name": c.name, "content_hash": c.content_hash} for c in corpora],
        "qrels": params.qrels, "guard": list(params.guard), "match_size": params.match_size, "seed": params.seed,
        "training": dataclasses.asdict(training), "lora": lora, "prompts": _prompts(base),
        "pairs": pairs.summary(),
    }
    run_dir = finetuned_dir(model_id)
    spec_file = registered_dir() / f"{model_id}.yaml"
    run_file = run_dir / "run.json"
    if run_file.exists():
        previous = json.loads(run_file.read_text())
        if previous["lineage"] != json.loads(json.dumps(lineage)):
            if not options.overwrite:
                changed = sorted(k for k in lineage if previous["lineage"].get(k) != json.loads(json.dumps(lineage[k])))
                raise FinetuneError(f"{run_dir} holds another run under id {model_id} (differs in: "
                                    f"{', '.join(changed)}); pass --overwrite to replace it or --name for a new id")
            shutil.rmtree(run_dir)
            spec_file.unlink(missing_ok=True)
        elif (run_dir / "model" / "modules.json").is_file() and spec_file.is_file():
            done = previous.get("result", {})
            return FinetuneResult(model_id, run_dir / "model", spec_file, lineage["pairs"], lineage, None, True,
                                  done.get("train_loss"), done.get("steps", 0), time.perf_counter() - started)
    run_dir.mkdir(parents=True, exist_ok=True)
    if not run_file.exists():
        write_text(run_file, json.dumps({"model_id": model_id, "lineage": lineage}, indent=1, sort_keys=True))
        write_text(run_dir / "pairs.jsonl", "".join(
            json.dumps(dataclasses.asdict(p), sort_keys=True) + "\n" for ps in pairs.pairs.values() for p in ps))

    model = load_model(base, device=options.device, precision="float32")  # trained in float32 whatever the spec runs at
    model.max_seq_length = min(training.max_seq_length, base.max_seq_length)
    if lora:
        add_lora(model, training.lora)
    output, resumed = train(model, pairs, tuned, run_dir / "checkpoints", prompts=_prompts(base), options=options)
    if lora:
        merge_lora(model)
    model.max_seq_length = base.max_seq_length
    final = run_dir / "model"
    with staging_dir(final) as tmp:
        model.save(str(tmp))
        replace_dir(tmp, final)
    revision = weights_digest(final)
    result = {"train_loss": output.training_loss, "steps": output.global_step, "revision": revision,
              "resumed_from": resumed, "code_version": code_version(),
              "created_at": utc_now()}
    register(base, model_id, final, revision, lineage, spec_file)
    write_text(run_file, json.dumps({"model_id": model_id, "lineage": lineage, "result": result},
                                      indent=1, sort_keys=True))
    return FinetuneResult(model_id, final, spec_file, lineage["pairs"], lineage, resumed, False,
                          output.training_loss, output.global_step, time.perf_counter() - started)


def register(base: ModelSpec, model_id: str, model_dir: Path, revision: str, lineage: dict, spec_file: Path) -> ModelSpec:
    """Write the fine-tuned model's spec where get_model finds it; returns the spec as it will load."""
    # every other field (geometry, pooling, prompts, license, ...) is the base's, a field added later included;
    # the weights are the local folder, never the base's offline package, and the base's notes are not ours
    spec = dataclasses.replace(
        base, id=model_id, revision=revision, named_by_study=False, offline=None, notes="",
        source=f"evalctl finetune: {base.id} + recipe {lineage['recipe']['id']} "
               f"on {', '.join(c['name'] for c in lineage['corpora'])}",
        path=str(model_dir), lineage=json.loads(json.dumps(lineage)))
    write_text(spec_file, yaml.safe_dump({"models": [dataclasses.asdict(spec)]}, sort_keys=False, allow_unicode=True))
    return get_model(model_id)


def registered_models() -> dict[str, ModelSpec]:
    """Every fine-tuned model spec registered in this cache."""
    return load_models(registered_dir()) if registered_dir().is_dir() else {}
