"""The names a report shows a reader for systems, models, methods and views, built here and nowhere else: "BM25",
"Dense · all-MiniLM-L6-v2 + R3", "Hybrid (client fusion) · all-MiniLM-L6-v2", and the numbers beside them
("66.0 [64.8, 67.2]", "+12% (+0.0141)"). They are for reading only: run
labels and ids (runs.run_label, runs.system_name) stay the identities that tables cite and files are named by."""

from __future__ import annotations

from collections.abc import Iterable

from evalctl.config_files import SpecError
from evalctl.corpus.views import load_views
from evalctl.evaluators.retrieval.methods import METHODS
from evalctl.models import get_model

_FUSION = {"client": "client fusion", "native": "native pipeline"}


def model_title(model_id: str) -> str:
    """The model's published name (its Hub name without the owner) with the precision its spec pins ("all-MiniLM-L6-v2
    (int8)": a variant beside its float32 twin), a fine-tuned one as "<base> + <recipe>"; the id itself for a model
    no spec names any more (a stored run outlives its spec)."""
    try:
        spec = get_model(model_id)
    except SpecError:
        return model_id
    if spec.lineage:
        return f"{model_title(spec.lineage['base_model'])} + {spec.lineage['recipe']['id']}"
    name = spec.hf_id.rsplit("/", 1)[-1] or model_id
    return f"{name} ({spec.precision})" if spec.precision else name


def method_title(method: str, fusion_mode: str | None = None) -> str:
    """"Exact kNN"; a fused method with how it fused: "Hybrid (client fusion)"."""
    m = METHODS.get(method) if method in METHODS else None
    title = m.display if m else method
    return f"{title} ({_FUSION[fusion_mode]})" if m and m.fused and fusion_mode in _FUSION else title


def system_title(manifest: dict) -> str:
    """A run's system as a reader sees it, the same in every view: method (with its passage setting), then model
    (none for a text-only method, whose run only reads the text of a model's index)."""
    method = METHODS.get(manifest["method"]) if manifest["method"] in METHODS else None
    title = method_title(manifest["method"], manifest.get("fusion_mode"))
    title += f" {manifest['passages']}" if manifest.get("passages") else ""
    title += " (chunked queries)" if manifest.get("query_chunks") else ""
    model = manifest.get("model")
    return f"{title} · {model_title(model)}" if model and (method is None or method.vector) else title


def method_legend(methods: Iterable[str]) -> str:
    """"BM25: lexical match ...; Dense: ..." for the methods a table shows, in their order."""
    return "; ".join(f"{METHODS.get(m).display}: {METHODS.get(m).about}" for m in dict.fromkeys(methods)
                     if m in METHODS and METHODS.get(m).about)


def view_legend(views: Iterable[str]) -> str:
    """"T = title only; TA = title + abstract ..." from configs/views.yaml, for the views a table shows (query and
    document views alike), each view explained once."""
    known = load_views()
    names = dict.fromkeys(views)
    return "; ".join(f"{v} = {known[v].description or ' + '.join(known[v].fields)}" if v in known else v
                     for v in names)


def score_text(value: float, percent: bool) -> str:
    """A mean as every table of the report prints it: a share in percent with one decimal ("66.0", F1 and
    V-measure), any other score with four (nDCG@10 "0.0747")."""
    return f"{100 * value:.1f}" if percent else f"{value:.4f}"


def score_with_ci(value: float, lo: float, hi: float, percent: bool) -> str:
    """"66.0 [64.8, 67.2]" or "0.0747 [0.061, 0.088]" (a retrieval table's cell without its letters)."""
    if percent:
        return f"{100 * value:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]"
    from evalctl.evaluators.scoring.compare import score_cell  # pandas, scipy

    return score_cell(value, [], lo, hi)


def relative(value: float, base: float, percent: bool = False) -> str:
    """A change as a reader weighs it: "+12% (+0.0141)", relative first (the absolute alone from a base of 0); one
    decimal under 10% ("+0.8%"), so a small change never reads as "+0%". A score shown in percent changes by
    points: "+0.6% (+0.4 pt)"."""
    delta = value - base
    absolute = f"{100 * delta:+.1f} pt" if percent else f"{delta:+.4f}"
    if base <= 0:
        return absolute
    share = delta / base
    return f"{share:+.{0 if abs(share) >= 0.1 else 1}%} ({absolute})"
