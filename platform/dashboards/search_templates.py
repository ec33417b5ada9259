"""Mustache search templates stored in OpenSearch (`PUT _scripts/<id>`) for ad-hoc searching of the
evalctl indexes from Dashboards' Dev Tools or any client:

- `evalctl-bm25`   params view, query_text, size (10): `match` on text_<view>
- `evalctl-knn`    params view, vector, k (10), size (10): `knn` on vec_<view>
- `evalctl-hybrid` params view, query_text, vector, k (10), size (10): a `hybrid` query of both with a
  temporary min-max normalisation pipeline in the body (without a pipeline hybrid returns raw
  "delimiter" scores). Running it needs the opensearch-neural-search plugin; rendering does not.

Vectors stay out of the hits (`_source` excludes vec_*).
"""

from __future__ import annotations

import json

from evalctl.indexers.index_layout import text_field, vector_field

# Placeholders for values that are not JSON strings; each is replaced by raw mustache after json.dumps.
RAW = {
    "@size": "{{size}}{{^size}}10{{/size}}",
    "@k": "{{k}}{{^k}}10{{/k}}",
    "@vector": "{{#toJson}}vector{{/toJson}}",
}
VIEW = "{{view}}"


def _match() -> dict:
    return {"match": {text_field(VIEW): {"query": "{{query_text}}"}}}


def _knn() -> dict:
    return {"knn": {vector_field(VIEW): {"vector": "@vector", "k": "@k"}}}


def _body(query: dict, **extra) -> dict:
    return {"size": "@size", "_source": {"excludes": [vector_field("*")]}, **extra, "query": query}


HYBRID_PIPELINE = {"phase_results_processors": [{"normalization-processor": {
    "normalization": {"technique": "min_max"}, "combination": {"technique": "arithmetic_mean"}}}]}

TEMPLATES = {
    "evalctl-bm25": _body(_match()),
    "evalctl-knn": _body(_knn()),
    "evalctl-hybrid": _body({"hybrid": {"queries": [_match(), _knn()]}}, search_pipeline=HYBRID_PIPELINE),
}


def template_source(template_id: str) -> str:
    """The mustache source: the body's JSON with the RAW placeholders unquoted."""
    text = json.dumps(TEMPLATES[template_id])
    for marker, mustache in RAW.items():
        text = text.replace(json.dumps(marker), mustache)
    return text


def install_templates(client) -> list[str]:
    """Store (or overwrite) every template; returns their ids."""
    for template_id in TEMPLATES:
        client.put_script(id=template_id, body={"script": {"lang": "mustache", "source": template_source(template_id)}})
    return list(TEMPLATES)
