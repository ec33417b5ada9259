"""A served model's endpoint as the rest of evalctl sees it: its key (from the environment only), its URL as
shown and recorded (without credentials or the key), and what keys its vectors besides the spec's weights."""

from __future__ import annotations

import os

from evalctl.errors import BadInput
from evalctl.models import Endpoint, ModelSpec
from evalctl.opensearch.connection import redact


class EndpointKeyMissing(BadInput, RuntimeError):
    """The environment variable that should hold the endpoint's key is not set."""


def api_key(spec: ModelSpec) -> str | None:
    """The endpoint's key, from the environment variable its spec names (None when it names none)."""
    name = spec.endpoint.api_key_env
    if name is None:
        return None
    key = os.environ.get(name)
    if not key:
        raise EndpointKeyMissing(f"model {spec.id}: its endpoint's key is read from the environment variable {name}, "
                                 "which is not set")
    return key


def shown_url(spec: ModelSpec) -> str:
    """The endpoint's URL as messages and records show it: without credentials or the key."""
    key = os.environ.get(spec.endpoint.api_key_env) if spec.endpoint.api_key_env else None
    return redact(spec.endpoint.url.rstrip("/"), key)


def served_versions(endpoint: Endpoint) -> str:
    """What makes a served vector besides the spec's weights (for the cache key and index manifests, in place of
    the local package versions): the served model's name and the user's revision label of the server."""
    return f"served {endpoint.model}, revision {endpoint.revision}"
