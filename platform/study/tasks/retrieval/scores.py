"""Each system's primary score in each view group, as the headline's opening, its tables and the main-result chart
show it: the view's comparison (compare_runs: mean, CI, which systems it beats under the report's test), or the
run's own mean and CI for a system alone in its view or one that searched a sample of the queries. One
computation, so the paragraph, the table and the chart cannot disagree."""

from __future__ import annotations

from dataclasses import dataclass

from evalctl.evaluators.scoring.metrics import PRIMARY, evaluate_run
from evalctl.evaluators.scoring.significance_params import StatsProtocol
from evalctl.study.page.names import system_title
from evalctl.study.tasks.retrieval.groups import ViewGroup


@dataclass(frozen=True)
class Score:
    system: str  # runs.system_name: the identity across views
    title: str  # display_names.system_title: what a reader sees
    method: str
    model: str | None
    mean: float
    lo: float  # 95% bootstrap CI
    hi: float
    n: int  # queries the mean is over
    beats: tuple[str, ...]  # systems (names) it is significantly better than, under the comparison's test
    compared: bool  # in the view's comparison (False: alone in its view, or it searched a sample)


def view_scores(g: ViewGroup, protocol: StatsProtocol) -> dict[str, Score]:
    """System name -> its Score in this view group, in the group's run order; a CI of a run alone under the
    study's `protocol`, as its comparison's are."""
    from evalctl.evaluators.scoring.compare import run_ci  # pandas, scipy

    def score(run, mean, ci: tuple[float, float], n, beats=(), compared=False) -> Score:
        m, (lo, hi) = run.manifest, ci
        return Score(run.system_name, system_title(m), m["method"], m.get("model"), mean, lo, hi, n, beats, compared)

    def alone(run, compared: bool) -> Score:  # its own mean and CI, as compare_runs would compute them
        scores = evaluate_run(run, metrics=(PRIMARY,))
        values = list(scores.per_query[PRIMARY].values())
        return score(run, scores.mean[PRIMARY], run_ci(values, protocol), len(values), compared=compared)

    rep = g.comparison
    out = {}
    for i, run in enumerate(g.runs):
        if rep is None or i not in g.main:
            out[run.system_name] = alone(run, compared=rep is None and i in g.main)
    if rep is not None:
        name_of = {s: r.system_name for s, r in zip(rep.systems, g.main_runs)}
        letter_to = {x: name_of[s] for s, x in zip(rep.systems, rep.letters)}
        for s, run in zip(rep.systems, g.main_runs):
            beats = tuple(letter_to[x] for x in rep.better_than(s, PRIMARY))
            out[run.system_name] = score(run, rep.means[s][PRIMARY], rep.ci[s][PRIMARY], rep.n_queries, beats, True)
    return {r.system_name: out[r.system_name] for r in g.runs}


def corpus_letters(groups: list[ViewGroup]) -> dict[tuple[str, str], str]:
    """(corpus, system name) -> its letter, one per system across the corpus's views (a, b, ... in the order
    they first appear), so a letter names the same system in the headline, the tables and the per-query pages."""
    out: dict[tuple[str, str], str] = {}
    for g in groups:
        for r in g.runs:
            n = sum(c == g.corpus for c, _ in out)
            out.setdefault((g.corpus, r.system_name), chr(ord("a") + n))
    return out
