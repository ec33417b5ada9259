"""The report's Methods, generated from what ran: every number in it comes from the stored runs' manifests (and,
for client-side fusion, its component runs'), never from the spec's prose. Per system: the search (BM25 k1/b,
HNSW m/ef, exact or ANN), the fusion actually used (a native neural-search pipeline or client-side ranx fusion)
with its weights (the dense weight chosen on dev, with its grid) or RRF k, the query and document views, the
model's revision and prompts, and a reproduce command (as Pyserini's 2CR pages give): the `evalctl retrieve`
command line that makes that run, found again without searching when it is stored."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import MISSING, dataclass

from evalctl.corpus.qrels import qrels_manifest
from evalctl.corpus.store import load_corpus
from evalctl.corpus.views import load_views
from evalctl.evaluators.retrieval.methods import EXACT, METHODS
from evalctl.evaluators.retrieval.fusion_sweep import SWEEP_SETS
from evalctl.evaluators.retrieval.params import RetrievalParams
from evalctl.evaluators.scoring.runs import TIE_RULE, StoredRun, view_pair
from evalctl.parameters import parameters
from evalctl.study.page.names import system_title
from evalctl.study.spec.experiment import ExperimentSpec
from evalctl.study.page.document import Report
from evalctl.study.tasks.retrieval.groups import ViewGroup
from evalctl.study.spec.step_ids import Target

NONE = "-"


@dataclass(frozen=True)
class RunMethod:
    """How one stored run searched, in words a methods table shows."""

    run_id: str
    title: str  # display_names.system_title: the system as every table names it, the same in each view
    views: str  # "T", or "T→TA": query view → document view
    search: str  # "BM25 (k1 1.2, b 0.75)", "ANN: HNSW (m 16, ...)", "exact kNN", or both for fusion
    fusion: str  # "-", "native: neural-search pipeline ..." or "client-side: ranx fusion ...", with its settings
    model: str  # hf id @ revision, or "-"
    precision: str  # of the documents' vectors, as the index's manifest records it (queries are encoded alike)
    prompts: str  # document and query prompts
    command: str  # the `evalctl retrieve` line that makes this run
    client_fusion: bool
    native_fusion: bool


def run_method(run: StoredRun, load: Callable[[str], StoredRun]) -> RunMethod:
    """The methods row of `run`; `load` reads a component run by id (client fusion's BM25 and dense runs)."""
    m = run.manifest
    d = METHODS.get(m["method"])
    client = d.fused and m.get("fusion_mode") == "client"
    parts = [load(i).manifest for i in m.get("components", ())]
    index = m.get("index_manifest") or {}
    dense = next((p for p in parts if p["method"] != "bm25"), m)  # where the query prompt was recorded
    text = next((p for p in parts if p["method"] == "bm25"), m)  # where the BM25 query cut was recorded
    return RunMethod(
        run_id=run.id, title=system_title(m), views=view_pair(m.get("query_view"), m["view"]),
        search=_search(m["method"], index, text.get("bm25_max_terms")),
        fusion=_fusion(m, text.get("bm25_max_terms"), dense.get("prompt_variant")) if d.fused else NONE,
        model=f"{index['hf_id']} @ {index.get('revision') or 'unpinned'}" if d.vector and index.get("hf_id") else NONE,
        precision=index.get("precision", "float32") if d.vector and index.get("hf_id") else NONE,
        prompts=_prompts(index.get("document_prompt"), dense.get("query_prompt")) if d.vector else NONE,
        command=reproduce_command(m, text.get("bm25_max_terms"), dense.get("prompt_variant")),
        client_fusion=client, native_fusion=d.fused and not client)


def _search(method: str, index: dict, max_terms: int | None) -> str:
    d = METHODS.get(method)
    out = []
    if d.text:
        bm25 = index.get("bm25") or {}
        cut = f", queries cut to {max_terms} terms" if max_terms else ""
        out.append(f"BM25 (k1 {bm25.get('k1')}, b {bm25.get('b')}{cut})")
    if d.vector:
        if method == EXACT:
            out.append(f"exact kNN (brute force over every document, {index.get('similarity')})")
        else:
            h = index.get("hnsw") or {}
            out.append(f"ANN: HNSW (m {h.get('m')}, ef_construction {h.get('ef_construction')}, ef_search "
                       f"{h.get('ef_search')}; {index.get('engine')}, {index.get('encoder')}, "
                       f"{index.get('similarity')})")
    return " + ".join(out)


def _fusion(m: dict, bm25_max_terms: int | None, prompt_variant: str | None) -> str:
    f = m["fusion"]
    parts = " and ".join(METHODS.get(p).display for p in METHODS.get(m["method"]).client)
    where = (f"client-side: ranx fusion of the stored {parts} runs" if m.get("fusion_mode") == "client"
             else "native: neural-search pipeline on the node")
    if f["technique"] == "rrf":
        return f"{where}; RRF, k {f['rank_constant']}"
    how = f"{where}; {f['normalization']} normalisation, {f['combination']}, dense weight {f['dense_weight']}"
    tuned = m.get("tuned_on")
    if not tuned:
        return f"{how} (as given)"
    grid = ", ".join(f"{w}: {s:.4f}" for w, s in tuned["grid"].items())
    return (f"{how}, chosen on the {tuned['split']} queries by {tuned['metric']} (grid {grid}: "
            f"{sweep_command(m, bm25_max_terms, prompt_variant)})")


def _prompts(document: str | None, query: str | None) -> str:
    return f"document {document!r}, query {query!r}" if document or query else "none"


def reproduce_command(m: dict, bm25_max_terms: int | None, prompt_variant: str | None) -> str:
    """`evalctl retrieve` with every option whose value differs from its default, from a run manifest: the
    command makes the run with that identity (or finds it stored). `bm25_max_terms` and `prompt_variant` come
    from the run, or from its component runs for client-side fusion."""
    return _command("retrieve", _values(m, bm25_max_terms, prompt_variant))


def sweep_command(m: dict, bm25_max_terms: int | None, prompt_variant: str | None) -> str:
    """`evalctl fusion-sweep` that tunes the dense weight of a run made by a sweep (its manifest's `tuned_on`) over
    the same grid on the dev queries, and makes the run again with the chosen weight."""
    tuned = m["tuned_on"]
    values = {k: v for k, v in _values(m, bm25_max_terms, prompt_variant).items() if k not in SWEEP_SETS}
    return _command("fusion-sweep", values) + " " + shlex.join(
        ["--weights", ",".join(tuned["grid"]), "--mode", tuned["mode"]])


def _values(m: dict, bm25_max_terms: int | None, prompt_variant: str | None) -> dict:
    """RetrievalParams' values of the run `m` describes."""
    fusion = m.get("fusion") or {}
    return {"corpus": m["corpus"], "view": m["view"], "method": m["method"], "model": m.get("model"),
            "query_view": m.get("query_view") if m.get("query_view") != m["view"] else None,
            "qrels": m["qrels"], "split": m["split"] or "all", "k": m["k"],
            "bm25_max_terms": (bm25_max_terms or 0) if METHODS.get(m["method"]).text else None,
            "prompt_variant": prompt_variant, "fusion_mode": m.get("fusion_mode"),
            **{k: fusion.get(k) for k in ("normalization", "combination", "dense_weight", "rank_constant")},
            "query_sample": (m.get("query_sample") or {}).get("n")}


def _command(name: str, values: dict) -> str:
    """`evalctl NAME --corpus ...` with each RetrievalParams option in `values` that differs from its default."""
    args = ["evalctl", name, "--corpus", values["corpus"]]
    for p in parameters(RetrievalParams):
        v = values.get(p.name)
        if p.option is not None and v is not None and (p.default is MISSING or v != p.default):
            args += [p.flag, str(v)]
    return shlex.join(args)


def methods_section(report: Report, spec: ExperimentSpec, groups: list[ViewGroup], asked: dict[Target, str]) -> None:
    """Per corpus: the data (documents, corpus version, qrels and split sizes), the queries of each view, how the
    fused systems ran, and a table of every system with its reproduce command. `asked`: each step target's
    `fusion_mode` in the spec entry that plans it."""
    import pandas as pd

    report.p("Methods, as the stored runs record them (the spec's own description is at the end of the report). "
             f"Every ranking orders documents of equal score by one rule, {TIE_RULE}, in every run, export and "
             "referee (the Ties table sets tie-aware scores beside the ordinary ones).")
    for corpus in dict.fromkeys(g.corpus for g in groups):
        mine = [g for g in groups if g.corpus == corpus]
        rows = [(run_method(r, report.runs.stored), asked.get(s.target, "native"))
                for g in mine for s, r in zip(g.steps, g.runs)]
        report.p(" ".join([_data(spec, mine), _queries(mine), fusion_used(rows)]).strip())
        report.table(pd.DataFrame([{"system": r.title, "views (query→document)": r.views, "search": r.search,
                                    "fusion": r.fusion, "model @ revision": r.model, "precision": r.precision,
                                    "prompts": r.prompts,
                                    "run": r.run_id, "reproduce": r.command} for r, _ in rows]))


def _data(spec: ExperimentSpec, groups: list[ViewGroup]) -> str:
    """The corpus version and size, and each qrels set its tables use: how it was built, its split sizes, the split
    reported and what each ranking excludes (as the runs recorded it)."""
    first = groups[0].runs[0].manifest
    corpus = load_corpus(first["corpus"])
    out = [f"Corpus {corpus.name}: {len(corpus):,} {spec.corpus(corpus.name).documents}-level documents, version "
           f"{first['corpus_hash']}."]
    for name in dict.fromkeys(g.runs[0].manifest["qrels"] for g in groups):
        runs = [r.manifest for g in groups for r in g.runs if r.manifest["qrels"] == name]
        built, sizes = runs[0].get("qrels_spec") or {}, qrels_manifest(corpus, name).get("queries", {})
        how = ", ".join(f"{k} {built[k]}" for k in ("source", "direction", "level") if built.get(k))
        splits = ", ".join(f"{n} {s}" for s, n in sorted(sizes.items(), key=lambda x: -x[1]))
        excluded = next((m["exclusion"] for m in runs if m.get("exclusion")), None)
        out.append(f"Qrels {name} ({how}): {splits} queries; its tables report the "
                   f"{' and '.join(dict.fromkeys(m['split'] or 'all' for m in runs))} queries"
                   + (f"; excluded from each ranking: {excluded}." if excluded else "."))
    return " ".join(out)


def _queries(groups: list[ViewGroup]) -> str:
    views = load_views()
    pairs = dict.fromkeys((g.query_view, g.view) for g in groups)
    said = "; ".join(f"{view_pair(q, d)}: the query patent's {views[q].description or q}, searched in the "
                     f"documents' {views[d].description or d}" for q, d in pairs)
    return f"Each table's queries are the query patent's own text in that table's query view ({said})."


def fusion_used(rows: list[tuple[RunMethod, str]]) -> str:
    """How the fused systems ran, and why, from (row, the `fusion_mode` its spec entry asks): client-side fusion
    under `auto` means the node had no neural-search plugin when it ran; native means it had."""
    def names(test) -> str:
        return ", ".join(dict.fromkeys(r.title for r, mode in rows if test(r, mode)))

    out = []
    if native := names(lambda r, mode: r.native_fusion):
        out.append(f"{native} ran natively: one hybrid query through a neural-search search pipeline on the node "
                   "(the neural-search plugin was present).")
    how = ("client-side fusion: ranx fuses the stored runs of its parts (BM25 and dense, or BM25 and dense MaxP) of the "
           "same depth, no search pipeline")
    if fallen := names(lambda r, mode: r.client_fusion and mode == "auto"):
        out.append(f"{fallen} ran as {how}, because the node had no neural-search plugin (`fusion_mode: auto` "
                   "falls back to it).")
    if chosen := names(lambda r, mode: r.client_fusion and mode != "auto"):
        out.append(f"{chosen} ran as {how}, as the spec asks (`fusion_mode: client`).")
    return " ".join(out)
