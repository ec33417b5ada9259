"""`evalctl run SPEC`: plan every step of an experiment spec, skip what is done, run the rest.

A step is done when its output exists with a matching manifest (corpus hash and source hashes,
qrels spec, index identity and counts, results-store identity). A failed step is reported and the
run goes on with the steps that do not depend on it; expected scores are checked at the end.
"""

from __future__ import annotations

import hashlib
import json
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from evalctl.experiments import ExperimentSpec


@dataclass
class Step:
    key: str  # unique, readable: "index espacenet-pizza all-minilm-l6-v2 [T]"
    kind: str
    run: Callable[[], str]  # returns a one-line summary
    is_done: Callable[[], bool]
    deps: tuple[str, ...] = ()


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


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return f"sha256:{h.hexdigest()}"  # the corpus manifest's spelling


# --------------------------------------------------------------------------- steps


def import_step(spec: ExperimentSpec, entry) -> Step:
    from evalctl.corpus_import import import_corpus
    from evalctl.corpus_store import CorpusNotFound, load_corpus

    sources = [spec.resolve_source(s) for s in entry.sources]

    def is_done() -> bool:
        try:
            m = load_corpus(entry.name).manifest
        except CorpusNotFound:
            return False
        return (m["source"]["format"] == entry.format and list(m.get("labels", [])) == list(entry.labels)
                and [f["sha256"] for f in m["source"]["files"]] == [_sha256(p) for p in sources])

    def run() -> str:
        res = import_corpus(entry.format, sources, name=entry.name, labels=entry.labels, overwrite=True)
        problems = ", ".join(f"{k} {v}" for k, v in res.problem_counts.items()) or "no problems"
        return f"{len(res.corpus)} records ({problems})"

    return Step(f"import {entry.name}", "import", run, is_done)


def qrels_step(spec: ExperimentSpec, entry) -> Step:
    from evalctl.corpus_store import load_corpus
    from evalctl.qrels import build_citation_qrels, load_qrels

    def is_done() -> bool:
        try:
            q = load_qrels(entry.name, entry.qrels.name)
        except FileNotFoundError:
            return False
        corpus = load_corpus(entry.name)
        return q.manifest.get("corpus_hash") == corpus.content_hash and q.manifest.get("spec") == json.loads(
            json.dumps(asdict(entry.qrels)))

    def run() -> str:
        q = build_citation_qrels(load_corpus(entry.name), entry.qrels, overwrite=True)
        return f"{len(q.queries)} queries, {len(q.pairs)} pairs"

    return Step(f"qrels {entry.name} {entry.qrels.name}", "qrels", run, is_done, deps=(f"import {entry.name}",))


def index_step(corpus_name: str, model_id: str | None, variant: str | None, views: tuple[str, ...]) -> Step:
    from evalctl.connection import make_client
    from evalctl.corpus_store import load_corpus
    from evalctl.indexers.index_layout import index_name
    from evalctl.indexers.index_loader import loaded_ids, read_manifest
    from evalctl.models import get_model
    from evalctl.views import load_views

    def resolve():
        corpus = load_corpus(corpus_name)
        model = get_model(model_id) if model_id else None
        return corpus, model, index_name(corpus.name, model_id)

    def is_done() -> bool:
        corpus, model, name = resolve()
        client = make_client()
        meta = read_manifest(client, name)
        if not meta or meta.get("corpus_hash") != corpus.content_hash or not set(views) <= set(meta["views"]):
            return False
        if model and (meta.get("revision") != model.revision
                      or meta.get("prompt_variant") != (variant or model.default_variant)):
            return False
        return len(loaded_ids(client, name, meta["views"])) == len(corpus)

    def run() -> str:
        from evalctl.indexers.index_loader import index_corpus

        corpus, model, _ = resolve()
        all_views = load_views()
        rep = index_corpus(make_client(), corpus, [all_views[v] for v in views], model, variant=variant)
        if rep.failed:
            raise RuntimeError(f"{len(rep.failed)} documents rejected, e.g. {rep.failed[0]}")
        return f"{rep.index}: {rep.n_loaded} loaded, {rep.n_already} already there ({rep.docs_per_s:.0f} docs/s)"

    label = model_id or "bm25"
    return Step(f"index {corpus_name} {label} [{','.join(views)}]", "index", run, is_done,
                deps=(f"import {corpus_name}",))


# --------------------------------------------------------------------------- plan and run


def plan(spec: ExperimentSpec) -> list[Step]:
    steps: list[Step] = []
    for c in spec.corpora:
        steps.append(import_step(spec, c))
        if c.qrels is not None:
            steps.append(qrels_step(spec, c))
    # One index per corpus x model, holding every view any task of the spec asks for.
    wanted: dict[tuple[str, str | None], set[str]] = {}
    for entry in (*spec.indexes, *spec.retrieval, *spec.classification, *spec.clustering):
        for m in spec.models or ():
            wanted.setdefault((entry.corpus, m.id), set()).update(entry.views)
        if not spec.models:
            wanted.setdefault((entry.corpus, None), set()).update(entry.views)
    variants = {m.id: m.prompt_variant for m in spec.models}
    for (corpus, model_id), views in wanted.items():
        steps.append(index_step(corpus, model_id, variants.get(model_id), tuple(sorted(views))))
    return steps


def execute(steps: list[Step], echo=print, dry_run: bool = False) -> RunReport:
    report = RunReport()
    failed: set[str] = set()
    for i, step in enumerate(steps, 1):
        prefix = f"[{i}/{len(steps)}] {step.key}"
        blocked = [d for d in step.deps if d in failed]
        if blocked:
            failed.add(step.key)
            report.outcomes.append(Outcome(step.key, "skipped", f"needs {', '.join(blocked)}"))
            echo(f"{prefix}: skipped (needs {', '.join(blocked)})")
            continue
        try:
            done = step.is_done()
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
            report.outcomes.append(Outcome(step.key, "ok", detail, time.perf_counter() - t0))
            echo(f"{prefix}: ok ({time.perf_counter() - t0:.1f}s) {detail}")
        except Exception as e:  # report and go on: later independent steps still run
            failed.add(step.key)
            detail = f"{e.__class__.__name__}: {e}"
            report.outcomes.append(Outcome(step.key, "failed", detail + "\n" + traceback.format_exc(limit=3),
                                           time.perf_counter() - t0))
            echo(f"{prefix}: FAILED {detail}")
    return report
