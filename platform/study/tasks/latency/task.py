"""The latency task: how fast each retrieval system of a study answers when served, beside how well it
retrieves (issue 42). One step per corpus x model x view x method: `evalctl latency` (evaluators/retrieval/
latency.py: one `_search` per query after a warm-up, at each concurrency level) on the study's index, its
stored result named by a study-step record.

A latency is an observation of one machine at one moment, not a reproducible score: the task takes no expected
scores, and its section shows each measurement with the machine's busy flag. Its report part also sets each timed
system's cost beside its retrieval score (quality_cost: the quality-and-cost table, two Pareto charts, and the one
finding, on scores, of the best system within the spec's `budget`). A stored
measurement stays the step's until the index or the settings change; `evalctl latency` by hand takes another.
Fine-tuned models join only when asked (`include_tuned: true`): a tuned model serves at its base's cost.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from evalctl import results_store
from evalctl.config_files import SpecError
from evalctl.corpus.qrels import SPLITS
from evalctl.corpus.store import load_corpus
from evalctl.evaluators.retrieval.latency import LatencyError, LatencyParams, measure_latency, read_timings
from evalctl.evaluators.retrieval.params import RetrievalParams
from evalctl.evaluators.retrieval.retrieve import RetrievalSpec, retrieval_spec
from evalctl.indexers.index_layout import index_name
from evalctl.indexers.index_loader import read_manifest, result_identity
from evalctl.opensearch.connection import make_client
from evalctl.study.abstasks.base import AbsTask, Computed, IndexNeeds, TaskMetadata
from evalctl.study.abstasks.steps import Recorded, SpecModels
from evalctl.study.page.names import system_title
from evalctl.study.spec.experiment import method_targets, passage_settings
from evalctl.study.spec.step_ids import Target, TaskStepId
from evalctl.study.tasks.latency import quality_cost
from evalctl.study.tasks.latency.quality_cost import Budget

KIND = "latency"
SCORES = ("p50_ms", "p95_ms", "qps")  # client latency and throughput of the first concurrency level


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
    # LatencyParams' fields, same names and defaults (tests/study/test_task_latency.py checks them)
    warmup: int = 20
    concurrency: tuple[int, ...] = (1, 4)
    max_queries: int = 200
    time_limit_s: float = 60.0
    budget: Budget = Budget()  # the report's finding names the best system within it (quality_cost)
    passages: tuple[str, ...] = ()  # passage settings the passage methods are timed on, as RetrievalEntry's
    query_chunks: bool = False  # chunked queries timed too (one _msearch of a query's chunks), as RetrievalEntry's


def _params(entry: LatencyEntry) -> LatencyParams:
    return LatencyParams(entry.warmup, tuple(entry.concurrency), entry.max_queries, entry.time_limit_s)


def _scores(passes) -> dict:
    """The first level's client p50/p95 and QPS, each level's under `@<concurrency>`, and the errors."""
    scores = {"errors": float(sum(p.errors for p in passes))}
    for i, p in enumerate(passes):
        if p.client_ms is None:
            continue  # no answered query: no figure (the errors say why)
        figures = {"p50_ms": p.client_ms.p50, "p95_ms": p.client_ms.p95, "qps": p.qps}
        scores.update({f"{k}@{p.concurrency}": v for k, v in figures.items()})
        if i == 0:
            scores.update(figures)
    return scores


def _spec(entry: LatencyEntry, sid: TaskStepId) -> RetrievalSpec:
    t = sid.target
    return retrieval_spec(RetrievalParams(
        entry.corpus, t.view, t.what, None if t.model == "bm25" else t.model, qrels=entry.qrels, split=entry.split,
        k=entry.k, passages=t.passages and t.passages.name, query_chunks=t.query_chunks is not None))


def _stored(step: Recorded) -> results_store.Result | None:
    return results_store.get(step.target.corpus, step.ref) if step.ref else None


class LatencyTask(AbsTask):
    """A stored measurement stays the step's until the corpus, the index or the settings change."""

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

    def index_needs(self, entry: LatencyEntry) -> IndexNeeds:
        return IndexNeeds(tuple(entry.views), passage_settings(entry.passages))

    def targets(self, models: SpecModels, entry: LatencyEntry):
        for model, view, method, passages, chunks in method_targets([m.id for m in models.of(entry)], entry):
            yield TaskStepId(self.command, Target(KIND, entry.corpus, model, view, method,
                                                  passages=passages, query_chunks=chunks))

    def identity(self, ctx, entry: LatencyEntry, sid: TaskStepId) -> dict:
        model = sid.target.model
        meta = read_manifest(make_client(), index_name(entry.corpus, None if model == "bm25" else model)) or {}
        return {"corpus_hash": load_corpus(entry.corpus).content_hash, "index": result_identity(meta),
                "retrieval": asdict(_spec(entry, sid)), "settings": asdict(_params(entry))}

    def compute(self, ctx, entry: LatencyEntry, sid: TaskStepId) -> Computed:
        params = _params(entry)
        lat = measure_latency(make_client(pool_size=max(params.concurrency)), _spec(entry, sid), params)
        busy = " (machine busy)" if lat.result.manifest["busy"] else ""
        return Computed(_scores(lat.passes), lat.result.id, "; ".join(
            f"concurrency {p.concurrency}: p50 {p.client_ms.p50 if p.client_ms else '-'} ms, {p.qps} QPS, "
            f"{p.errors} errors" for p in lat.passes) + busy)

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
        """Per query: the client latency at the first concurrency level (`qps` is one value per pass)."""
        if metric not in ("p50_ms", "p95_ms"):
            raise ValueError(f"{metric} is one value per pass, not per query")
        rows = read_timings(_stored(step))
        first = rows[0].concurrency if rows else None
        return {r.query_id: r.client_ms for r in rows if r.concurrency == first and r.error is None}

    def section(self, report, spec, steps: list[Recorded], out: Path) -> None:
        import pandas as pd

        if not spec.entries(KIND):
            return  # a section only for a spec that asks for latency
        systems, unscored = quality_cost.joined(report, steps)
        quality_cost.section(report, systems, unscored, _budgets(spec), out)
        quality_cost.precision_section(report, systems, quality_cost.tests_for(report, steps))
        report.h(self.metadata.title)
        done = [(s, res) for s in steps if s.kind == KIND and s.scores and (res := _stored(s))]
        if not done:
            report.p("No latency measured yet (`evalctl run`; one by hand: `evalctl latency`).")
            return
        for corpus in dict.fromkeys(s.target.corpus for s, _ in done):
            rows = []
            for s, res in (d for d in done if d[0].target.corpus == corpus):
                m = res.manifest
                system = system_title({"method": m["method"], "model": m["model"],
                                       "fusion_mode": m["retrieval"].get("fusion_mode")})
                for p in m["passes"]:
                    client = p["client_ms"]  # None: no query of the pass was answered
                    rows.append({"system": system, "view": s.target.view, "concurrency": p["concurrency"],
                                 "queries": p["sent"], **{f"{q} ms": f"{client[q]:.1f}" if client else "-"
                                                          for q in ("p50", "p95")},
                                 "QPS": f"{p['qps']:.1f}", "errors": p["errors"], "busy": "yes" if m["busy"] else "no",
                                 "result": res.id})
            first = done[0][1].manifest
            report.p(f"Corpus {corpus}: client latency per query (one `_search` each, after a warm-up of "
                     f"{first['warmup']} queries; query encoding not counted), throughput and errors per concurrency "
                     f"level. Busy: {first['busy_rule']}.")
            report.table(pd.DataFrame(rows))


def _budgets(spec) -> dict[str, quality_cost.Budget]:
    """Each corpus's budget: its first latency entry that states one."""
    out: dict[str, quality_cost.Budget] = {}
    for e in spec.entries(KIND):
        if e.budget.stated:
            out.setdefault(e.corpus, e.budget)
    return out


TASK = LatencyTask()
