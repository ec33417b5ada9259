"""The latency task: how fast each retrieval system of a study answers when served, beside how well it
retrieves. One step per corpus x model x view x method, and one experiment per corpus: the systems of every
`latency:` entry of a corpus are timed together, interleaved (evaluators/retrieval/latency_experiment.py: rounds of
one `_search` per query and system, the order rotated, busy rounds repeated), so their latencies are compared paired
and with their noise. The first step of a corpus to run measures the experiment; the others take their system's
part of it (a step's record names the experiment).

A latency is an observation of one machine at one moment, not a reproducible score: the task takes no expected
scores, and its section shows each system's percentiles with their CIs, which systems the noise cannot tell apart,
and whether the machine was busy. Its report part also sets each timed system's cost beside its retrieval score
(quality_cost: the quality-and-cost table, two Pareto charts, and the finding of the best system within the spec's
`budget`, drawn only from a quiet experiment). A stored measurement stays the steps' until a corpus's systems,
their indexes or the settings change; `evalctl latency` by hand times one system alone.
Fine-tuned models join only when asked (`include_tuned: true`): a tuned model serves at its base's cost.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from evalctl import results_store
from evalctl.config_files import SpecError
from evalctl.corpus.qrels import SPLITS
from evalctl.corpus.store import load_corpus
from evalctl.evaluators.retrieval.latency import LatencyError
from evalctl.evaluators.retrieval.latency_experiment import (FORMAT, ExperimentParams, analyse,
                                                             measure_interleaved, stored, summaries)
from evalctl.evaluators.retrieval.params import RetrievalParams
from evalctl.evaluators.retrieval.retrieve import RetrievalSpec, identify, retrieval_spec
from evalctl.indexers.index_layout import index_name
from evalctl.indexers.index_loader import read_manifest, result_identity
from evalctl.opensearch.connection import make_client
from evalctl.study.abstasks.base import AbsTask, Computed, IndexNeeds, TaskMetadata
from evalctl.study.abstasks.steps import Recorded, SpecModels
from evalctl.study.spec.experiment import method_targets, passage_settings
from evalctl.study.spec.step_ids import QrelsId, Target, TaskStepId
from evalctl.study.tasks.latency import quality_cost
from evalctl.study.tasks.latency.quality_cost import Budget

KIND = "latency"
SCORES = ("p50_ms", "p95_ms")  # client latency at one request in flight, over the experiment's kept rounds
SHARED = ("qrels", "split", "warmup", "rounds", "max_queries", "busy_repeats", "layouts")  # one experiment: one setting


@dataclass(frozen=True)
class LatencyEntry:
    corpus: str
    views: tuple[str, ...] = ("TAC",)
    models: tuple[str, ...] = ()  # default: every model of the spec
    include_tuned: bool = False  # a tuned model serves at its base's cost: measured only when asked
    methods: tuple[str, ...] = ("bm25", "dense")  # hybrid/rrf: native (one request through the pipeline)
    qrels: str = "citations"
    split: str = "test"
    k: int = 100
    # ExperimentParams' fields, same names and defaults (tests/study/test_task_latency.py checks them)
    warmup: int = 20
    rounds: int = 5
    max_queries: int = 100
    busy_repeats: int = 2
    layouts: tuple[str, ...] = ("serving",)  # serving: an index of each system's own; study: the study's
    budget: Budget = Budget()  # the report's finding names the best system within it (quality_cost)
    passages: tuple[str, ...] = ()  # passage settings the passage methods are timed on, as RetrievalEntry's
    query_chunks: bool = False  # chunked queries timed too (one _msearch of a query's chunks), as RetrievalEntry's


def _params(entry: LatencyEntry) -> ExperimentParams:
    return ExperimentParams(entry.warmup, entry.rounds, entry.max_queries, entry.busy_repeats, tuple(entry.layouts))


def _spec(entry: LatencyEntry, t: Target) -> RetrievalSpec:
    return retrieval_spec(RetrievalParams(
        entry.corpus, t.view, t.what, None if t.model == "bm25" else t.model, qrels=entry.qrels, split=entry.split,
        k=entry.k, passages=t.passages and t.passages.name, query_chunks=t.query_chunks is not None))


def _stored(step: Recorded) -> results_store.Result | None:
    return results_store.get(step.target.corpus, step.ref) if step.ref else None


class LatencyTask(AbsTask):
    """A stored experiment stays its steps' until the corpus, a system, an index or the settings change."""

    metadata = TaskMetadata(KIND, "latency", LatencyEntry, "Serving latency", "p50_ms", SCORES,
                            reads=("retrieval",))  # its findings and section set each system's cost beside its score

    def check_entry(self, spec, entry: LatencyEntry, at: str) -> None:
        if entry.split not in SPLITS:
            raise SpecError(f"{at}: unknown split {entry.split!r} (one of {', '.join(SPLITS)})")
        try:
            _params(entry)
        except LatencyError as e:
            raise SpecError(f"{at}: {e}") from None
        for key in ("p95_ms", "index_mb_per_10k"):
            if (limit := getattr(entry.budget, key)) is not None and not limit > 0:
                raise SpecError(f"{at}: budget.{key} {limit}: must be more than 0 (or left out: no bound)")
        first = next(e for e in spec.entries(KIND) if e.corpus == entry.corpus)
        if differ := [k for k in SHARED if getattr(first, k) != getattr(entry, k)]:
            said = ", ".join(repr(getattr(first, k)) for k in differ)
            raise SpecError(f"{at}: {', '.join(f'{k} {getattr(entry, k)!r}' for k in differ)}: the latency entries "
                            f"of corpus {entry.corpus} are timed as one experiment and must agree on "
                            f"{', '.join(SHARED)} (its first entry says {said})")

    def index_needs(self, entry: LatencyEntry) -> IndexNeeds:
        return IndexNeeds(tuple(entry.views), passage_settings(entry.passages))

    def targets(self, models: SpecModels, entry: LatencyEntry):
        for model, view, method, passages, chunks in method_targets([m.id for m in models.of(entry)], entry):
            yield TaskStepId(self.command, Target(KIND, entry.corpus, model, view, method,
                                                  passages=passages, query_chunks=chunks))

    def _systems(self, ctx, corpus: str) -> list[tuple[LatencyEntry, Target]]:
        """Every system the corpus's latency entries time, once each, in the spec's order: one experiment."""
        out = {}
        for e in ctx.spec.entries(KIND):
            if e.corpus == corpus:
                for sid in self.targets(ctx.models, e):
                    out.setdefault(sid.target, e)
        return [(e, t) for t, e in out.items()]

    def deps(self, ctx, entry: LatencyEntry, sid: TaskStepId):
        """The qrels set and the index of every system of the corpus's experiment (the first step measures all)."""
        qrels = ctx.planned(QrelsId(entry.corpus, entry.qrels))
        models = dict.fromkeys(None if t.model == "bm25" else t.model for _, t in self._systems(ctx, entry.corpus))
        return (*qrels, *dict.fromkeys(ctx.index_ids[(entry.corpus, m)] for m in models))

    def identity(self, ctx, entry: LatencyEntry, sid: TaskStepId) -> dict:
        client, indexes = make_client(), {}

        def index(t: Target) -> dict:
            model = None if t.model == "bm25" else t.model
            if model not in indexes:
                indexes[model] = result_identity(read_manifest(client, index_name(entry.corpus, model)) or {})
            return indexes[model]

        return {"corpus_hash": load_corpus(entry.corpus).content_hash, "index": index(sid.target),
                "retrieval": asdict(_spec(entry, sid.target)), "settings": asdict(_params(entry)),
                "experiment_format": FORMAT, "experiment": [{"retrieval": asdict(_spec(e, t)), "index": index(t)}
                               for e, t in self._systems(ctx, entry.corpus)]}

    def adopt(self, ctx, entry: LatencyEntry, sid: TaskStepId) -> Computed | None:
        """The newest stored experiment of exactly this corpus's systems as they are now (their run identities:
        index, queries, depth) with these settings: another step of it measured it."""
        client, corpus = make_client(), load_corpus(entry.corpus)
        systems = self._systems(ctx, entry.corpus)
        names = [identify(client, _spec(e, t), corpus).identity for e, t in systems]
        settings = asdict(_params(entry))
        mine = [r for r in stored(corpus.name) if r.manifest.get("system_identities") == names
                and all(r.manifest.get(k) == (list(v) if isinstance(v, tuple) else v) for k, v in settings.items())]
        newest = max(mine, key=lambda r: r.manifest["measured_at"], default=None)
        return newest and _computed(newest, _position(newest, sid.target))

    def compute(self, ctx, entry: LatencyEntry, sid: TaskStepId) -> Computed:
        if (done := self.adopt(ctx, entry, sid)) is not None:  # measured by the corpus's first step to run
            return done
        systems = self._systems(ctx, entry.corpus)
        exp = measure_interleaved(make_client(), [_spec(e, t) for e, t in systems], _params(entry),
                                  labels=[str(t) for _, t in systems])
        return _computed(exp.result, _position(exp.result, sid.target))

    def metrics(self, e, at: str) -> tuple[str, ...]:
        raise SpecError(f"{at}: a latency is a timing of one machine at one moment, not a reproducible score: "
                        "expected scores cannot name it")

    def headline(self, report, steps: list[Recorded], out: Path) -> None:
        """No part in the headline: timings sit in their own section, with the machine they were taken on."""

    def findings(self, report, spec, steps: list[Recorded], pairs: list[dict]) -> list:
        """The best system within each corpus's stated budget (quality_cost): timings alone support no ranked claim,
        the claim is on the scores of the systems a budget admits."""
        systems, _ = quality_cost.joined(report, steps)
        return quality_cost.budget_findings(systems, _budgets(spec), quality_cost.tests_for(report, steps))

    def per_unit(self, step: Recorded, metric: str, runs) -> dict[str, float]:
        """Per query: the system's median client latency over the experiment's kept rounds."""
        if metric not in SCORES:
            raise ValueError(f"{metric}: not a latency of this task (one of {', '.join(SCORES)})")
        result = _stored(step)
        _, analysis = analyse(result)
        i = _position(result, step.target)
        medians = np.nanmedian(analysis.ms[i], axis=0)
        return {q: float(v) for q, v in zip(result.manifest["queries"], medians) if not np.isnan(v)}

    def section(self, report, spec, steps: list[Recorded], out: Path) -> None:
        if not spec.entries(KIND):
            return  # a section only for a spec that asks for latency
        systems, unscored = quality_cost.joined(report, steps)
        quality_cost.section(report, systems, unscored, _budgets(spec), out)
        quality_cost.precision_section(report, systems, quality_cost.tests_for(report, steps))
        report.h(self.metadata.title)
        experiments = {s.ref: res for s in steps if s.kind == KIND and s.scores and (res := _stored(s))}
        if not experiments:
            report.p("No latency measured yet (`evalctl run`; one system by hand: `evalctl latency`).")
            return
        for res in experiments.values():
            quality_cost.experiment_section(report, res, report.statistics)


def _computed(result: results_store.Result, i: int) -> Computed:
    """Step scores of system i of a stored experiment."""
    _, analysis = analyse(result)
    s = summaries(result, analysis)[i]
    m = result.manifest
    busy = " (machine busy: no finding drawn)" if m["busy"] else ""
    return Computed({"p50_ms": round(s.p50_ms.value, 3), "p95_ms": round(s.p95_ms.value, 3), "errors": float(s.errors)},
                    result.id, f"p50 {s.p50_ms.value:.1f} ms [{s.p50_ms.lo:.1f}, {s.p50_ms.hi:.1f}], p95 "
                               f"{s.p95_ms.value:.1f} ms, {s.errors} errors, {len(m['system_identities'])} systems x "
                               f"{len(m['layouts'])} layout(s) interleaved, "
                               f"{len(m['quiet'])} rounds{busy}")


def _position(result: results_store.Result, target: Target) -> int:
    """Where the step's system sits among the experiment's arms (their labels are the steps' targets), in the
    layout findings read (the first asked for)."""
    m = result.manifest
    return [(s["label"], s["layout_asked"]) for s in m["systems"]].index((str(target), m["layouts"][0]))


def _budgets(spec) -> dict[str, quality_cost.Budget]:
    """Each corpus's budget: its first latency entry that states one."""
    out: dict[str, quality_cost.Budget] = {}
    for e in spec.entries(KIND):
        if e.budget.stated:
            out.setdefault(e.corpus, e.budget)
    return out


TASK = LatencyTask()
