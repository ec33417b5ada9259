"""The retrieval task: one run per corpus x model x view x method (retrieve + evaluate), its spec entry and
checks, expected-score target, headline (retrieval_headline), findings and report section (tables with
significance letters, IN/OUT, views, scaling, fusion gain, and the per-query pages of retrieval_queries)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np

from evalctl.config_files import SpecError
from evalctl.corpus.qrels import SPLITS, qrels_manifest
from evalctl.corpus.store import load_corpus
from evalctl.evaluators.fusion.search_pipelines import has_neural_search
from evalctl.evaluators.fusion.settings import FusionSpec
from evalctl.evaluators.retrieval import methods as retrieval_methods
from evalctl.evaluators.retrieval.fusion_sweep import fusion_sweep
from evalctl.evaluators.retrieval.methods import METHODS
from evalctl.evaluators.retrieval.params import RetrievalParams
from evalctl.evaluators.retrieval.retrieve import RetrievalOptions, RetrievalSpec, find_stored, retrieval_spec, retrieve
from evalctl.evaluators.scoring.metrics import METRICS, PRIMARY, evaluate_and_store, evaluate_run, stored_scores
from evalctl.indexers.index_layout import index_name
from evalctl.indexers.index_loader import read_manifest, result_identity
from evalctl.models import get_model
from evalctl.opensearch.connection import make_client
from evalctl.output_folder import write_into
from evalctl.evaluators.scoring.run_queries import run_queries
from evalctl.study.abstasks.base import AbsTask, Computed, IndexNeeds, TaskMetadata
from evalctl.study.abstasks.steps import Recorded, SpecModels, spec_models
from evalctl.study.page.charts import FONT_PT, WIDTH_IN, Bar, Series, grouped_bars
from evalctl.study.page.document import Report, RunCache, plt_module, save_figure
from evalctl.study.page.names import method_title, model_title, relative, system_title
from evalctl.study.spec.experiment import (CHUNK_FUSION, check_spec_name, method_targets, passage_setting,
                                          passage_settings)
from evalctl.study.spec.step_ids import Target, TaskStepId
from evalctl.study.tasks.retrieval import passages as passage_section
from evalctl.study.tasks.retrieval.coverage import DOMAINS, coverage_section, documents_without, domain_scores
from evalctl.study.tasks.retrieval.groups import ViewGroup, query_page_name, table_tests, view_groups
from evalctl.study.tasks.retrieval.headline import headline
from evalctl.study.tasks.retrieval.methods_section import methods_section
from evalctl.study.tasks.retrieval.queries import query_pages
from evalctl.study.tasks.retrieval.scores import corpus_letters
from evalctl.study.tasks.retrieval.ties import section as ties_section

if TYPE_CHECKING:
    import pandas as pd

    from evalctl.study.page.findings import Finding

ALL_SPLITS = "all"  # `split: all` asks every query of the qrels set, as `evalctl retrieve --split all`


@dataclass(frozen=True)
class RetrievalEntry:
    corpus: str
    views: tuple[str, ...] = ("TAC",)
    query_view: str | None = None  # the queries' text; default: each corpus view (DAPFAM's query x corpus views)
    models: tuple[str, ...] = ()  # default: every model of the spec; models tuned from these join them
    methods: tuple[str, ...] = ("bm25", "dense")  # names in evaluators/retrieval/methods.py METHODS
    qrels: str = "citations"
    split: str = "test"
    k: int = 100
    # hybrid/rrf: native search pipelines (neural-search; a node without the plugin fails the step),
    # client-side ranx fusion, or "auto": native, falling back to client fusion on a node without the
    # plugin (the run's label then says hybrid/client).
    fusion_mode: Literal["auto", "native", "client"] = "native"
    dense_weight: float = 0.5
    # hybrid: tune the dense weight on the dev queries over these values (as `evalctl fusion-sweep`) and
    # report the chosen one on `split`; () = use dense_weight
    dense_weights: tuple[float, ...] = ()
    include_tuned: bool = True  # False: models fine-tuned by this spec do not join this entry
    # `exact` searches a seeded sample of this many of the split's queries (brute force costs corpus x queries;
    # an ANN-fidelity check at scale needs only a sample); None: every query
    exact_queries: int | None = None
    # every method searches a seeded sample of this many of the split's queries (`evalctl retrieve
    # --query-sample`: per-query costs at scale); `exact_queries`, when given, still decides exact's
    query_sample: int | None = None
    # passage settings (WINDOW[:STRIDE] in the model's tokens) each passage method (dense-maxp) runs with, one run
    # each; the index gets the views' passages of every setting
    passages: tuple[str, ...] = ()
    # the methods that take chunked queries (dense-maxp, exact-maxp) also run with each query patent cut into chunks
    # of the passage setting, the chunks' hits fused by max: a second run each, beside the one that truncates
    query_chunks: bool = False

    @property
    def query_split(self) -> str | None:
        """The split as RetrievalSpec takes it (None: every query)."""
        return None if self.split == ALL_SPLITS else self.split


def _spec(client, entry: RetrievalEntry, sid: TaskStepId) -> RetrievalSpec:
    t = sid.target
    mode = entry.fusion_mode if entry.fusion_mode != "auto" else ("native" if has_neural_search(client) else "client")
    return retrieval_spec(RetrievalParams(
        entry.corpus, t.view, t.what, None if t.model == "bm25" else t.model, query_view=entry.query_view,
        qrels=entry.qrels, split=entry.split, k=entry.k, fusion_mode=mode, dense_weight=entry.dense_weight,
        passages=t.passages and t.passages.name, query_chunks=t.query_chunks is not None,
        query_sample=entry.exact_queries if t.what == "exact" and entry.exact_queries else entry.query_sample))


def _sweep(entry: RetrievalEntry, sid: TaskStepId) -> tuple[float, ...]:
    """The dense weights a fused method is tuned over on the dev queries (none: it uses `dense_weight`)."""
    return entry.dense_weights if METHODS.get(sid.target.what).tunable else ()


class RetrievalTask(AbsTask):
    """One run per step (retrieve + evaluate). `evalctl retrieve` with the same inputs makes the same run: the step
    then adopts it."""

    metadata = TaskMetadata("retrieval", "retrieve", RetrievalEntry, "Retrieval", PRIMARY)

    def check_entry(self, spec, entry: RetrievalEntry, at: str) -> None:
        # A BEIR corpus's given qrels keep the splits its qrels/<split>.tsv files name; every other set has these.
        if spec.corpus(entry.corpus).format == "beir" and entry.qrels == "given":
            check_spec_name(entry.split, "split", at)
        elif entry.split not in (*SPLITS, ALL_SPLITS):
            raise SpecError(f"{at}: unknown split {entry.split!r} (one of {', '.join((*SPLITS, ALL_SPLITS))})")
        weights = (("dense_weight", entry.dense_weight), *((f"dense_weights[{j}]", w) for j, w in enumerate(entry.dense_weights)))
        for key, w in weights:
            try:
                FusionSpec(dense_weight=w)
            except ValueError as e:
                raise SpecError(f"{at}: {key}: {e}") from None
        for key in ("exact_queries", "query_sample"):
            if (n := getattr(entry, key)) is not None and n < 1:
                raise SpecError(f"{at}: {key} {n}: must be 1 or more (or left out: every query)")
        if entry.dense_weights and entry.split == "dev":  # as fusion_sweep refuses it: the weights are tuned on dev
            raise SpecError(f"{at}: dense_weights are tuned on the dev queries: report on another split (split: test)")

    def index_needs(self, entry: RetrievalEntry) -> IndexNeeds:
        return IndexNeeds(tuple(entry.views), passage_settings(entry.passages))

    def targets(self, models: SpecModels, entry: RetrievalEntry):
        for model, view, method, passages, chunks in method_targets([m.id for m in models.of(entry)], entry):
            yield TaskStepId(self.command, Target(self.name, entry.corpus, model, view, method,
                                                  entry.query_view or view, passages, chunks))

    def identity(self, ctx, entry: RetrievalEntry, sid: TaskStepId) -> dict:
        client, corpus = make_client(), load_corpus(entry.corpus)
        meta = read_manifest(client, index_name(entry.corpus, None if sid.target.model == "bm25" else sid.target.model))
        rspec, sweep = _spec(client, entry, sid), _sweep(entry, sid)
        # a sampled step's scores were once kept over the whole split (metrics._scores_identity): not reused
        sampled = {"scored_on": "searched queries"} if rspec.query_sample else {}
        return {"corpus_hash": corpus.content_hash, "index": result_identity(meta or {}), "retrieval": asdict(rspec),
                "qrels_spec": qrels_manifest(corpus, entry.qrels).get("spec"),
                **({"dense_weights_tuned_on_dev": list(sweep)} if sweep else {}), **sampled}

    def adopt(self, ctx, entry: RetrievalEntry, sid: TaskStepId) -> Computed | None:
        if _sweep(entry, sid):
            return None  # a tuned run's weight is known only after its sweep: no run to look for
        client = make_client()
        found = find_stored(client, _spec(client, entry, sid))
        return Computed(scores, found.id) if found and (scores := stored_scores(found)) else None

    def compute(self, ctx, entry: RetrievalEntry, sid: TaskStepId) -> Computed:
        client = make_client()
        rspec, sweep = _spec(client, entry, sid), _sweep(entry, sid)  # one plugin check per step
        if sweep:
            res = fusion_sweep(client, rspec, list(sweep), mode=rspec.fusion_mode,
                               options=RetrievalOptions(progress=False))
            run, how = res.test_run, f", dense weight {res.best.dense_weight} tuned on dev"
        else:
            run, how = retrieve(client, rspec, RetrievalOptions(progress=False)), ""
        scores = evaluate_and_store(run).mean
        return Computed(scores, run.id, f"{run.label}: nDCG@10 {scores['ndcg@10']:.4f} "
                                        f"({run.manifest['n_queries']} queries{how})")

    def expected_target(self, e) -> Target:
        return Target(self.name, e.corpus, e.model, e.view, e.method, e.query_view or e.view,
                      passage_setting(e.passages, "passages") if e.passages else None,
                      CHUNK_FUSION if e.query_chunks else None)

    def metrics(self, e, at: str) -> tuple[str, ...]:
        if e.method not in METHODS:
            raise SpecError(f"{at}: a retrieval score needs a method, one of {', '.join(METHODS)} (got {e.method!r})")
        if METHODS.get(e.method).passages != bool(e.passages):
            raise SpecError(f"{at}: method {e.method} " + ("searches passages: give its `passages:` setting"
                            if not e.passages else "searches whole documents: `passages:` is for a passage method"))
        if e.passages:
            passage_setting(e.passages, f"{at}: passages")
        if e.query_chunks and not METHODS.get(e.method).query_chunks:
            raise SpecError(f"{at}: query_chunks: method {e.method} does not take chunked queries")
        return METRICS

    def check_stored(self, spec, entry: RetrievalEntry) -> None:
        qrels_manifest(load_corpus(entry.corpus), entry.qrels)  # names the missing set and how to build it

    def per_unit(self, step: Recorded, metric: str, runs: RunCache) -> dict[str, float]:
        return evaluate_run(runs.stored(step.ref)).per_query[metric]

    def report_scores(self, step: Recorded, runs: RunCache) -> dict[str, float]:
        """The step's means under the report's empty-query policy: its study record's when every query counts (they
        were computed so), else from its run's per-query values."""
        return step.scores if runs.empty_queries == "keep" else evaluate_run(runs.stored(step.ref)).mean

    def headline(self, report: Report, steps: list[Recorded], out: Path) -> None:
        headline(report, steps, out)

    def findings(self, report: Report, spec, steps: list[Recorded], pairs: list[dict]) -> list[Finding]:
        """The best system, view, fusion gain and models ranked per corpus, the IN->OUT drop of its best system,
        and each recipe's effect on dense retrieval."""
        # scipy (its bootstrap): an up-to-date report never pays for it
        from evalctl.study.page.findings import FindingTests, recipe_findings  # scipy
        from evalctl.study.tasks.retrieval import findings as rf  # scipy

        results, sampled = [], set()
        for s in steps:
            if s.kind == self.name and s.scores and s.ref:
                run = report.runs.stored(s.ref)
                results.append(rf.retrieval_result(s.target, run))
                if run.manifest.get("query_sample"):
                    sampled.add(run.id)
        # A system that searched a sample (exact_queries) is ranked against the others in its own table, on the
        # sample's queries; the findings rank the systems of a corpus on the queries they all searched.
        full = {r.corpus for r in results if r.run_id not in sampled}
        results = [r for r in results if r.run_id not in sampled or r.corpus not in full]
        tests = FindingTests(report.statistics, table_tests(view_groups(report, steps)))
        found = rf.retrieval_findings(results, tests)
        for corpus in dict.fromkeys(r.corpus for r in results):
            best = max((r for r in results if r.corpus == corpus), key=lambda r: r.mean)
            run = report.runs[best.run_id]
            if (run.manifest.get("qrels_spec") or {}).get("source") != "known_item":
                domains = {d: (sc.n_queries, sc.mean[PRIMARY])
                           for d in ("IN", "OUT") for sc in [evaluate_run(run, domain=d, metrics=(PRIMARY,))]}
                found += [f for f in [rf.in_out_finding(corpus, best.label, best.run_id, domains)] if f]
        return found + recipe_findings([p for p in pairs if p["what"] == "dense"], tests)

    def section(self, report: Report, spec, steps: list[Recorded], out: Path) -> None:
        import pandas as pd

        from evalctl.evaluators.scoring.compare import (common_queries_note, ranx_latex,  # pandas, scipy
                                                        significance_note, tables)

        report.h(self.metadata.title)
        groups = view_groups(report, steps)
        if not groups:
            report.p("No retrieval results yet (run `evalctl run` first, or the spec has no retrieval).")
            return
        models = spec_models(spec)
        methods_section(report, spec, groups, {sid.target: e.fusion_mode for e in spec.entries(self.name)
                                               for sid in self.targets(models, e)})
        coverage_section(report, spec.coverage, groups)
        letters = corpus_letters(groups)
        for g in groups:
            mine = [letters[(g.corpus, r.system_name)] for r in g.main_runs]
            views = (f"queries {g.query_view}, documents {g.view}" if g.query_view != g.view else f"view {g.view}")
            test = f": letters by {significance_note(g.comparison)}" if g.comparison else ""
            report.p(f"Corpus {g.corpus}, {views}, qrels {g.runs[0].manifest.get('qrels')}{test}.")
            if g.known_item:
                report.p("Known-item sanity task: each query is a patent's own text in the query view and its one "
                         "relevant document is that patent. It checks that search works and how a view dilutes "
                         "the match; it says nothing about prior-art relevance, and IN/OUT does not apply.")
            if g.comparison is not None:
                titles = [system_title(r.manifest) for r in g.main_runs]
                dfs = tables(g.comparison, names=titles, letters=mine)
                report.table(dfs["main"])
                report.p(f"Paired tests of {PRIMARY} (raw and Holm-adjusted p, the family's size, win/tie/loss):")
                report.table(dfs["significance"][dfs["significance"]["metric"] == PRIMARY])
                ranx_file = f"ranx-{g.corpus}-{g.file_part}.tex"  # ranx's Report, for a paper
                write_into(out, ranx_file, ranx_latex(g.comparison, f"tab:ranx-{g.corpus}-{g.file_part}", titles))
                report.file(ranx_file, f"The same table as ranx's LaTeX (Report.to_latex), a document pdflatex "
                                       f"compiles as it is: {ranx_file}")
                if not g.known_item:
                    report.p("IN vs OUT of domain (relative drop), as DAPFAM defines it:")
                    report.table(dfs["domains"])
                    _in_out_plot(report, g, out, f"inout-{g.corpus}-{g.file_part}.png")
            else:
                report.table(pd.DataFrame([_row(g.steps[i], report) for i in g.main]).drop(columns="fusion_mode"))
            for sub in g.subsets:  # runs that searched another query set (a sample): on the queries it shares
                report.p(f"Corpus {g.corpus}, {views}, on the queries of a narrower query set (a sample). "
                         f"{common_queries_note(sub)}The letters name this table's systems.")
                names = {r.id: system_title(r.manifest) for r in g.runs}
                report.table(tables(sub, names=[names[i] for i in sub.run_ids])["main"])
            if not g.known_item:
                page = query_page_name(g)
                report.link(page, f"Per query ({g.corpus}, {views}): each citation's rank in every system, "
                                  "the citations no system finds")
        frame = pd.DataFrame([_row(s, report) for g in groups for s in g.steps])
        dense = frame[frame["method"] == "dense"]
        for corpus, group in dense.groupby("corpus", sort=False):
            _views_heatmap(report, corpus, group, out)
            _scaling_plot(report, corpus, group, out)
        # passage methods' fusion is set beside its document counterpart in the passage section
        gains, fused_methods = [], [f for f in retrieval_methods.fused_methods() if not METHODS.get(f).passages]
        for (corpus, model, view), g in frame.groupby(["corpus", "model", "view"]):
            by, by_mode = dict(zip(g["method"], g[PRIMARY])), dict(zip(g["method"], g["fusion_mode"]))
            for fused in fused_methods:
                if fused in by and "dense" in by:
                    gains.append({"corpus": corpus, "model": model_title(model), "view": view,
                                  "fusion": method_title(fused, by_mode[fused]), f"dense {PRIMARY}": by["dense"],
                                  f"fused {PRIMARY}": by[fused], "gain": relative(by[fused], by["dense"])})
        report.p("Fusion gain over dense retrieval (same depth and model; the method says native pipeline or "
                 "client fusion):")
        report.table(pd.DataFrame(gains) if gains else pd.DataFrame([{"note": "no fused runs"}]))
        passage_section.section(report, groups)
        ties_section(report, groups)
        for page_name, query_page in query_pages(report, groups, out):
            write_into(out, f"{page_name}.md", query_page.markdown())
            write_into(out, f"{page_name}.html", query_page.html(out))

    def limitations(self, report: Report, spec, steps: list[Recorded]) -> list[str]:
        """Per corpus: the queries each retrieval view's tables rest on, and the views whose documents lack a field
        (their runs search a smaller corpus than the others)."""
        counts: dict[str, dict[str, list[str]]] = {}
        smaller: dict[str, list[str]] = {}
        for g in view_groups(report, steps):
            run = g.main_runs[0]
            split = run.manifest["split"]
            counts.setdefault(g.corpus, {}).setdefault(f"{len(run_queries(run).judged(split))} {split or 'all'} "
                                                       "queries", []).append(g.label)
            missing, total = documents_without(g.corpus, run.manifest["corpus_hash"], g.view)
            if missing:
                smaller.setdefault(g.corpus, []).append(f"{g.label} has {total - missing:,} of the {total:,} documents")
        out = []
        for corpus, sizes in counts.items():
            out.append(f"The retrieval tables of {corpus} rest on " + "; ".join(
                f"{n} ({', '.join(labels)})" for n, labels in sizes.items()) + ": every CI and paired test is over these.")
            if corpus in smaller:
                out.append(f"Views whose fields some documents lack search a smaller corpus ({'; '.join(smaller[corpus])}"
                           "; see Coverage), so a difference between views mixes a change of text with a change of "
                           "corpus.")
        return out


def _row(step: Recorded, report: Report) -> dict:
    """A step's row: its target, its mean under the report's empty-query policy, the fusion its run used."""
    t = step.target
    return {"corpus": t.corpus, "model": t.model, "view": t.view_label,
            "method": " ".join([t.what, *t.setting_words]),
            PRIMARY: TASK.report_scores(step, report.runs)[PRIMARY],
            "fusion_mode": report.runs.stored(step.ref).manifest.get("fusion_mode")}


def _views_heatmap(report: Report, corpus: str, dense: pd.DataFrame, out: Path) -> None:
    import pandas as pd

    if dense["view"].nunique() < 2:
        report.p(f"Views per model ({corpus}): one view only, no heatmap.")
        return
    pivot = dense.pivot_table(index="model", columns="view", values=PRIMARY, sort=False)
    # the scale spans this corpus's scores: 0.07 and 0.11 must not share a colour
    lo, hi = float(pivot.min().min()), float(pivot.max().max())
    hi = hi if hi > lo else lo + 1e-6
    plt = plt_module()
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 0.5 * len(pivot) + 2))
    im = ax.imshow(pivot.values, cmap="viridis", aspect="auto", vmin=lo, vmax=hi)
    ax.set_xticks(range(len(pivot.columns)), pivot.columns)
    ax.set_yticks(range(len(pivot.index)), [system_title({"method": "dense", "model": m}) for m in pivot.index])
    for (i, j), v in pd.DataFrame(pivot.values).stack().items():  # viridis is light at the top
        ax.text(j, i, f"{v:.3f}", ha="center", va="center", color="k" if (v - lo) / (hi - lo) > 0.6 else "w")
    for i, j in zip(*np.nonzero(np.isnan(pivot.values))):  # a blank says why it is blank
        ax.text(j, i, "not run", ha="center", va="center", color="#555", style="italic", fontsize=FONT_PT)
    fig.colorbar(im, label=PRIMARY)
    ax.set_title(corpus)
    save_figure(fig, report, out, f"views-{corpus}.png",
                f"{corpus}: dense {PRIMARY} per model and view (colours from the lowest to the highest score)")


def _scaling_plot(report: Report, corpus: str, dense: pd.DataFrame, out: Path) -> None:
    base = dense[[not get_model(m).lineage for m in dense["model"]]]  # fine-tuned models share their base's size
    # a view with one model has no size to compare: no panel of a single dot
    views = [v for v in dict.fromkeys(base["view"]) if base[base["view"] == v]["model"].nunique() >= 2]
    if not views:
        report.p(f"Scaling ({corpus}): fewer than two base models in any view, no plot.")
        return
    base = base.assign(params_m=[get_model(m).params_m for m in base["model"]],
                       family=[get_model(m).family for m in base["model"]])
    plt = plt_module()
    cols = min(2, len(views))  # two panels a row: wider ones would shrink their labels on the page
    rows = -(-len(views) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(WIDTH_IN, 4 * rows), squeeze=False, sharey=True)
    for ax in axes.flat[len(views):]:
        ax.set_visible(False)
    for ax, view in zip(axes.flat, views):
        for family, g in base[base["view"] == view].groupby("family"):
            g = g.sort_values("params_m")
            ax.plot(g["params_m"], g[PRIMARY], marker="o", label=family)
        ax.set_xscale("log")
        ax.set_xlabel("parameters (millions)")
        ax.set_title(f"view {view}")
    for row in axes:
        row[0].set_ylabel(PRIMARY)
    axes.flat[len(views) - 1].legend()
    save_figure(fig, report, out, f"scaling-{corpus}.png", f"{corpus}: model size vs dense {PRIMARY}, one line per "
                                                          f"family, in the views with two base models or more")


def _in_out_plot(report: Report, g: ViewGroup, out: Path, name: str) -> None:
    """IN and OUT bars per system with 95% bootstrap CIs over the domain's queries (the CI compare_runs gives
    the whole query set, on the IN-only and the OUT-only pairs)."""
    runs = g.main_runs  # the comparison's runs: one query set
    series = []
    for dom in DOMAINS:
        scored = [domain_scores(r, dom, report.statistics) for r in runs]  # the comparison's CI, as the table's
        n = next((x[0] for x in scored if x), 0)
        series.append(Series(f"{dom} (n={n})", tuple(Bar(*x[1:]) if x else None for x in scored)))
    if not any(b for x in series for b in x.bars):  # no query with a pair in either domain
        return
    fig = grouped_bars([system_title(r.manifest) for r in runs], series, f"{PRIMARY} (95% bootstrap CI)",
                       blank="no queries in this domain")
    save_figure(fig, report, out, name, f"{g.corpus}, view {g.label}: IN vs OUT {PRIMARY} per system, "
                                        "95% bootstrap CI over the domain's queries")


TASK = RetrievalTask()
