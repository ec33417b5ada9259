"""Training pairs for the fine-tuning recipes, with a leakage guard and matched-size subsampling.

Generators (platform/finetune/recipes.py SourceSpec): `citations` (train-side citation edges of a qrels set),
`codes` (patents sharing a fine classification code, hard negatives sharing only a coarse one) and
`sections` (two views of the same patent). Every run:

1. builds the held-out set of each corpus that has the qrels set: its dev/test queries and every record
   of their families, plus each (query, relevant) pair; `--guard` corpora add theirs;
2. generates pairs from records outside the held-out set;
3. checks every pair again against every held-out set (`check_leakage`) and fails on any hit, so a
   generator bug can never leak evaluation pairs silently;
4. subsamples to the requested size with a seeded RNG, by source weight (`allocate`).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

from evalctl.errors import BadInput
from evalctl.corpus.store import Corpus, load_corpus
from evalctl.corpus.patent_record import PatentRecord
from evalctl.corpus.qrels import QrelsSet, list_qrels, load_qrels
from evalctl.config_files import SpecError
from evalctl.corpus.views import ViewSpec, load_views
from evalctl.finetune.recipes import RecipeSpec, SourceSpec


class PairError(BadInput, ValueError):
    """Pairs cannot be made as asked (no data for a recipe, too few for --match-size); says why."""


class LeakageError(BadInput, RuntimeError):
    """A training pair touches a held-out (dev/test) query, its family or its relevant documents."""


@dataclass(frozen=True)
class Pair:
    source: str
    corpus: str
    anchor: str
    positive: str
    negative: str | None
    # (record id, family) of anchor, positive and (when present) negative: what the leakage check reads
    members: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class HeldOut:
    """What must never reach training from one qrels set: dev/test queries, their families, their pairs."""

    corpus: str
    qrels: str | None
    ids: frozenset[str] = frozenset()
    families: frozenset[str] = frozenset()
    relevant: frozenset[tuple[str, str]] = frozenset()  # (held-out query, relevant doc)
    queries: int = 0

    def touches(self, record_id: str, family: str) -> bool:
        return record_id in self.ids or family in self.families


def held_out(corpus: Corpus, qrels_name: str, families: dict[str, str]) -> HeldOut:
    """The dev/test side of `qrels_name` on `corpus` (empty when the corpus has no such set)."""
    if qrels_name not in list_qrels(corpus):
        return HeldOut(corpus.name, None)
    qs = load_qrels(corpus, qrels_name)
    queries = [q for q in qs.queries if q.split != "train"]
    ids = {i for q in queries for i in (q.id, *q.exclude)}
    fams = {families[i] for i in ids if i in families}
    relevant = {(p.query_id, p.doc_id) for p in qs.pairs if p.split != "train"}
    return HeldOut(corpus.name, qrels_name, frozenset(ids), frozenset(fams), frozenset(relevant), len(queries))


def check_leakage(pairs: Iterable[Pair], guards: Iterable[HeldOut]) -> int:
    """Raise LeakageError naming the offending pairs; returns how many pairs were checked."""
    guards = list(guards)
    bad: list[str] = []
    n = 0
    for p in pairs:
        n += 1
        ids = [m[0] for m in p.members]
        for g in guards:
            hit = [i for i, fam in p.members if g.touches(i, fam)]
            linked = [(a, b) for a in ids for b in ids if (a, b) in g.relevant]
            if hit or linked:
                what = f"held-out record(s) {hit}" if hit else f"held-out qrels pair(s) {linked}"
                bad.append(f"{p.source} pair {ids} from corpus {p.corpus} touches {what} of "
                           f"{g.corpus}/{g.qrels}")
    if bad:
        raise LeakageError(f"{len(bad)} training pair(s) leak evaluation data; first: " + "; ".join(bad[:5]))
    return n


# --------------------------------------------------------------------------- generators


@dataclass
class SourceReport:
    """Counts for one source: generated per corpus, used after subsampling, and why rows were skipped."""

    source: str
    generator: str
    generated: dict[str, int] = field(default_factory=dict)  # corpus -> pairs
    used: int = 0
    notes: list[str] = field(default_factory=list)
    stats: Counter = field(default_factory=Counter)

    @property
    def total(self) -> int:
        return sum(self.generated.values())


def _text(record: PatentRecord, views: list[ViewSpec]) -> str | None:
    for v in views:
        text = v.render(record)
        if text and text.strip():
            return text
    return None


def _citation_pairs(src: SourceSpec, corpus: Corpus, qrels: QrelsSet | None, records: dict[str, PatentRecord],
                    views: list[ViewSpec], rep: SourceReport) -> list[Pair]:
    if qrels is None:
        rep.notes.append(f"{corpus.name}: no qrels set (build one with `evalctl corpus qrels --train-fraction 0.5`)")
        return []
    if not qrels.manifest.get("spec", {}).get("train_fraction"):
        rep.notes.append(f"{corpus.name}: qrels {qrels.name} was built with --train-fraction 0: no train-side "
                         "citations (rebuild it with --train-fraction > 0)")
        return []
    out = []
    for a, b, _types in qrels.train_pairs():
        if a not in records or b not in records:  # excluded as held out
            rep.stats["skipped_held_out"] += 1
            continue
        ta, tb = _text(records[a], views), _text(records[b], views)
        if ta is None or tb is None:
            rep.stats["skipped_no_text"] += 1
            continue
        out.append(Pair(src.name, corpus.name, ta, tb, None, ((a, records[a].family), (b, records[b].family))))
    return out


def _codes(record: PatentRecord, scheme: str, level: str) -> set[str]:
    return {c for c in (x.level(level) for x in (record.cpc if scheme == "cpc" else record.ipc)) if c}


@dataclass(frozen=True)
class _Candidates:
    """A corpus's records as one code-pairs pass sees them: the same for every negative it draws."""

    records: dict[str, PatentRecord]
    fine: dict[str, set[str]]  # id -> its fine codes (records with text)
    ids: list[str]  # the records with text, in corpus order (the seeded choices depend on it)


def _code_pairs(src: SourceSpec, corpus: Corpus, records: dict[str, PatentRecord], views: list[ViewSpec],
                rng: random.Random, rep: SourceReport) -> list[Pair]:
    texts = {i: t for i, r in records.items() if (t := _text(r, views)) is not None}
    fine = {i: _codes(records[i], src.scheme, src.fine) for i in texts}
    # Insertion-ordered sets (dicts) in corpus order, so the seeded choices below are reproducible.
    by_fine: dict[str, dict[str, None]] = defaultdict(dict)
    by_coarse: dict[str, dict[str, None]] = defaultdict(dict)
    for i in texts:
        for f in sorted(fine[i]):
            by_fine[f][i] = None
            by_coarse[f[:_prefix_len(src.coarse)]][i] = None
    ids = list(texts)
    pool = _Candidates(records, fine, ids)
    seen: set[frozenset[str]] = set()
    out = []
    for a in ids:
        fam = records[a].family
        for f in sorted(fine[a]):
            partners = [b for b in by_fine[f] if records[b].family != fam]
            for b in rng.sample(partners, min(src.partners_per_record, len(partners))):
                if frozenset((a, b)) in seen:
                    continue
                seen.add(frozenset((a, b)))
                members = ((a, fam), (b, records[b].family))
                neg = None
                if src.hard_negatives:
                    neg = _negative(a, list(by_coarse[f[:_prefix_len(src.coarse)]]), pool, rng, rep)
                    if neg is None:
                        rep.stats["dropped_no_negative"] += 1
                        continue
                    members += ((neg, records[neg].family),)
                out.append(Pair(src.name, corpus.name, texts[a], texts[b], texts[neg] if neg else None, members))
    return out


def _prefix_len(level: str) -> int:
    return {"section": 1, "class": 3, "subclass": 4}[level]


def _negative(a: str, coarse_members: list[str], pool: _Candidates, rng: random.Random,
              rep: SourceReport) -> str | None:
    """A record sharing the coarse code but no fine code with `a`; else any record sharing no fine code."""
    records, fine, ids = pool.records, pool.fine, pool.ids
    fam = records[a].family

    def ok(b: str) -> bool:
        return records[b].family != fam and not (fine[b] & fine[a])

    hard = [b for b in coarse_members if ok(b)]
    if hard:
        rep.stats["hard_negatives"] += 1
        return rng.choice(hard)
    easy = [b for b in ids if ok(b)]
    if easy:
        rep.stats["random_negatives"] += 1
        return rng.choice(easy)
    return None


def _section_pairs(src: SourceSpec, corpus: Corpus, records: dict[str, PatentRecord],
                   all_views: dict[str, ViewSpec], rep: SourceReport) -> list[Pair]:
    out = []
    for i, r in records.items():
        for va, vb in src.view_pairs:
            ta, tb = all_views[va].render(r), all_views[vb].render(r)
            if not ta or not tb or ta == tb:
                rep.stats[f"skipped_{va}_{vb}"] += 1
                continue
            out.append(Pair(src.name, corpus.name, ta, tb, None, ((i, r.family), (i, r.family))))
    return out


# --------------------------------------------------------------------------- sizing


def allocate(available: dict[str, int], weights: dict[str, float], total: int) -> dict[str, int]:
    """Pairs per source for a mix of `total`: by weight; a source short of its share gives all it has
    and the shortfall is shared among the others by weight. Raises PairError when total > all there is."""
    if total > sum(available.values()):
        raise PairError(f"{total} pairs asked but only {sum(available.values())} available "
                        f"({', '.join(f'{k}: {v}' for k, v in available.items())})")
    take = {k: 0 for k in available}
    open_ = {k for k, v in available.items() if v > 0}
    left = total
    while left > 0:
        w = sum(weights[k] for k in open_)
        # Largest-remainder rounding of the weighted shares, so the parts sum to `left` exactly.
        shares = {k: left * weights[k] / w for k in open_}
        share = {k: int(s) for k, s in shares.items()}
        for k in sorted(open_, key=lambda k: (share[k] - shares[k], k))[: left - sum(share.values())]:
            share[k] += 1
        for k in sorted(open_):
            got = min(share[k], available[k] - take[k])
            take[k] += got
            left -= got
        open_ = {k for k in open_ if take[k] < available[k]}
    return take


@dataclass
class PairSet:
    recipe: str
    seed: int
    size: int | None  # requested total (match size or the recipe's size), None = all
    pairs: dict[str, list[Pair]]  # source -> pairs used for training
    reports: list[SourceReport]
    guards: list[HeldOut]
    checked: int = 0

    def counts(self) -> dict[str, int]:
        return {k: len(v) for k, v in self.pairs.items()}

    def digest(self) -> str:
        h = hashlib.sha256()
        for name in sorted(self.pairs):
            for p in self.pairs[name]:
                h.update(json.dumps(asdict(p), sort_keys=True).encode())
        return "sha256:" + h.hexdigest()

    def summary(self) -> dict:
        return {
            "recipe": self.recipe, "seed": self.seed, "size": self.size, "used": self.counts(),
            "generated": {r.source: r.generated for r in self.reports},
            "stats": {r.source: dict(r.stats) for r in self.reports if r.stats},
            "notes": {r.source: r.notes for r in self.reports if r.notes},
            "leakage_check": {"pairs_checked": self.checked, "violations": 0, "held_out": [
                {"corpus": g.corpus, "qrels": g.qrels, "queries": g.queries, "records": len(g.ids),
                 "relevant_pairs": len(g.relevant)} for g in self.guards]},
            "digest": self.digest(),
        }


def build_pairs(recipe: RecipeSpec, corpora: Iterable[Corpus | str], *, match_size: int | None = None,
                seed: int = 13, qrels_name: str = "citations", guard: Iterable[Corpus | str] = ()) -> PairSet:
    """The recipe's pairs over `corpora`, leakage-checked and subsampled to `match_size` (or recipe.size)."""
    corpora = [c if isinstance(c, Corpus) else load_corpus(c) for c in corpora]
    views = load_views()
    for s in recipe.sources:
        unknown = [v for v in (*s.views, *(v for p in s.view_pairs for v in p)) if v not in views]
        if unknown:
            raise SpecError(f"recipe {recipe.id}, source {s.name}: unknown view(s) {unknown}; known: {', '.join(views)}")
    reports = {s.name: SourceReport(s.name, s.generator) for s in recipe.sources}
    generated: dict[str, list[Pair]] = {s.name: [] for s in recipe.sources}
    records = {c.name: {r.id: r for r in c.records()} for c in corpora}
    guards = [held_out(c, qrels_name, {i: r.family for i, r in records[c.name].items()}) for c in corpora]
    for g in guard:  # evaluation corpora not trained on ("corpus" or "corpus:qrels"): their held-out side stays out
        name, _, qname = g.partition(":") if isinstance(g, str) else (g, "", "")
        c = name if isinstance(name, Corpus) else load_corpus(name)
        guards.append(held_out(c, qname or qrels_name, {r.id: r.family for r in c.records()}))
    for corpus in corpora:
        # A record is usable only when no held-out set (of any corpus) touches it by id or family.
        usable = {i: r for i, r in records[corpus.name].items() if not any(g.touches(i, r.family) for g in guards)}
        qrels = load_qrels(corpus, qrels_name) if qrels_name in list_qrels(corpus) else None
        for s in recipe.sources:
            rep = reports[s.name]
            if s.generator == "citations":
                got = _citation_pairs(s, corpus, qrels, usable, [views[v] for v in s.views], rep)
            elif s.generator == "codes":
                rng = random.Random(f"{seed}:{s.name}:{corpus.name}")
                got = _code_pairs(s, corpus, usable, [views[v] for v in s.views], rng, rep)
            else:
                got = _section_pairs(s, corpus, usable, views, rep)
            rep.generated[corpus.name] = len(got)
            generated[s.name] += got
    # The proof: every generated pair against every held-out set, before anything is sampled or trained.
    checked = check_leakage((p for ps in generated.values() for p in ps), guards)
    names = ", ".join(c.name for c in corpora)
    empty = [s for s, ps in generated.items() if not ps]
    if len(empty) == len(generated):
        notes = "; ".join([n for r in reports.values() for n in r.notes]
                          + [f"{r.source}: {dict(r.stats)}" for r in reports.values() if r.stats])
        raise PairError(f"recipe {recipe.id} made no pairs from {names}" + (f": {notes}" if notes else ""))
    size = match_size or recipe.size
    if size is None:
        used = generated
    else:
        available = {k: len(v) for k, v in generated.items()}
        try:
            take = allocate(available, {s.name: s.weight for s in recipe.sources}, size)
        except PairError as e:
            raise PairError(f"recipe {recipe.id} on {names}: {e}; lower --match-size") from None
        used = {k: random.Random(f"{seed}:sample:{k}").sample(v, take[k]) for k, v in generated.items()}
    for k, v in used.items():
        reports[k].used = len(v)
    return PairSet(recipe.id, seed, size, {k: v for k, v in used.items() if v}, list(reports.values()), guards, checked)
