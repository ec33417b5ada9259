"""MTEB v2 result files from evalctl's stored results (`evalctl export mteb`): a model's retrieval, classification and
clustering scores written as mteb 2.26 writes its own, so mteb's loaders read them beside the leaderboard's results.

The layout is mteb's ResultCache: <out>/results/<org__model>/<revision>/<TaskName>.json, a TaskResult
(dataset_revision, task_name, mteb_version, scores {split: [{main_score, hf_subset, languages, metrics ...}]},
evaluation_time), and a model_meta.json beside them (ResultCache.load_results skips a revision folder without one, and
ModelMeta takes only an organization/model name). A file holds one model revision's result on one task, one score per
split: of two results that would share one, an exact search's (MTEB's kind), else the first given, is written.

A result is one embedding model's: dense or exact retrieval of whole queries over whole documents, classification and
clustering of its vectors. Everything else (BM25, fusion, passages, chunked or sampled queries, other tasks) and what
no result file can hold (STANDING) comes back as NotExported items: the caller writes and prints them, so nothing is
dropped unsaid. Task names are evalctl's own, never MTEB's: no evalctl run is one of MTEB's DAPFAM tasks (DAPFAM).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from evalctl import results_store
from evalctl.config_files import SpecError
from evalctl.corpus.store import CorpusNotFound, load_corpus
from evalctl.evaluators.retrieval.methods import EXACT, METHODS
from evalctl.evaluators.scoring.metrics import PRIMARY, evaluate_run, stored_scores
from evalctl.evaluators.scoring.runs import KIND as RUN_KIND, load_run, run_label, view_pair
from evalctl.models import get_model
from evalctl.output_folder import write_into
from evalctl.results_store import Result

RESULTS = "results"  # ResultCache's folder under its cache path
MODEL_META = "model_meta.json"
LISTING = "not_exported.md"
TASK_TYPES = {RUN_KIND: "Retrieval", "classification": "Classification", "clustering": "Clustering"}
SUBSET = "default"  # evalctl's tasks have no subsets: one entry per split
# The views read English text (the qrels keep English queries; MTEB's DAPFAM tasks say eng-Latn too). An entry
# without a language is left out of TaskResult.get_score's mean, so every entry names one.
LANGUAGES = ["eng-Latn"]
# Classification and clustering score held-out records (splits, seeds) of the whole labelled set: test scores.
LABEL_SPLIT = "test"
MTEB_PROBE = "logreg"  # MTEB's classification fits a logistic regression: this probe's keys go unprefixed
F1_KEYS = {"macro_f1": "f1", "micro_f1": "f1_micro", "samples_f1": "f1_samples"}  # MTEB's `f1` is the macro mean
# ModelMeta's fields without a default: model_meta.json must hold each (None where evalctl does not know it)
UNKNOWN_META = dict.fromkeys(("loader", "release_date", "languages", "memory_usage_mb", "license", "open_weights",
                              "public_training_code", "public_training_data", "use_instructions", "training_datasets"))
DAPFAM = ("evalctl's DAPFAM import is not MTEB's DAPFAM task of these views, so the result keeps evalctl's name: "
          "evalctl counts DAPFAM's relevance_score rounded as a grade (MTEB: any score above 0 is 1), scores its own "
          "dev or test share of the queries unless the spec asks `split: all` (MTEB: every query, split train), "
          "searches only the families whose text renders in the view (MTEB: every family), joins title and text by "
          "a newline and the claims without their numbers (MTEB: a space, claims_text as published), and its "
          "`dense` search is approximate (HNSW; MTEB searches exhaustively). The file also holds ndcg_at_100, "
          "MTEB's main score for DAPFAM")


@dataclass(frozen=True)
class NotExported:
    what: str
    why: str


# What no result file holds, whatever was exported.
STANDING = (
    NotExported("confidence intervals and significance tests", "a result file holds means only; the report has "
                "both"),
    NotExported("IN and OUT of domain scores", "an entry is one split and subset of the task's data; IN and OUT "
                "split the same queries' pairs (the report's IN vs OUT tables, `evalctl evaluate --domain`)"),
    NotExported("per-query, per-split and per-seed values", "only the means are written; the stored runs and "
                "results keep them"),
    NotExported("latency and cost", "encoding time, index size, HNSW memory and query latency have no field; "
                "evaluation_time is null: no evalctl step times a whole evaluation as MTEB does"),
    NotExported("provenance", "the prompt variant, index settings (HNSW, precision, shards), qrels set, empty-query "
                "policy and a served model's server label are in evalctl's manifests; a result file names the model "
                "revision and the dataset revision (here the corpus's content hash) only"),
    NotExported("MTEB task metadata", "MTEB knows no Evalctl* task: mteb reads these files (ResultCache.load_results, "
                "TaskResult.from_disk, BenchmarkResults.to_dataframe), but what needs a task's metadata "
                "(validate_and_filter=True, a benchmark, the leaderboard's task types) finds none; mteb_version is "
                "null: MTEB did not compute these scores"),
)


@dataclass(frozen=True)
class MtebModel:
    """A model as MTEB names it (organization/model, revision) and what its model_meta.json says of it."""

    name: str
    revision: str
    meta: dict

    @property
    def folder(self) -> str:
        """<org__model>/<revision>, as ModelMeta.model_name_as_path names the model's folder."""
        return f"{self.name.replace('/', '__')}/{self.revision}"


@dataclass(frozen=True)
class MtebScore:
    """One model's scores on one split of a task, as a TaskResult entry holds them."""

    model: MtebModel
    task: str
    split: str
    dataset_revision: str  # the corpus's content hash: what MTEB's dataset revision pins, the data scored
    main_score: float
    metrics: dict[str, float]  # keyed as MTEB names them (ndcg_at_10, f1, v_measure, ...)
    source: str  # the stored result it comes from, as the listing names it
    exhaustive: bool = False  # an exact (brute-force) search: what MTEB's retrieval does, so preferred to HNSW


@dataclass(frozen=True)
class TaskFile:
    """One result file: a model revision's scores on one task, by split."""

    model: MtebModel
    task: str
    splits: dict[str, MtebScore]

    @property
    def path(self) -> str:
        return f"{RESULTS}/{self.model.folder}/{self.task}.json"

    def task_result(self) -> dict:
        """The file's content, as TaskResult.to_disk writes it (scores unrounded: they are the report's)."""
        first = next(iter(self.splits.values()))
        return {"dataset_revision": first.dataset_revision, "task_name": self.task, "mteb_version": None,
                "scores": {split: [{"main_score": s.main_score, **s.metrics, "hf_subset": SUBSET,
                                    "languages": LANGUAGES}] for split, s in self.splits.items()},
                "evaluation_time": None, "kg_co2_emissions": None}


@dataclass(frozen=True)
class MtebExport:
    files: tuple[TaskFile, ...]
    not_exported: tuple[NotExported, ...]


def mteb_model(model_id: str, revision: str) -> MtebModel:
    """Model `model_id` at `revision` (the one its result recorded): its Hugging Face name; a fine-tuned model, a local
    folder or a spec without a hub name as evalctl/<model id>, a fine-tuned one adapted from its base. SpecError for
    a model whose spec is not known here."""
    spec = get_model(model_id)
    lineage = spec.lineage or {}
    name = f"evalctl/{spec.id}" if lineage or not spec.hf_id else spec.hf_id
    meta = {**UNKNOWN_META, "name": name, "revision": revision, "n_parameters": round(spec.params_m * 1e6),
            "max_tokens": spec.max_seq_length, "embed_dim": spec.dim, "similarity_fn_name": spec.similarity,
            "framework": ["API"] if spec.endpoint else ["Sentence Transformers"],
            "adapted_from": lineage.get("base_hf_id")}
    return MtebModel(name, revision, meta)


def task_name(corpus: str, views: str, kind: str, label_set: str | None = None) -> str:
    """Evalctl<Corpus><Views>[<LabelSet>]<Type>: corpus and label set CamelCased from their names, the views as
    they are (TToTA when the queries read another view), e.g. EvalctlOpsPizzaTARetrieval."""
    return f"Evalctl{_camel(corpus)}{views}{_camel(label_set or '')}{TASK_TYPES[kind]}"


def _camel(name: str) -> str:
    return "".join(word[:1].upper() + word[1:] for word in re.findall(r"[A-Za-z0-9]+", name))


def result_entries(result: Result, main_score: float | None,
                   means: dict[str, float] | None = None) -> list[MtebScore | NotExported]:
    """What a stored run, classification or clustering result gives MTEB: its score (a DAPFAM result with the note
    why it is not MTEB's task), or why none. `main_score`: the main score its report shows; `means`: a run's
    {metric: mean} as its report counts them (a label result's are its summary's)."""
    m, what = result.manifest, _described(result)
    if m["kind"] not in TASK_TYPES:
        return [NotExported(what, f"no MTEB task type holds evalctl's {m['kind']} results")]
    if m["kind"] == RUN_KIND and (why := _not_one_model(m)):
        return [NotExported(what, why)]
    if main_score is None:
        return [NotExported(what, "its stored scores hold no main score (a clustering of other code levels than "
                                  "its label set's?)")]
    try:
        model = mteb_model(m["model"], m["index_identity"]["revision"] if m["kind"] == RUN_KIND else m["revision"])
    except SpecError as e:
        return [NotExported(what, f"its model's spec is not known here, so neither is its MTEB name ({e})")]
    if m["kind"] != RUN_KIND:
        label_set = m["label_set"]["name"]
        return [MtebScore(model=model, task=task_name(m["corpus"], m["view"], m["kind"], label_set), split=LABEL_SPLIT,
                          dataset_revision=m["corpus_hash"], main_score=main_score, metrics=_label_metrics(m),
                          source=what)]
    task = task_name(m["corpus"], view_pair(m.get("query_view"), m["view"], joiner="To"), m["kind"])
    score = MtebScore(model=model, task=task, split=m["split"] or "all", dataset_revision=m["corpus_hash"],
                      main_score=main_score, source=what, exhaustive=m["method"] == EXACT,
                      metrics={metric.replace("@", "_at_"): v for metric, v in (means or {}).items()})
    return [score, *([NotExported(f"{task} as MTEB's DAPFAM task", DAPFAM)] if _is_dapfam(m["corpus"]) else [])]


def _described(result: Result) -> str:
    """A stored result as the listing names it: its system or target, then its id."""
    m = result.manifest
    if m["kind"] == RUN_KIND:
        return f"{run_label(m)} ({result.id})"
    if m["kind"] in TASK_TYPES:
        return f"{m['kind']} {m['model']}:{m['view']}:{m['label_set']['name']} ({result.id})"
    return f"{m['kind']} {result.id}"


def _not_one_model(m: dict) -> str | None:
    """Why a run is not one embedding model's retrieval of whole queries over whole documents (None: it is)."""
    if m["method"] not in METHODS:
        return f"method {m['method']!r} is none of evalctl's retrieval methods (a run made elsewhere): no model of ours"
    method = METHODS.get(m["method"])
    if method.fused:
        return ("fuses BM25 and dense rankings: a system of several parts, not one model's result (MTEB names its own "
                "hybrid baselines as systems)")
    if not method.vector:
        return ("lexical retrieval (OpenSearch BM25) uses no embedding model; MTEB's BM25 baseline is another "
                "implementation (mteb/baseline-bm25s)")
    if method.passages:
        return f"scores each patent by its passages ({m['passages']}): MTEB embeds a document whole"
    if m.get("query_chunks"):
        return "encodes each query in chunks and fuses their hits: MTEB encodes a query whole"
    if m.get("query_sample"):
        return f"searched a sample of {m['query_sample']['n']} queries: MTEB scores every query of a split"
    return None


def _label_metrics(m: dict) -> dict[str, float]:
    """A classification or clustering result's means keyed as MTEB names them: MTEB's probe (logistic regression) and
    the label set's own code level unprefixed (f1_micro, v_measure), another probe or level as its prefix (knn_f1)."""
    own = MTEB_PROBE if m["kind"] == "classification" else m["label_set"]["level"] or "labels"  # as run_clustering
    return {f"{'' if group == own else group + '_'}{F1_KEYS.get(metric, metric)}": v["mean"]
            for group, metrics in m["summary"].items() for metric, v in metrics.items() if isinstance(v, dict)}


def _is_dapfam(corpus: str) -> bool:
    try:
        return (load_corpus(corpus).manifest.get("source") or {}).get("format") == "dapfam"
    except CorpusNotFound:  # removed since its runs were stored: nothing says it was DAPFAM
        return False


def stored_entries(ref: str) -> list[MtebScore | NotExported]:
    """A stored metrics result (its id) with its own means, or a stored run (id, unique prefix or folder: load_run)
    with the means `evalctl retrieve` or `evaluate` kept for it (scored now when none were)."""
    metrics = next((r for r in results_store.iter_results("metrics") if r.id == ref), None)
    if metrics is None:
        run = load_run(ref)
        means = stored_scores(run) or evaluate_run(run).mean
        return result_entries(run.result, means[PRIMARY], means)
    m = metrics.manifest
    if m["domain"]:
        return [NotExported(f"metrics {metrics.id}", f"scores the {m['domain']} pairs of run {m['run']} only: "
                                                     "MTEB has no place for a domain's share of a split")]
    means = metrics.read_json("metrics.json")["mean"]
    return result_entries(load_run(m["run"]).result, means.get(PRIMARY), means)


def collect(entries: Iterable[MtebScore | NotExported]) -> MtebExport:
    """The result files of `entries`, and what is not exported: their NotExported items, another result for one
    model revision, task and split (or of another corpus version), and STANDING."""
    files: dict[tuple[str, str, str], TaskFile] = {}
    left: list[NotExported] = []
    # of a model's exact and HNSW runs on one task, the exact one is MTEB's kind of search: it is taken first
    for e in sorted(entries, key=lambda e: not (isinstance(e, MtebScore) and e.exhaustive)):
        if isinstance(e, NotExported):
            left.append(e)
            continue
        file = files.setdefault((e.model.name, e.model.revision, e.task), TaskFile(e.model, e.task, {}))
        taken = file.splits.get(e.split) or next(
            (s for s in file.splits.values() if s.dataset_revision != e.dataset_revision), None)
        if taken is None:
            file.splits[e.split] = e
        elif taken != e:  # the same result given twice (a run id and the study holding it) is written once
            left.append(NotExported(e.source, f"{e.model.name} at {e.model.revision} on {e.task} is {taken.source}'s "
                                              "already: MTEB holds one result per model revision, task and split"))
    return MtebExport(tuple(files.values()), tuple(dict.fromkeys((*left, *STANDING))))


def listing(export: MtebExport) -> str:
    lines = ["# Not exported to MTEB", "", "What `evalctl export mteb` left out of the MTEB result files, and why.", ""]
    return "\n".join([*lines, *(f"- **{n.what}**: {n.why}" for n in export.not_exported)]) + "\n"


def write_export(out: Path, export: MtebExport) -> list[str]:
    """Write each result file, each model revision's model_meta.json and the listing into `out` (checked and claimed
    by the caller, output_folder); the paths written, relative to `out`."""
    written = []
    for file in export.files:
        write_into(out, file.path, json.dumps(file.task_result(), indent=2) + "\n")
        written.append(file.path)
    for model in {f.model.folder: f.model for f in export.files}.values():
        written.append(f"{RESULTS}/{model.folder}/{MODEL_META}")
        write_into(out, written[-1], json.dumps(model.meta, indent=2) + "\n")
    write_into(out, LISTING, listing(export))
    return [*written, LISTING]
