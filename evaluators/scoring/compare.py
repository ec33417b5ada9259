"""Comparison tables: per-system means with bootstrap 95% CIs, paired significance tests with
Holm-Bonferroni correction, and breakdowns by IN/OUT domain and by query jurisdiction.

Scores are ranx's (`ranx.evaluate`, scoring.py); the tests are the study's protocol (significance_params.
StatsProtocol: a paired randomisation test with 10,000 seeded sign flips, or exact for few queries, by default),
Holm-corrected over its family: by default all system pairs of the table for one metric (`family: table`: pairs
x metrics). A marker letter on a score means: better than the system with that letter, Holm-adjusted p < alpha;
the paired-tests table gives each pair's raw and adjusted p. The report's findings read the same pairs
(significance.PairTest), so a letter and a finding never disagree. `ranx_report` hands the result to ranx's own
`Report` (its LaTeX table and, from its cells, a Markdown one, with those letters) beside evalctl's pandas
tables. (ranx.compare itself would run each pair's test twice, once per order, with its randomisation
workers unseeded.)

Domain breakdown (as MTEB's DAPFAM tasks): the run is scored against the IN-only and the OUT-only
pairs, dropping queries with no positive left; the relative IN->OUT drop is (IN - OUT) / IN.

Runs that searched different query sets of one qrels split (a seeded sample beside full runs) are compared on
the queries every one of them searched, and the table says so: a paired test needs each system's score on the
same queries, and a query's score does not depend on which other queries a run searched, so the common queries
give a sound comparison where refusing would leave a sample (an ANN-fidelity check) never comparable. Runs of
different corpora, qrels or splits are refused, as are runs with no query in common.
"""

from __future__ import annotations

import io
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from tabulate import tabulate

from evalctl.errors import BadInput
from evalctl.evaluators.scoring import ranx_engine
from evalctl.evaluators.scoring.runs import StoredRun
from evalctl.evaluators.scoring.metrics import METRICS, PRIMARY, evaluate_run
from evalctl.evaluators.scoring.run_queries import run_queries
from evalctl.evaluators.scoring.significance import PairTest, bootstrap_ci, family_tests
from evalctl.evaluators.scoring.significance_params import TEST_NAMES, StatsProtocol, describe_protocol
from evalctl.corpus.qrels import QrelsSet

DOMAINS = ("IN", "OUT", "UNKNOWN")
_SUPERSCRIPT = str.maketrans("abcdefghijklmnoprstuvwxyz", "ᵃᵇᶜᵈᵉᶠᵍʰⁱʲᵏˡᵐⁿᵒᵖʳˢᵗᵘᵛʷˣʸᶻ")
# Run manifest keys that must agree for runs to be compared query by query (on the queries they all searched).
SAME = ("corpus", "corpus_hash", "qrels", "split")


class NotComparable(BadInput, ValueError):
    pass


@dataclass(frozen=True)
class Pair:
    control: str
    treatment: str
    metric: str
    delta: float  # treatment - control
    tested: PairTest  # the protocol's test: raw and Holm-adjusted p, the family's size
    wins: int
    ties: int
    losses: int  # treatment vs control, per query


@dataclass(frozen=True)
class ComparisonReport:
    systems: tuple[str, ...]  # letter-prefixed labels, e.g. "a bm25:bm25:TAC": the keys of the fields below
    letters: tuple[str, ...]  # each system's letter (a, b, ...), as the tables mark it
    labels: tuple[str, ...]  # each system's run label
    run_ids: tuple[str, ...]
    metrics: tuple[str, ...]
    n_queries: int  # the queries every run searched, which all numbers are over
    searched: tuple[int, ...]  # the judged queries each run searched (n_queries each, when they agree)
    means: dict[str, dict[str, float]]
    ci: dict[str, dict[str, tuple[float, float]]]
    pairs: tuple[Pair, ...]
    protocol: StatsProtocol
    domains: dict[str, dict[str, tuple[int, float]]]  # system -> domain -> (n queries, primary metric)
    domain_partition: dict[str, int]  # query classes by the domains of their pairs; sums to n_queries
    jurisdictions: dict[str, dict[str, tuple[int, float]]]  # system -> jurisdiction -> (n, primary)

    def better_than(self, system: str, metric: str) -> list[str]:
        """The letters of the systems `system` beats on `metric`: its marker letters."""
        letter = dict(zip(self.systems, self.letters))
        return sorted(letter[s] for s in beaten(self.pairs, system, metric, self.protocol.alpha))


def beaten(pairs: tuple[Pair, ...] | list[Pair], system: str, metric: str, alpha: float) -> list[str]:
    """The systems `system` is significantly better than on `metric` (Holm-adjusted p < alpha)."""
    out = []
    for p in pairs:
        if p.metric == metric and p.tested.significant(alpha) and system in (p.control, p.treatment):
            winner, loser = (p.treatment, p.control) if p.delta > 0 else (p.control, p.treatment)
            if winner == system:
                out.append(loser)
    return out


def domain_partition(qset: QrelsSet, split: str | None, queries=None) -> dict[tuple[str, ...], set[str]]:
    """Each query (of `queries`, when given) under the domains of its pairs, in DOMAINS' order (("IN",),
    ("IN", "OUT"), ("UNKNOWN",) ...): a partition."""
    seen: dict[str, set[str]] = defaultdict(set)
    for p in qset.pairs:
        if (split is None or p.split == split) and (queries is None or p.query_id in queries):
            seen[p.query_id].add(p.domain)
    classes: dict[str, set[str]] = defaultdict(set)
    for q, doms in seen.items():
        classes[tuple(d for d in DOMAINS if d in doms)].add(q)
    return dict(classes)


def run_ci(values, protocol: StatsProtocol = StatsProtocol()) -> tuple[float, float]:
    """A 95% bootstrap CI of per-query values exactly as compare_runs computes one under `protocol`."""
    return bootstrap_ci(values, protocol.n_bootstrap, protocol.seed)


def compare_runs(runs: list[StoredRun], baseline: StoredRun | None = None, metrics: tuple[str, ...] = METRICS,
                 protocol: StatsProtocol = StatsProtocol()) -> ComparisonReport:
    if baseline is not None and all(r.id != baseline.id for r in runs):
        runs = [baseline, *runs]
    if len(runs) < 2:
        raise NotComparable("compare needs at least two runs")
    ref = runs[0].manifest
    for r in runs[1:]:
        diff = [k for k in SAME if r.manifest.get(k) != ref.get(k)]
        if diff:
            raise NotComparable(f"run {r.id} differs from {runs[0].id} in {', '.join(diff)}: "
                                "compare runs of the same corpus, qrels and split")
    if len({r.id for r in runs}) != len(runs):
        raise NotComparable("the same run is given twice")
    bases = [run_queries(r) for r in runs]
    qset = bases[0].qset
    split = ref["split"]
    judged = [set(b.judged(split)) for b in bases]
    queries = sorted(set.intersection(*judged))
    if not queries:
        raise NotComparable("the runs searched no judged query in common: " + ", ".join(
            f"{r.id} {len(j)} queries" for r, j in zip(runs, judged)))
    letters, labels = tuple(chr(ord("a") + i) for i in range(len(runs))), tuple(r.label for r in runs)
    systems = tuple(f"{x} {label}" for x, label in zip(letters, labels))
    scores = {s: evaluate_run(r, metrics=metrics, within=queries, basis=b) for s, r, b in zip(systems, runs, bases)}
    values = {s: {m: np.array([scores[s].per_query[m][q] for q in queries]) for m in metrics} for s in systems}

    base = systems[0] if baseline is not None else None
    keys = [(a, b, m) for i, a in enumerate(systems) for b in systems[i + 1:] for m in metrics
            if base is None or a == base]
    pairs = pair_tests(values, keys, protocol)

    domains = {}
    for s, r, b in zip(systems, runs, bases):
        row = {"ALL": (len(queries), scores[s].mean[PRIMARY])}
        for dom in DOMAINS:
            sc = evaluate_run(r, domain=dom, metrics=(PRIMARY,), within=queries, basis=b)
            row[dom] = (sc.n_queries, sc.mean[PRIMARY])
        domains[s] = row
    jur_of = {q.id: q.jurisdiction or "unknown" for q in qset.queries}
    jurisdictions = {}
    for s in systems:
        groups: dict[str, list[float]] = defaultdict(list)
        for q in queries:
            groups[jur_of.get(q, "unknown")].append(scores[s].per_query[PRIMARY][q])
        jurisdictions[s] = {j: (len(v), float(np.mean(v))) for j, v in sorted(groups.items())}

    return ComparisonReport(
        systems=systems, letters=letters, labels=labels, run_ids=tuple(r.id for r in runs), metrics=tuple(metrics), n_queries=len(queries),
        searched=tuple(map(len, judged)),
        means={s: scores[s].mean for s in systems},
        ci={s: {m: run_ci(values[s][m], protocol) for m in metrics} for s in systems},
        pairs=tuple(pairs), protocol=protocol, domains=domains,
        domain_partition={"+".join(k): len(v) for k, v in domain_partition(qset, split, set(queries)).items()},
        jurisdictions=jurisdictions,
    )


def pair_tests(values: dict[str, dict[str, np.ndarray]], keys: list[tuple[str, str, str]],
               protocol: StatsProtocol) -> list[Pair]:
    """The protocol's test of each (control, treatment, metric) of `keys` on per-query `values[system][metric]`
    (one query order), Holm-corrected within the protocol's families."""
    diffs = {key: values[key[1]][key[2]] - values[key[0]][key[2]] for key in keys}
    tested = {}
    for family in _families(keys, protocol):
        tested.update(zip(family, family_tests([diffs[k] for k in family], protocol)))
    return [Pair(a, b, m, float(d.mean()), tested[a, b, m], int((d > 0).sum()), int((d == 0).sum()),
                 int((d < 0).sum())) for (a, b, m), d in diffs.items()]


def _families(keys: list[tuple[str, str, str]], protocol: StatsProtocol) -> list[list[tuple[str, str, str]]]:
    """The comparisons Holm corrects over together: one family per metric, or the whole table."""
    if protocol.family == "table":
        return [keys]
    by_metric: dict[str, list] = defaultdict(list)
    for key in keys:
        by_metric[key[2]].append(key)
    return list(by_metric.values())


# --------------------------------------------------------------------------- tables


def score_cell(value: float, letters: list[str], lo: float, hi: float, fmt: str = "md") -> str:
    """A table's score: mean, the letters of the systems it beats, its 95% CI."""
    return f"{_marked(value, letters, fmt)} [{lo:.3f}, {hi:.3f}]"


def _marked(value: float, letters: list[str], fmt: str) -> str:
    if not letters:
        return f"{value:.4f}"
    if fmt == "latex":
        return f"{value:.4f}$^{{{''.join(letters)}}}$"
    return f"{value:.4f}{''.join(letters).translate(_SUPERSCRIPT)}"


def tables(rep: ComparisonReport, fmt: str = "md", names: Sequence[str] | None = None,
           letters: Sequence[str] | None = None, costs: Sequence[dict] | None = None) -> dict[str, pd.DataFrame]:
    """The report as DataFrames: main (means, CIs, markers), significance, domains, jurisdictions, and cost when
    `costs` gives each system's cost columns (`evalctl compare --cost`). `names`: the systems as a reader knows
    them (default: their run labels); `letters`: theirs in a wider page (a report's, one per system across views;
    default: the comparison's a, b, ...)."""
    mark = dict(zip(rep.letters, letters or rep.letters))
    shown = {s: f"{mark[x]} {n}" for s, x, n in zip(rep.systems, rep.letters, names or rep.labels)}
    main = []
    for s, run_id in zip(rep.systems, rep.run_ids):
        row = {"system": shown[s], "run": run_id, "n": rep.n_queries}
        for m in rep.metrics:
            lo, hi = rep.ci[s][m]
            if fmt == "csv":
                row.update({m: rep.means[s][m], f"{m} ci_low": lo, f"{m} ci_high": hi,
                            f"{m} better_than": "".join(sorted(mark[x] for x in rep.better_than(s, m)))})
            else:
                row[m] = score_cell(rep.means[s][m], sorted(mark[x] for x in rep.better_than(s, m)), lo, hi, fmt)
        main.append(row)
    sig = [{"control": shown[p.control], "treatment": shown[p.treatment], "metric": p.metric, "delta": round(p.delta, 4),
            "p": round(p.tested.p, 4), "p Holm": round(p.tested.p_holm, 4), "family": p.tested.family,
            "W/T/L": f"{p.wins}/{p.ties}/{p.losses}"} for p in rep.pairs]
    dom = []
    for s, row in rep.domains.items():
        (n_in, v_in), (n_out, v_out) = row["IN"], row["OUT"]
        drop = (v_in - v_out) / v_in if n_in and n_out and v_in > 0 else float("nan")
        dom.append({"system": shown[s], **{f"{d} {PRIMARY} (n)": f"{v:.4f} ({n})" if n else "- (0)" for d, (n, v) in row.items()},
                    "IN->OUT drop": f"{drop:.1%}" if drop == drop else "-"})
    jur = [{"system": shown[s], **{f"{j} (n={n})": round(v, 4) for j, (n, v) in row.items()}}
           for s, row in rep.jurisdictions.items()]
    out = {"main": pd.DataFrame(main), "significance": pd.DataFrame(sig), "domains": pd.DataFrame(dom),
           "jurisdictions": pd.DataFrame(jur)}
    if costs is not None:
        out["cost"] = pd.DataFrame([{"system": shown[s], **c} for s, c in zip(rep.systems, costs)])
    return out


_TITLES = {"main": "Systems", "significance": "Paired tests", "domains": "By IN/OUT domain",
           "jurisdictions": "By query jurisdiction", "cost": "Serving cost"}


def common_queries_note(rep: ComparisonReport) -> str:
    """What a table over the runs' common queries must say ("" when every run searched the same ones)."""
    if len(set(rep.searched)) == 1:
        return ""
    each = ", ".join(f"{x} {n}" for x, n in zip(rep.letters, rep.searched))
    return (f"The runs searched different query sets ({each} judged queries): every number is over the "
            f"{rep.n_queries} queries all of them searched. ")


def significance_note(rep: ComparisonReport) -> str:
    """What a letter means in this table, briefly: the test, alpha, the family and its size."""
    sizes = "/".join(map(str, sorted({p.tested.family for p in rep.pairs})))
    family = "system pairs of one metric" if rep.protocol.family == "metric" else "system pairs x metrics"
    return f"{TEST_NAMES[rep.protocol.test]}, Holm-adjusted p < {rep.protocol.alpha} over the {sizes} {family}"


def render(rep: ComparisonReport, fmt: str = "md", costs: Sequence[dict] | None = None, cost_note: str = "") -> str:
    """The comparison as Markdown, CSV, or a LaTeX document that compiles as it is (pdflatex); with `costs` (each
    system's cost columns, in the report's order) a serving-cost table, which `cost_note` explains."""
    dfs = tables(rep, fmt, costs=costs)
    note = (f"{common_queries_note(rep)}{rep.n_queries} queries; mean [bootstrap 95% CI]; superscript letters: "
            f"better than that system, {significance_note(rep)}. {describe_protocol(rep.protocol)} "
            f"Query classes by pair domains: " + ", ".join(f"{k}={v}" for k, v in sorted(rep.domain_partition.items()))
            + (f". Serving cost: {cost_note}." if costs is not None else ""))
    if fmt == "csv":
        out = io.StringIO()
        for name, df in dfs.items():
            out.write(f"# {name}\n")
            df.to_csv(out, index=False)
        return out.getvalue()
    if fmt == "latex":
        return _latex_document(dfs, note, set(rep.metrics))
    parts = [f"### {_TITLES[name]}\n\n{tabulate(df, headers='keys', tablefmt='github', showindex=False)}"
             for name, df in dfs.items()]
    return note + "\n\n" + "\n\n".join(parts) + "\n"


def _latex_document(dfs: dict[str, pd.DataFrame], note: str, marked: set[str]) -> str:
    """Each table a captioned, labelled float (tab:comparison-<name>); text escaped except the main table's score
    cells (`marked` columns), whose letters are already LaTeX. Wide tables are scaled to the text width."""
    floats = []
    for name, df in dfs.items():
        if df.empty:
            continue
        df = df.copy()
        for col in df.columns:
            if not (name == "main" and col in marked):
                df[col] = [_latex_text(v) if isinstance(v, str) else v for v in df[col]]
        df.columns = [_latex_text(str(c)) for c in df.columns]
        body = tabulate(df, headers="keys", tablefmt="latex_raw", showindex=False)
        caption = _TITLES[name] + (f". {note}" if name == "main" else "")
        floats.append(f"\\begin{{table}}[ht]\n\\centering\n\\caption{{{_latex_text(caption)}}}\n"
                      f"\\label{{tab:comparison-{name}}}\n\\resizebox{{\\textwidth}}{{!}}{{%\n{body}}}\n"
                      "\\end{table}")
    return ("\\documentclass{article}\n\\usepackage{graphicx}\n\\begin{document}\n" + "\n\n".join(floats)
            + "\n\\end{document}\n")


# --------------------------------------------------------------------------- ranx's Report


def ranx_report(rep: ComparisonReport, labels: Sequence[str] | None = None):
    """ranx's `Report` of the comparison: ranx's means, and its letters set by the Holm-adjusted p of
    the protocol's test (< alpha), so they are evalctl's letters. win/tie/loss is filled for the tested pairs.
    `labels`: the systems' names (default: their run labels); ranx prints its own letter column."""
    ranx_engine.load()
    from ranx.data_structures import FrozensetDict, Report  # ranx: imported after load()

    labels = list(labels or rep.labels)
    names = [f"{x} ({run})" if labels.count(x) > 1 else x for x, run in zip(labels, rep.run_ids)]
    name = dict(zip(rep.systems, names))
    untested = {"p_value": float("nan"), "significant": False}
    comparisons = FrozensetDict({frozenset((a, b)): {m: untested for m in rep.metrics}
                                 for i, a in enumerate(names) for b in names[i + 1:]})
    win_tie_loss: dict[tuple[str, str], dict] = defaultdict(dict)
    for p in rep.pairs:
        a, b = name[p.control], name[p.treatment]
        comparisons[a, b][p.metric] = {"p_value": p.tested.p, "p_holm": p.tested.p_holm,
                                       "significant": p.tested.significant(rep.protocol.alpha)}
        win_tie_loss[a, b][p.metric] = {"W": p.losses, "T": p.ties, "L": p.wins}  # ranx: control's view
        win_tie_loss[b, a][p.metric] = {"W": p.wins, "T": p.ties, "L": p.losses}
    return Report(model_names=names, results={name[s]: dict(rep.means[s]) for s in rep.systems},
                  comparisons=comparisons, metrics=list(rep.metrics), max_p=rep.protocol.alpha,
                  win_tie_loss=dict(win_tie_loss), rounding_digits=4, stat_test=rep.protocol.test)


def ranx_latex(rep: ComparisonReport, label: str = "tab:ranx", labels: Sequence[str] | None = None) -> str:
    """ranx's LaTeX table (Report.to_latex) as a document that compiles as it is (pdflatex): ranx's preamble
    notes become the preamble, its one `tab:results` label becomes `label` (unique per file of a report), its
    caption one naming the test, correction and family (significance_note), and its bold (the highest mean, however
    close the next) goes: the superscripts say which differences the test supports."""
    table = ranx_report(rep, [_latex_text(x) for x in (labels or rep.labels)]).to_latex()
    table = table[table.index("% To change"):]  # after ranx's "% Add in preamble" block
    table = re.sub(r"\\caption\{.*?\n\}", lambda _: "\\caption{" + _latex_text(
        f"{common_queries_note(rep)}Mean over {rep.n_queries} queries. A superscript letter: significantly better "
        f"than that system of this table, lettered in row order ({significance_note(rep)}).") + "}",
                   table, count=1, flags=re.S)
    table = re.sub(r"\\textbf\{([\d.]+)\}", r"\1", table.replace("\\label{tab:results}", f"\\label{{{label}}}"))
    return ("\\documentclass{article}\n\\usepackage{graphicx}\n\\usepackage{booktabs}\n\\begin{document}\n"
            f"{table}\n\\end{{document}}\n")


def _latex_text(text: str) -> str:
    """Text as LaTeX sets it: its special characters escaped, the arrows and dots of names as math (ranx itself
    escapes "_" in its table's cells)."""
    special = {"&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}",
               "^": r"\textasciicircum{}", "\\": r"\textbackslash{}", "→": r"$\rightarrow$", "·": r"$\cdot$",
               "<": "$<$", ">": "$>$"}
    return "".join(special.get(c, c) for c in text)


def ranx_markdown(rep: ComparisonReport) -> str:
    """ranx's table (Report.to_table: its score format, metric labels and superscripts) as Markdown."""
    r = ranx_report(rep)
    rows = [[chr(ord("a") + i), m, *(r.format_score(r.results[m][k]) + r.get_superscript_for_table(m, k)
                                     for k in r.metrics)] for i, m in enumerate(r.model_names)]
    return tabulate(rows, headers=["#", "Model", *map(r.get_metric_label, r.metrics)], tablefmt="github",
                    disable_numparse=True) + "\n"
