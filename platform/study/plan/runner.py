"""`evalctl run SPEC`: plan every step of an experiment spec, skip what is done, run the rest.

A step is done when its output exists with a matching manifest (corpus hash and source hashes,
qrels spec, index identity and counts, results-store identity). A failed step is reported and the
run goes on with the steps that do not depend on it; expected scores are checked at the end.
"""

from __future__ import annotations

import functools
import json
import time
import traceback
from dataclasses import asdict, dataclass, field

from evalctl.corpus.importer import import_corpus, source_files
from evalctl.corpus.qrels import build_qrels, qrels_manifest
from evalctl.corpus.store import CorpusNotFound, load_corpus
from evalctl.corpus.views import load_views
from evalctl.datasets.catalogue import get_dataset
from evalctl.datasets.fetch import dataset_sources, is_imported
from evalctl.errors import Failure
from evalctl.finetune.params import FinetuneOptions, FinetuneParams
from evalctl.finetune.recipes import get_recipe
from evalctl.finetune.train import finetune, finetuned_dir
from evalctl.indexers.encode_options import EncodeOptions
from evalctl.indexers.index_contract import inspect_index
from evalctl.indexers.index_layout import field_units, index_name
from evalctl.indexers.index_loader import IndexMismatch, index_corpus, loaded_count
from evalctl.indexers.passages import PassageSpec, passage_unit
from evalctl.models import get_model, registered_dir
from evalctl.opensearch.connection import load_settings, make_client, node_answered, resolve_url
from evalctl.opensearch.retries import node_gone
from evalctl.provenance import file_sha256
from evalctl.study.spec.experiment import ExperimentSpec
from evalctl.study.spec.step_ids import FinetuneId, ImportId, IndexId, QrelsId, step_key
from evalctl.study.abstasks.records import note_outcome, remember
from evalctl.study.abstasks.registry import TASKS, task_targets
from evalctl.study.abstasks.base import IndexNeeds
from evalctl.study.abstasks.steps import PlanContext, SpecModels, Step, Tuning, spec_models


@dataclass
class Outcome:
    key: str
    status: str  # done (already) | ok | failed | skipped
    detail: str = ""
    seconds: float = 0.0


@dataclass
class RunReport:
    outcomes: list[Outcome] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)  # "OK ..." / "FAIL ..."

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status in ("failed", "skipped")]

    @property
    def ok(self) -> bool:
        return not self.failed and not any(c.startswith("FAIL") for c in self.checks)


class NodeLost(Failure):
    """The node stopped answering (or never answered) at a step: the run stopped there. `report` holds
    the outcomes up to that step."""

    def __init__(self, message: str, report: RunReport):
        super().__init__(message)
        self.report = report


def _node_lost_message(step: str, e: Exception, report: RunReport, not_run: int) -> str:
    settings = load_settings()
    how = "stopped answering" if node_answered() else "does not answer"
    fix = ("Check that cluster (or unset EVALCTL_OPENSEARCH_URL and the config file's opensearch url to use the "
           "managed node)" if settings.external else "Start the node again (`evalctl opensearch start`)")
    kept = [o.key for o in report.outcomes if o.status in ("done", "ok")]
    return "\n".join([
        f"OpenSearch at {resolve_url(settings)} {how} at step {step} ({e.__class__.__name__}): the run stopped "
        f"there, {not_run} later step(s) not run. {fix}, then rerun the same `evalctl run` "
        "command: it continues from that step.",
        f"Kept: what that step had finished (indexed documents, stored runs) and {len(kept)} finished step(s)"
        + (":" if kept else "."),
        *(f"  {k}" for k in kept)])


# --------------------------------------------------------------------------- steps


def import_step(spec: ExperimentSpec, entry) -> Step:
    def fetched():  # fetched when the step runs (first use), so a plan can be shown before the data is in place
        return dataset_sources(entry.dataset) if entry.dataset else None

    def sources(got) -> list:
        return list(got.sources) if got else [spec.resolve_source(s) for s in entry.sources]

    def is_done() -> bool:
        try:
            m = load_corpus(entry.name).manifest
        except CorpusNotFound:
            return False
        same = (m["source"]["format"] == entry.format and list(m.get("labels", [])) == list(entry.labels)
                and m.get("documents", "publication") == entry.documents)
        if entry.dataset:  # the published files it was made from, by checksum: nothing is fetched to tell
            return same and (m.get("dataset") or {}).get("files") is not None and is_imported(
                get_dataset(entry.dataset), m["dataset"])
        return same and ([f["sha256"] for f in m["source"]["files"]]
                         == [file_sha256(p) for p in source_files(entry.format, sources(None))])

    def run() -> str:
        got = fetched()
        res = import_corpus(entry.format, sources(got), name=entry.name, labels=entry.labels, overwrite=True,
                            documents=entry.documents, dataset=got.provenance() if got else None)
        problems = ", ".join(f"{k} {v}" for k, v in res.problem_counts.items()) or "no problems"
        return f"{len(res.corpus)} records ({problems})"

    return Step(ImportId(entry.name), run, is_done)


def qrels_step(spec: ExperimentSpec, entry) -> Step:
    def is_done() -> bool:
        corpus = load_corpus(entry.name)
        try:  # the manifest alone: reading the queries and pairs costs a Parquet import on every rerun
            manifest = qrels_manifest(corpus, entry.qrels.name)
        except FileNotFoundError:
            return False
        return manifest.get("corpus_hash") == corpus.content_hash and manifest.get("spec") == json.loads(
            json.dumps(asdict(entry.qrels)))

    def run() -> str:
        q = build_qrels(load_corpus(entry.name), entry.qrels, overwrite=True)
        return f"{len(q.queries)} queries, {len(q.pairs)} pairs"

    return Step(QrelsId(entry.name, entry.qrels.name), run, is_done, deps=(ImportId(entry.name),))


def index_step(corpus_name: str, model_id: str | None, variant: str | None, views: tuple[str, ...],
               label_tasks: dict[str, list[str]] | None = None,
               passages: dict[str, tuple[PassageSpec, ...]] | None = None) -> Step:
    """`label_tasks` ({task: views}): the label tasks of the spec that read their own prompt's vectors;
    `passages` ({view: settings}): the passage fields the spec's passage methods search."""
    passages = passages or {}
    fields = tuple(sorted((v, p) for v, ps in passages.items() for p in ps))
    def resolve():
        corpus = load_corpus(corpus_name)
        model = get_model(model_id) if model_id else None
        return corpus, model, index_name(corpus.name, model_id)

    def is_done() -> bool:
        corpus, model, name = resolve()
        client = make_client()
        state = inspect_index(client, corpus, model_id, views, label_tasks)
        meta = state.manifest
        if state.problems or not {passage_unit(*f) for f in fields} <= set(field_units(meta)):
            return False
        if model and (meta.get("revision") != model.revision
                      or meta.get("prompt_variant") != (variant or model.default_variant)):
            return False
        return loaded_count(client, name, field_units(meta)) == len(corpus)

    def run() -> str:
        corpus, model, name = resolve()
        client, all_views = make_client(), load_views()
        try:
            rep = index_corpus(client, corpus, [all_views[v] for v in views], model,
                               encoding=EncodeOptions(variant=variant), label_tasks=label_tasks or {},
                               passages=passages)
        except IndexMismatch:
            if not (model and model.lineage):
                raise  # a configured model's index is the user's to delete
            # A model this study fine-tuned was retrained (new revision): its old index is stale.
            client.indices.delete(index=name)
            rep = index_corpus(client, corpus, [all_views[v] for v in views], model,
                               encoding=EncodeOptions(variant=variant), label_tasks=label_tasks or {},
                               passages=passages)
        if rep.failed:
            raise RuntimeError(f"{len(rep.failed)} documents rejected, e.g. {rep.failed[0]}")
        return (f"{rep.index}: {rep.n_loaded} loaded, {rep.n_already} already there ({rep.docs_per_s:.0f} docs/s)"
                + "".join(f"; warning: {why}" for why in rep.warnings))

    prompt_tasks = tuple((task, tuple(vs)) for task, vs in sorted((label_tasks or {}).items()))
    return Step(IndexId(corpus_name, model_id, views, fields, prompt_tasks), run, is_done,
                deps=(ImportId(corpus_name),))


def finetune_step(spec: ExperimentSpec, tuning: Tuning) -> Step:
    """Train a base model with a recipe on the entry's corpus. Every qrels set a retrieval task of the spec reads guards the pairs: no dev/test query (nor its family
    or relevant documents) reaches training. Done when that model is registered from the same corpus
    version, pair budget, guard and seed."""
    entry, base_id, model_id = tuning.entry, tuning.base, tuning.model
    recipe = get_recipe(tuning.recipe)
    read = sorted({(r.corpus, r.qrels) for r in spec.entries("retrieval")})
    params = FinetuneParams(match_size=entry.match_size, guard=tuple(f"{c}:{q}" for c, q in read),
                            max_steps=entry.max_steps, batch_size=entry.batch_size)

    def is_done() -> bool:
        run_file = finetuned_dir(model_id) / "run.json"
        if not (registered_dir() / f"{model_id}.yaml").is_file() or not run_file.is_file():
            return False
        lineage = json.loads(run_file.read_text())["lineage"]
        training = lineage["training"]
        return ([c["content_hash"] for c in lineage["corpora"]] == [load_corpus(entry.corpus).content_hash]
                and lineage["match_size"] == params.match_size and lineage.get("guard") == list(params.guard)
                and all(training[k] == v for k in ("max_steps", "batch_size")
                        if (v := getattr(params, k)) is not None))

    def run() -> str:
        res = finetune(base_id, recipe.id, [entry.corpus], params, FinetuneOptions(overwrite=True, progress=False))
        return f"{res.model_id}: {sum(res.pairs['used'].values())} pairs, {res.steps} steps, loss {res.train_loss:.4f}"

    # Wait for the qrels sets this run builds that guard the pairs, or that hold the training corpus's
    # train-side citations (R1).
    built = sorted((c.name, c.qrels.name) for c in spec.corpora if c.qrels is not None)
    qrels_deps = [QrelsId(c, q) for c, q in built if (c, q) in read or c == entry.corpus]
    deps = tuple(dict.fromkeys([ImportId(entry.corpus), *(ImportId(c) for c, _ in read), *qrels_deps]))
    return Step(FinetuneId(model_id), run, is_done, deps=deps)


# --------------------------------------------------------------------------- plan and run


@dataclass
class _Wanted:
    """What the spec's entries read from one corpus x model index."""

    views: set[str] = field(default_factory=set)
    passages: dict[str, set[PassageSpec]] = field(default_factory=dict)  # view -> passage settings
    prompt_tasks: dict[str, set[str]] = field(default_factory=dict)  # task -> views of its own prompt's vectors


def _indexes_wanted(spec: ExperimentSpec, models: SpecModels) -> dict[tuple[str, str | None], _Wanted]:
    """One index per corpus x model (None: a spec without models gets text-only ones), holding every view any entry
    of the spec asks for, their passages and the vectors of the task prompts that read their own."""
    needs = [("indexes", e, IndexNeeds(tuple(e.views))) for e in spec.indexes]
    needs += [(name, e, task.index_needs(e)) for name, task in TASKS.items() for e in spec.entries(name)]
    wanted: dict[tuple[str, str | None], _Wanted] = {}
    for name, entry, need in needs:
        for model_id in [m.id for m in models.of(entry)] if models.models else [None]:
            w = wanted.setdefault((entry.corpus, model_id), _Wanted())
            w.views.update(need.views)
            if model_id is None:
                continue  # a text-only index holds no vectors
            for v in need.views if need.passages else ():
                w.passages.setdefault(v, set()).update(need.passages)
            if need.prompt_vectors:
                w.prompt_tasks.setdefault(name, set()).update(need.views)
    return wanted


def plan(spec: ExperimentSpec) -> list[Step]:
    steps: list[Step] = []
    for c in spec.corpora:
        steps.append(import_step(spec, c))
        if c.qrels is not None:
            steps.append(qrels_step(spec, c))
    # Fine-tuned models join every task like the configured ones, after their training step.
    models = spec_models(spec)
    trained: dict[str, FinetuneId] = {}  # tuned model id -> its finetune step
    for tuning in models.tunings:
        steps.append(finetune_step(spec, tuning))
        trained[tuning.model] = steps[-1].id
    targets = task_targets(spec, models)

    variants = {m.id: m.prompt_variant for m in models.models}
    index_ids = {}
    for (corpus, model_id), w in _indexes_wanted(spec, models).items():
        step = index_step(corpus, model_id, variants.get(model_id), tuple(sorted(w.views)),
                          {task: sorted(vs) for task, vs in w.prompt_tasks.items()},
                          {v: tuple(sorted(ps)) for v, ps in w.passages.items()})
        if model_id in trained:
            step.deps += (trained[model_id],)
        index_ids[(corpus, model_id)] = step.id
        steps.append(step)
    ctx = PlanContext(spec, list(steps), models, index_ids)
    for task, entry, sid in targets:
        step = task.step(ctx, entry, sid)
        step.remember = functools.partial(remember, spec.name, step)
        step.note_outcome = functools.partial(note_outcome, spec.name, step)
        steps.append(step)
    return steps


def check_expected(spec: ExperimentSpec, steps: list[Step]) -> list[str]:
    """OK/FAIL per expected score, as reproduction files in IR do."""
    lines = []
    for e in spec.expected:
        target = TASKS.get(e.task).expected_target(e)
        step = next((s for s in steps if s.target == target), None)
        got = step.scores().get(e.metric) if step and step.scores else None
        what = f"{target} {e.metric}"
        if got is None:
            lines.append(f"FAIL {what}: no score (expected {e.value})")
        elif abs(got - e.value) <= e.tolerance:
            lines.append(f"OK   {what}: {got:.4f} (expected {e.value} ± {e.tolerance})")
        else:
            lines.append(f"FAIL {what}: {got:.4f}, expected {e.value} ± {e.tolerance}")
    return lines


def execute(steps: list[Step], echo=print, dry_run: bool = False) -> RunReport:
    report = RunReport()
    failed: set = set()  # step ids
    cause: dict = {}  # failed or skipped step's id -> the failure behind it, one line
    for i, step in enumerate(steps, 1):
        prefix = f"[{i}/{len(steps)}] {step.key}"
        blocked = [d for d in step.deps if d in failed]
        if blocked:
            needs = ", ".join(map(step_key, blocked))
            failed.add(step.id)
            report.outcomes.append(Outcome(step.key, "skipped", f"needs {needs}"))
            cause[step.id] = cause[blocked[0]]
            if step.note_outcome:
                step.note_outcome("skipped", f"needs {needs} ({cause[step.id]})")
            echo(f"{prefix}: skipped (needs {needs})")
            continue
        try:
            done = step.is_done()
            if done and step.remember:  # a step done before study records existed gets its record now
                step.remember()
        except Exception:  # an unanswerable check means "not done", never a crash of the plan
            done = False
        if done:
            report.outcomes.append(Outcome(step.key, "done"))
            echo(f"{prefix}: done")
            continue
        if dry_run:
            report.outcomes.append(Outcome(step.key, "planned"))
            echo(f"{prefix}: to run")
            continue
        t0 = time.perf_counter()
        try:
            detail = step.run()
            if step.remember:
                step.remember()
            report.outcomes.append(Outcome(step.key, "ok", detail, time.perf_counter() - t0))
            echo(f"{prefix}: ok ({time.perf_counter() - t0:.1f}s) {detail}")
        except Exception as e:  # report and go on: later independent steps still run
            cause[step.id] = f"{step.key} failed: " + f"{e.__class__.__name__}: {e}".splitlines()[0]
            if step.note_outcome:
                step.note_outcome("failed", cause[step.id])
            if node_gone(e):  # every later step would fail the same way: stop once, saying where and what to do
                report.outcomes.append(Outcome(step.key, "failed", f"{e.__class__.__name__}", time.perf_counter() - t0))
                raise NodeLost(_node_lost_message(prefix, e, report, len(steps) - i), report) from e
            failed.add(step.id)
            detail = f"{e.__class__.__name__}: {e}"
            report.outcomes.append(Outcome(step.key, "failed", detail + "\n" + traceback.format_exc(limit=3),
                                           time.perf_counter() - t0))
            echo(f"{prefix}: FAILED {detail}")
    return report
