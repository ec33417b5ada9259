"""The report's "Document vs passage" section: each passage run (dense-maxp over one passage setting) beside its
document-level counterpart (dense: one vector of the view, which the model cuts at its token limit), same model,
view and queries.

The difference of the primary metric is the view table's own paired test (the letters' family), so the section says
what the table's letters say; IN and OUT are tested as one family per corpus and domain (every document-passage
pair of the corpus). Beside it: how much of the view the model truncates (view_tokens, measured when the passages
were indexed) and, where `evalctl latency` timed both systems, what each costs to serve (serving_cost).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from evalctl.evaluators.retrieval import serving_cost
from evalctl.evaluators.retrieval.methods import METHODS
from evalctl.evaluators.scoring.metrics import PRIMARY, evaluate_run
from evalctl.indexers import view_tokens
from evalctl.study.tasks.retrieval.coverage import DOMAINS
from evalctl.study.page.names import model_title, relative, system_title
from evalctl.study.page.document import Report
from evalctl.study.tasks.retrieval.groups import ViewGroup, table_tests

if TYPE_CHECKING:
    from evalctl.study.page.findings import Delta

SECONDARY = ("ndcg@100", "recall@100")  # DAPFAM's metrics for its document-vs-passage comparison


@dataclass(frozen=True)
class PassagePair:
    group: ViewGroup
    document: object  # StoredRun
    passage: object  # StoredRun

    @property
    def corpus(self) -> str:
        return self.group.corpus


def passage_pairs(groups: list[ViewGroup]) -> list[PassagePair]:
    """Every passage run of a group's comparison with the document run of the same model, method family and fusion
    mode in it."""
    out = []
    for g in groups:
        runs = g.main_runs if g.comparison is not None else ()
        for r in runs:
            m = METHODS.get(r.manifest["method"]) if r.manifest["method"] in METHODS else None
            if not (m and m.passages):
                continue
            doc = next((d for d in runs if d.manifest["method"] == m.passages_of and all(
                d.manifest.get(k) == r.manifest.get(k) for k in ("model", "fusion_mode"))), None)
            if doc is not None:
                out.append(PassagePair(g, doc, r))
    return out


def _delta_cell(d: Delta | None) -> str:
    if d is None:
        return "-"
    return f"{d.value:+.4f} [{d.lo:+.4f}, {d.hi:+.4f}], p {d.tested.p:.3f}, Holm {d.tested.p_holm:.3f}"


def _lengths(t: view_tokens.ViewTokens | None) -> str:
    if t is None:
        return "not measured"
    return (f"{t.share:.0%} of {t.documents:,} over {t.limit} tokens (median {t.median:.0f}, p90 {t.p90:.0f}, "
            f"max {t.max:,})")


def _truncated(pair: PassagePair, run) -> str:
    """What the model cuts in `run`: the document vector's documents; nothing in a passage run, whose chunked queries
    say how many of them a whole encoding cuts."""
    if run is pair.document:
        vector = METHODS.get(run.manifest["method"]).vector
        return f"documents: {_lengths(view_tokens.of_run(pair.passage.manifest))}" if vector else "none"
    if "query_tokens" not in run.manifest:
        return "none"
    return f"none; queries (chunked here): {_lengths(view_tokens.ViewTokens(**run.manifest['query_tokens']))}"


def section(report: Report, groups: list[ViewGroup]) -> None:
    pairs = passage_pairs(groups)
    if not pairs:
        return
    import pandas as pd

    from evalctl.study.page.findings import FindingTests  # scipy (its bootstrap): only a report with passage runs pays
    report.h("Document vs passage")
    report.p("Each passage system (the view cut into windows of the model's tokens, one vector per passage, each "
             "patent scored by its best passage: MaxP) beside the same model's document vector of the view, which "
             "the model cuts at its token limit. Same queries, same depth; the difference is the view table's paired "
             f"test of {PRIMARY} (its letters' family); IN and OUT are each tested as one family of the corpus's pairs.")
    tests = FindingTests(report.statistics, table_tests(groups))
    for corpus in dict.fromkeys(p.corpus for p in pairs):
        mine = [p for p in pairs if p.corpus == corpus]
        domain = {}
        for dom in DOMAINS:
            scored = [tuple(evaluate_run(r, domain=dom, metrics=(PRIMARY,)).per_query[PRIMARY]
                            for r in (p.document, p.passage)) for p in mine]
            held = [i for i, (a, b) in enumerate(scored) if a and b]
            deltas = dict(zip(held, tests.family([scored[i] for i in held],
                                                 f"the document-passage pairs of {corpus} on {dom} queries")))
            domain[dom] = [(deltas.get(i), *ab) for i, ab in enumerate(scored)]
        rows, costs = [], []
        for i, p in enumerate(mine):
            doc, psg = (evaluate_run(r).mean for r in (p.document, p.passage))
            per = [evaluate_run(r).per_query[PRIMARY] for r in (p.document, p.passage)]
            d = tests.table((p.document.id, p.passage.id), PRIMARY, *per)
            row = {"model": model_title(p.passage.manifest.get("model")), "view": p.group.label,
                   "passages": p.passage.manifest["passages"] + (", queries chunked" if p.passage.manifest.get(
                       "query_chunks") else ""), "document": system_title(p.document.manifest),
                   f"document {PRIMARY}": round(doc[PRIMARY], 4), f"passage {PRIMARY}": round(psg[PRIMARY], 4),
                   "change": relative(psg[PRIMARY], doc[PRIMARY]), "difference (95% CI), test": _delta_cell(d)}
            for dom in DOMAINS:
                dd, a, b = domain[dom][i]
                row[f"{dom} change"] = (f"{relative(_mean(b), _mean(a))}, Holm p {dd.tested.p_holm:.3f}"
                                        if dd else "no queries")
            for m in SECONDARY:
                row[m] = f"{doc[m]:.4f} → {psg[m]:.4f}"
            rows.append(row)
            for r in (p.document, p.passage):
                costs.append({"system": system_title(r.manifest), "view": p.group.label,
                              "truncated by the model": _truncated(p, r),
                              **serving_cost.cost_cells(serving_cost.latest_cost(corpus, r.id))})
        report.p(f"Corpus {corpus}: {PRIMARY} of the document and the passage system ({SECONDARY[0]} and "
                 f"{SECONDARY[1]} after the arrow, document → passage):")
        report.table(pd.DataFrame(rows))
        report.p(f"Corpus {corpus}: what each layout truncates and costs (the documents longer than the model takes, "
                 "in its tokens after its prompt; with chunked queries, the queries a whole encoding would cut; BM25 "
                 f"reads the whole text; {serving_cost.RULES}). An index that holds several views or passage settings "
                 "counts all their text in each system's size: bench/passage_layouts.py loads each layout into an "
                 "index of its own:")
        report.table(pd.DataFrame(costs).drop_duplicates())


def _mean(values: dict[str, float]) -> float:
    return sum(values.values()) / len(values) if values else float("nan")
