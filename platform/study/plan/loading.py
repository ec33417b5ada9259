"""Loading an experiment spec (configs/experiments/*.yaml) into its types (experiment.py) and validating it:
`load_experiment` checks every field that can be checked without the node (names, ranges, splits, weights,
metrics, references, repeats), each registered task its own entries, and names the offending key, so
`evalctl run --dry-run` catches what a run would only fail on after importing and indexing.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from evalctl.config_files import SpecError, build, configs_dir, load_yaml
from evalctl.corpus.import_formats.registry import IMPORT_FORMATS
from evalctl.corpus.label_sets import load_label_sets
from evalctl.datasets.catalogue import get_dataset
from evalctl.corpus.views import load_views
from evalctl.evaluators.retrieval.methods import METHODS
from evalctl.evaluators.scoring.significance_params import StatsProtocol
from evalctl.finetune.recipes import default_model_id, get_recipe
from evalctl.models import define_inline, get_model, is_reference, resolve_model_id
from evalctl.study.spec.experiment import Expected, ExperimentSpec, check_passages, check_spec_name
from evalctl.study.abstasks.registry import TASKS
from evalctl.study.abstasks.steps import spec_models


def missing_sources(spec: ExperimentSpec) -> list[str]:
    """One message per corpus source that cannot be found."""
    missing = []
    for c in spec.corpora:
        for src in c.sources:
            try:
                spec.resolve_source(src)
            except SpecError as e:
                missing.append(f"corpus {c.name}: {e}")
    return missing


def experiment_path(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.exists():
        return p
    named = configs_dir() / "experiments" / (name_or_path if name_or_path.endswith(".yaml") else f"{name_or_path}.yaml")
    if named.exists():
        return named
    known = sorted(f.stem for f in (configs_dir() / "experiments").glob("*.yaml"))
    raise SpecError(f"no experiment spec {name_or_path!r}; shipped specs: {', '.join(known)}")


def load_experiment(name_or_path: str) -> ExperimentSpec:
    path = experiment_path(name_or_path)
    data = load_yaml(path.resolve())
    if not isinstance(data, dict):
        raise SpecError(f"{path}: expected a mapping at the top level")
    if "tasks" in data:  # filled from the registered tasks' sections, never written
        raise SpecError(f"{path}: unknown key 'tasks'")
    # Each registered task's section is built with the entry type its module declares.
    tasks = {name: build(tuple[task.entry, ...], data.pop(name), f"{path}: {name}")
             for name, task in TASKS.items() if name in data}
    # the protocol's section names its key in messages as the tasks' sections do ("spec.yaml: statistics: ...")
    statistics = build(StatsProtocol, data.pop("statistics", {}), f"{path}: statistics")
    spec = dataclasses.replace(build(ExperimentSpec, {**data, "source_path": str(path)}, str(path)), tasks=tasks,
                               statistics=statistics)
    spec = _model_ids(_datasets(spec))
    validate(spec)
    return spec


def _datasets(spec: ExperimentSpec) -> ExperimentSpec:
    """Each corpus that names a dataset of the catalogue read in the dataset's format; one that does not, from its
    sources."""
    corpora = []
    for i, c in enumerate(spec.corpora):
        at = f"{spec.source_path}: corpora[{i}] ({c.name})"
        if c.dataset is None:
            if not c.sources or not c.format:
                raise SpecError(f"{at}: give a dataset: (`evalctl data list`), or sources: with their format:")
            corpora.append(c)
            continue
        if c.sources:
            raise SpecError(f"{at}: give dataset: or sources:, not both")
        try:
            fmt = get_dataset(c.dataset).format
        except SpecError as e:
            raise SpecError(f"{at}: {e}") from None
        if c.format and c.format != fmt:
            raise SpecError(f"{at}: dataset {c.dataset} is read as format {fmt}, not {c.format}")
        corpora.append(dataclasses.replace(c, format=fmt))
    return dataclasses.replace(spec, corpora=tuple(corpora))


def _model_ids(spec: ExperimentSpec) -> ExperimentSpec:
    """The spec with each model named by hf:ORG/NAME[@REV] or a folder (in `models:`, and where an entry or an
    expected score names it the same way) named by the id it stands for: steps, indexes and runs use ids. A model
    defined inline (`spec:`) is kept under its id (models.define_inline)."""
    ids = {}
    for i, m in enumerate(spec.models):
        if m.spec is not None:
            check_spec_name(m.id, "id", f"{spec.source_path}: models[{i}]")
            define_inline(m.id, m.spec, f"{spec.source_path}: models[{i}]")
        elif is_reference(m.id):
            try:
                ids[m.id] = resolve_model_id(m.id)
            except SpecError as e:
                raise SpecError(f"{spec.source_path}: models[{i}]: {e}") from None
    if not ids:
        return spec

    def renamed(entry):
        if hasattr(entry, "models"):
            entry = dataclasses.replace(entry, models=tuple(ids.get(m, m) for m in entry.models))
        if isinstance(entry, Expected):
            entry = dataclasses.replace(entry, model=ids.get(entry.model, entry.model))
        return entry

    return dataclasses.replace(
        spec, models=tuple(dataclasses.replace(m, id=ids.get(m.id, m.id)) for m in spec.models),
        indexes=tuple(map(renamed, spec.indexes)), finetune=tuple(map(renamed, spec.finetune)),
        expected=tuple(map(renamed, spec.expected)),
        tasks={name: tuple(map(renamed, entries)) for name, entries in spec.tasks.items()})


def validate(spec: ExperimentSpec) -> None:
    """Check every field that can be checked without the node: names (the one name rule: a name is never
    a path), ranges, splits, weights, expected metrics and tolerances, cross-references and repeats, so
    `evalctl run --dry-run` refuses what a run would only fail on after importing and indexing. Every
    message names the file and the offending entry and field."""
    where = spec.source_path
    check_spec_name(spec.name, "name", where)
    for i, c in enumerate(spec.corpora):
        check_spec_name(c.name, "name", f"{where}: corpora[{i}]")
    for i, m in enumerate(spec.models):
        check_spec_name(m.id, "id", f"{where}: models[{i}]")
    names = [c.name for c in spec.corpora]
    _no_repeats(names, "corpus name", where, "corpora")
    _no_repeats([m.id for m in spec.models], "model id", where, "models")
    for c in spec.corpora:
        if c.format not in IMPORT_FORMATS:
            raise SpecError(f"{where}: corpus {c.name}: unknown format {c.format!r} ({', '.join(IMPORT_FORMATS)})")
    for m in spec.models:
        try:
            model = get_model(m.id)
        except (KeyError, SpecError) as e:
            raise SpecError(f"{where}: models: {e}") from None
        if m.prompt_variant and m.prompt_variant not in model.prompt_variants:
            raise SpecError(f"{where}: model {m.id} has no prompt variant {m.prompt_variant!r}; "
                            f"it has {', '.join(model.prompt_variants)}")
    views, label_sets = load_views(), load_label_sets()
    for section in ("indexes", *TASKS, "finetune"):
        for i, entry in enumerate(spec.entries(section)):
            at = f"{where}: {section}[{i}]"
            if entry.corpus not in names:
                raise SpecError(f"{at}: corpus {entry.corpus!r} is not among corpora ({', '.join(names)})")
            for key in ("views", "models", "methods", "label_sets", "recipes", "dense_weights"):
                _no_repeats(getattr(entry, key, ()), key[:-1].replace("_", " "), at, key)
            for v in (*getattr(entry, "views", ()), *filter(None, [getattr(entry, "query_view", None)])):
                if v not in views:
                    raise SpecError(f"{at}: unknown view {v!r} (configs/views.yaml has {', '.join(views)})")
            for m in entry.models:
                if m not in {e.id for e in spec.models}:
                    raise SpecError(f"{at}: model {m!r} is not among models")
            for m in getattr(entry, "methods", ()):
                if m not in METHODS:
                    raise SpecError(f"{at}: unknown method {m!r} ({', '.join(METHODS)})")
            if hasattr(entry, "passages"):
                check_passages(entry.methods, entry.passages, getattr(entry, "query_chunks", False), at)
            for ls in getattr(entry, "label_sets", ()):
                if ls not in label_sets:
                    raise SpecError(f"{at}: unknown label set {ls!r} ({', '.join(label_sets)})")
            if section in TASKS:
                TASKS.get(section).validate(spec, entry, at)
    _check_finetune(spec)
    for c in spec.corpora:
        for v in c.qrels.within_views if c.qrels else ():
            if v not in views:
                raise SpecError(f"{where}: corpus {c.name}: qrels within_views: unknown view {v!r} "
                                f"(configs/views.yaml has {', '.join(views)})")
    model_ids = {m.id for m in spec_models(spec).models}  # the fine-tuned ones too
    for i, e in enumerate(spec.expected):
        at = f"{where}: expected[{i}]"
        if e.corpus not in names:
            raise SpecError(f"{at}: corpus {e.corpus!r} is not among corpora")
        if e.model not in model_ids | {"bm25"}:
            raise SpecError(f"{at}: model {e.model!r} is not among models (nor fine-tuned by the spec)")
        _check_expected(e, views, at)


def _no_repeats(items, what: str, at: str, key: str) -> None:
    """Refuse an item given twice, naming both positions (it would plan the same step twice)."""
    seen: dict = {}
    for i, item in enumerate(items):
        if item in seen:
            raise SpecError(f"{at}: {key}[{seen[item]}] and {key}[{i}]: {what} {item!r} given twice")
        seen[item] = i


def _check_finetune(spec: ExperimentSpec) -> None:
    """Recipes known, sizes positive, and each fine-tuned model's id (it becomes a folder) a valid name."""
    for i, ft in enumerate(spec.finetune):
        at = f"{spec.source_path}: finetune[{i}]"
        for r in ft.recipes:
            try:
                get_recipe(r)
            except SpecError as e:
                raise SpecError(f"{at}: {e}") from None
        for key in ("match_size", "max_steps", "batch_size"):
            value = getattr(ft, key)
            if value is not None and value < 1:
                raise SpecError(f"{at}: {key} {value} must be at least 1")
        for base in ft.models or [m.id for m in spec.models]:
            for r in ft.recipes:
                check_spec_name(default_model_id(base, get_recipe(r).id, [ft.corpus], ft.match_size),
                                "fine-tuned model id", at)


def _check_expected(e: Expected, views, at: str) -> None:
    if not math.isfinite(e.value):
        raise SpecError(f"{at}: value {e.value} is not a number")
    if not (math.isfinite(e.tolerance) and e.tolerance >= 0):
        raise SpecError(f"{at}: tolerance {e.tolerance} must be a number >= 0")
    for v in filter(None, (e.view, e.query_view)):
        if v not in views:
            raise SpecError(f"{at}: unknown view {v!r} (configs/views.yaml has {', '.join(views)})")
    if e.task not in TASKS:
        raise SpecError(f"{at}: task {e.task!r} is not one of {', '.join(TASKS)}")
    metrics = TASKS.get(e.task).metrics(e, at)
    if e.metric not in metrics:
        raise SpecError(f"{at}: unknown metric {e.metric!r} for a {e.task} score (one of {', '.join(metrics)})")
