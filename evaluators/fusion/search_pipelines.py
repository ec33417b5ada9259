"""Hybrid search pipelines (neural-search plugin): bodies, versioned names, creation, plugin detection.

A pipeline's name carries a hash of its body (`evalctl-hybrid-<hash>`), so changing a weight or a
technique makes a new pipeline instead of silently redefining one an earlier run used; the run's
manifest stores the body itself.
"""

from __future__ import annotations

import hashlib
import json
import sys

from evalctl.errors import Failure
from evalctl.evaluators.fusion.settings import FusionSpec
from evalctl.opensearch.cluster_info import installed_plugins

NEURAL_SEARCH = "opensearch-neural-search"
# Audit events (sys.audit) for the test suite's conftest: REQUIRED by every requirement of the plugin that the node
# meets, so a test that needs it is known on a node that has it, not only when it fails on one that lacks it (an
# unmet one raises NeuralSearchMissing); ASKED by the check that code adapting to the node (native fusion where
# the plugin is, client fusion elsewhere) makes first.
REQUIRED_EVENT = "evalctl.neural_search.required"
ASKED_EVENT = "evalctl.neural_search.asked"


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
    sys.audit(ASKED_EVENT, "")
    return NEURAL_SEARCH in installed_plugins(client)


def require_neural_search(client, what: str) -> None:
    if NEURAL_SEARCH not in installed_plugins(client):
        raise NeuralSearchMissing(
            f"{what} needs the {NEURAL_SEARCH} plugin, which this node lacks (Maven Central does not publish "
            f"it; use docker-compose or `evalctl opensearch start --plugin-zip PATH|URL[#sha256=HEX]`). Client-side "
            f"fusion of the BM25 and dense runs works on any node: add `--fusion client`."
        )
    sys.audit(REQUIRED_EVENT, what)


def ensure_pipeline(client, body: dict) -> tuple[str, dict]:
    """Create the pipeline `body` unless a pipeline of that (hash-derived) name exists."""
    from opensearchpy.exceptions import NotFoundError  # opensearchpy: spec validation imports this module

    sys.audit(REQUIRED_EVENT, "a hybrid search pipeline")
    name = pipeline_name(body)
    try:
        client.search_pipeline.get(id=name)
    except NotFoundError:
        client.search_pipeline.put(id=name, body=body)
    return name, body
