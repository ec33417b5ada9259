"""What the retrieval numbers cover, per corpus and views: queries without text in the query view (searched with
no body, so no hit) and how the declared policy counts them (experiment.CoverageSpec, applied where the report
loads its runs, RunCache.stored, so every table, finding and chart counts them alike), documents
without the document view (no query can find them in it), and the IN/OUT split as DAPFAM defines it, with the
queries that count in both and each domain's mean with its 95% CI."""

from __future__ import annotations

import functools

import numpy as np

from evalctl.corpus.store import load_corpus
from evalctl.corpus.views import load_views, view_coverage
from evalctl.evaluators.scoring.metrics import PRIMARY, evaluate_run
from evalctl.evaluators.scoring.run_queries import run_queries
from evalctl.evaluators.scoring.runs import StoredRun
from evalctl.evaluators.scoring.significance_params import StatsProtocol
from evalctl.study.page.names import system_title
from evalctl.study.spec.experiment import CoverageSpec
from evalctl.study.page.document import Report
from evalctl.study.tasks.retrieval.groups import ViewGroup

DOMAINS = ("IN", "OUT")
POLICY = {"keep": "kept in every mean, test, finding and chart with a score of 0 (the spec's `coverage: "
                  "{empty_queries: keep}`, the default), so each table's n counts them",
          "exclude": "left out of every mean, test, finding and chart (the spec's `coverage: {empty_queries: "
                     "exclude}`), so each table's n counts the queries with text only"}


def domain_scores(run: StoredRun, domain: str, protocol: StatsProtocol) -> tuple[int, float, float, float] | None:
    """(n queries, mean PRIMARY, 95% CI low, high) of `run` on the queries with a pair of `domain`, scored on that
    domain's pairs only, with the CI compare_runs gives under `protocol`; None when no query has one."""
    from evalctl.evaluators.scoring.compare import run_ci  # pandas, scipy

    values = list(evaluate_run(run, domain=domain, metrics=(PRIMARY,)).per_query[PRIMARY].values())
    return (len(values), float(np.mean(values)), *run_ci(values, protocol)) if values else None


@functools.lru_cache(maxsize=16)  # one read per corpus version and view, however many tables ask
def documents_without(corpus: str, content_hash: str, view: str) -> tuple[int, int]:
    """(documents that do not render `view`, all documents) of that version of the corpus."""
    spec = load_views()[view]
    c = load_corpus(corpus)
    return len(c) - view_coverage(c.records(columns=spec.columns), {view: spec})[view].rendered, len(c)


def domain_classes(run: StoredRun) -> dict[str, int]:
    """Queries with an IN citation, with an OUT one, with an UNKNOWN one and with both IN and OUT, of those the
    run is scored on (the policy applied)."""
    from evalctl.evaluators.scoring.compare import domain_partition  # pandas, scipy

    basis = run_queries(run)
    split = run.manifest["split"]
    classes = domain_partition(basis.qset, split, set(basis.judged(split)))
    sizes = [(set(domains), len(qs)) for domains, qs in classes.items()]
    return {**{dom: sum(n for d, n in sizes if dom in d) for dom in ("IN", "OUT", "UNKNOWN")},
            "both": sum(n for d, n in sizes if {"IN", "OUT"} <= d)}


def coverage_section(report: Report, policy: CoverageSpec, groups: list[ViewGroup]) -> None:
    """The coverage table of every view group, the policy in words, the IN/OUT definition and each domain's
    mean with its CI per system."""
    import pandas as pd

    from evalctl.evaluators.scoring.compare import score_cell  # pandas, scipy

    rows, domain_rows, overlap = [], [], []
    for g in groups:
        run = g.main_runs[0]
        basis, m = run_queries(run), run.manifest
        judged = basis.judged(m["split"])
        no_text = len(basis.no_text & set(basis.qset.qrels(split=m["split"])))
        asked = len(judged) + (no_text if run.empty_queries == "exclude" else 0)
        missing_docs, n_docs = documents_without(g.corpus, m["corpus_hash"], g.view)
        row = {"corpus": g.corpus, "views": g.label, "queries": asked,
               "no text in the query view": f"{no_text} ({no_text / asked:.1%})" if no_text else "0",
               "scored (n)": len(judged), "documents without the document view": f"{missing_docs:,} of {n_docs:,}"}
        if not g.known_item:
            classes = domain_classes(run)
            either = classes["IN"] + classes["OUT"] - classes["both"]
            row |= {"IN queries": classes["IN"], "OUT queries": classes["OUT"], "IN and OUT": classes["both"],
                    "UNKNOWN queries": classes["UNKNOWN"], "neither IN nor OUT": len(judged) - either}
            overlap.append((g.label, len(judged), classes))
            for r in g.main_runs:
                cells = {d: domain_scores(r, d, report.statistics) for d in DOMAINS}
                domain_rows.append({"corpus": g.corpus, "views": g.label, "system": system_title(r.manifest), **{
                    f"{d} {PRIMARY} [95% CI] (n)": f"{score_cell(c[1], [], c[2], c[3])} ({c[0]})" if c else "- (0)"
                    for d, c in cells.items()}})
        rows.append(row)
    if not rows:
        return
    report.p(f"Coverage. Queries without text in their query view are searched with no query (no hit) and are "
             f"{POLICY[policy.empty_queries]}. Documents without the document view have no text or vector in "
             "it, so no query can find them there: views that need a field some documents lack search a smaller "
             "corpus, which a comparison across views must bear in mind.")
    report.table(pd.DataFrame(rows))
    if overlap:
        spec = groups[0].runs[0].manifest.get("qrels_spec") or {}
        scheme = f"{str(spec.get('domain_scheme', 'ipc')).upper()} class at {spec.get('domain_chars', 3)} characters"
        counts: dict[str, list[str]] = {}  # one sentence for the views that count alike
        for label, n, c in overlap:
            counts.setdefault(f"{c['IN']} IN + {c['OUT']} OUT + {c['UNKNOWN']} UNKNOWN = "
                              f"{c['IN'] + c['OUT'] + c['UNKNOWN']} for {n} queries, {c['both']} of them in both IN "
                              "and OUT", []).append(label)
        both = "; ".join(f"{', '.join(labels)}: {text}" for text, labels in counts.items())
        report.p(f"IN and OUT of domain, as DAPFAM defines them: a citation is IN when the query patent and the "
                 f"cited patent share an {scheme}, OUT when they share none (UNKNOWN when either has no code). A "
                 "query counts in IN when it has an IN citation and is then scored on its IN citations only; "
                 "likewise for OUT and UNKNOWN. A query with citations of several kinds counts in each, so the "
                 f"counts add up to more than the queries ({both}); a query whose citations are all UNKNOWN is in "
                 f"neither IN nor OUT. Each domain's {PRIMARY} with its 95% bootstrap CI over that domain's queries:")
        report.table(pd.DataFrame(domain_rows))
