"""Hybrid search pipelines (neural-search plugin): bodies, versioned names, creation, plugin detection.

A pipeline's name carries a hash of its body (`evalctl-hybrid-<hash>`), so changing a weight or a
technique makes a new pipeline instead of silently redefining one an earlier run used; the run's
manifest stores the body itself.
"""

from __future__ import annotations

import hashlib
import json

from evalctl.errors import Failure
from evalctl.evaluators.fusion.settings import FusionSpec
from evalctl.opensearch.cluster_info import installed_plugins

NEURAL_SEARCH = "opensearch-neural-search"


class NeuralSearchMissing(Failure, RuntimeError):
    """Hybrid/RRF asked of a node without the neural-search plugin."""


def pipeline_body(spec: FusionSpec) -> dict:
    if spec.technique == "rrf":
        processor = {"score-ranker-processor": {"combination": {
            "technique": "rrf", "rank_constant": spec.rank_constant, "parameters": {"weights": spec.weights}}}}
    else:
        processor = {"normalization-processor": {
            "normalization": {"technique": spec.normalization},
            "combination": {"technique": spec.combination, "parameters": {"weights": spec.weights}}}}
    return {"description": "evalctl hybrid fusion [bm25, dense]", "phase_results_processors": [processor]}


def pipeline_name(body: dict) -> str:
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:12]
    return f"evalctl-hybrid-{digest}"


def has_neural_search(client) -> bool:
    return NEURAL_SEARCH in installed_plugins(client)


def require_neural_search(client, what: str) -> None:
    if not has_neural_search(client):
        raise NeuralSearchMissing(
            f"{what} needs the {NEURAL_SEARCH} plugin, which this node lacks (Maven Central does not publish "
            f"it; use docker-compose or `evalctl opensearch start --plugin-zip PATH|URL[#sha256=HEX]`). Client-side "
            f"fusion of the BM25 and dense runs works on any node: add `--fusion client`."
        )


def ensure_pipeline(client, body: dict) -> tuple[str, dict]:
    """Create the pipeline `body` unless a pipeline of that (hash-derived) name exists."""
    from opensearchpy.exceptions import NotFoundError  # here: spec validation imports this module, not the client

    name = pipeline_name(body)
    try:
        client.search_pipeline.get(id=name)
    except NotFoundError:
        client.search_pipeline.put(id=name, body=body)
    return name, body
