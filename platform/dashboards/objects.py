"""OpenSearch Dashboards saved objects for the evalctl indexes that exist, and their import.

The templates in docker/dashboards/saved_objects.yaml are expanded per index: an index pattern (with
its field list taken from the index mapping, as a field refresh would list it), a saved search per
view text field and the CPC / IPC / jurisdiction visualisations, each on a keyword field of the mapping
(no scripted fields: Dashboards filters a scripted field by `s.get() == v`, which never matches a list).
Objects follow the Kibana 7.10 layout that OpenSearch Dashboards keeps: nested JSON attributes (visState,
searchSourceJSON, fields) are strings, and the index pattern is named through `references`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from evalctl.config_files import build, load_yaml, package_folder
from evalctl.dashboards.settings import DEFAULT_URL
from evalctl.errors import BadInput, Failure
from evalctl.indexers.index_layout import index_prefix, text_field
from evalctl.opensearch.retries import BACKOFF_MAX_S, BACKOFF_S, MAX_RETRIES, RETRY_STATUS

TEMPLATES = package_folder("docker.dashboards") / "saved_objects.yaml"
INDEX_REF = "kibanaSavedObjectMeta.searchSourceJSON.index"
# Mapping type -> Dashboards field type; other types (knn_vector) are left out of the field list.
FIELD_TYPES = {"keyword": "string", "text": "string", "date": "date"}
META_FIELDS = [  # what Dashboards' own field refresh lists besides the mapping
    {"name": "_id", "type": "string", "esTypes": ["_id"], "searchable": True, "aggregatable": True},
    {"name": "_index", "type": "string", "esTypes": ["_index"], "searchable": True, "aggregatable": True},
    {"name": "_score", "type": "number", "searchable": False, "aggregatable": False},
    {"name": "_source", "type": "_source", "esTypes": ["_source"], "searchable": False, "aggregatable": False},
]


class DashboardsError(Failure, RuntimeError):
    """Dashboards could not be reached or rejected objects; the message says which."""


class DashboardsRefused(BadInput, RuntimeError):
    """Dashboards wants credentials (others than those given): the user's settings to fix."""


@dataclass(frozen=True)
class SearchTemplate:
    title: str
    columns: list[str]
    sort_field: str


@dataclass(frozen=True)
class VisTemplate:
    id: str
    title: str
    type: Literal["histogram", "pie"]
    field: str
    size: int


@dataclass(frozen=True)
class DashboardTemplates:
    source_excludes: list[str]
    search: SearchTemplate
    visualisations: list[VisTemplate]


def load_templates(path: Path = TEMPLATES) -> DashboardTemplates:
    return build(DashboardTemplates, load_yaml(path), str(path))


def index_properties(client, pattern: str | None = None) -> dict[str, dict]:
    """Mapping properties of every index matching `pattern` (default: the configured prefix's indexes)."""
    pattern = pattern or f"{index_prefix()}-*"
    mappings = client.indices.get_mapping(index=pattern, allow_no_indices=True, expand_wildcards="open")
    return {name: m["mappings"].get("properties", {}) for name, m in sorted(mappings.items())}


def _field_list(properties: dict) -> list[dict]:
    fields = [{**f, "count": 0, "scripted": False, "readFromDocValues": False} for f in META_FIELDS]
    for name, prop in sorted(properties.items()):
        if prop["type"] in FIELD_TYPES:
            doc_values = prop["type"] != "text"  # keyword and date aggregate from doc values; text does not
            fields.append({"name": name, "type": FIELD_TYPES[prop["type"]], "esTypes": [prop["type"]], "count": 0,
                           "scripted": False, "searchable": True, "aggregatable": doc_values,
                           "readFromDocValues": doc_values})
    return fields


def _search_source(query: str = "") -> str:
    return json.dumps({"query": {"query": query, "language": "kuery"}, "filter": [], "indexRefName": INDEX_REF})


def _index_reference(pattern_id: str) -> list[dict]:
    return [{"name": INDEX_REF, "type": "index-pattern", "id": pattern_id}]


def _vis_state(vis: VisTemplate, title: str) -> dict:
    return {
        "title": title,
        "type": vis.type,
        # Dashboards fills every param not given here from the visualisation type's defaults.
        "params": {"addLegend": True, "addTooltip": True, **({"isDonut": False} if vis.type == "pie" else {})},
        "aggs": [
            {"id": "1", "enabled": True, "type": "count", "schema": "metric", "params": {}},
            {"id": "2", "enabled": True, "type": "terms", "schema": "segment",
             "params": {"field": vis.field, "size": vis.size, "order": "desc", "orderBy": "1",
                        "otherBucket": True, "missingBucket": False}},
        ],
    }


def saved_objects(indexes: dict[str, dict], templates: DashboardTemplates | None = None) -> list[dict]:
    """The saved objects for `indexes` ({index name: mapping properties})."""
    t = templates or load_templates()
    view_prefix = text_field("")
    objects = []
    for index, properties in indexes.items():
        objects.append({"type": "index-pattern", "id": index, "references": [], "attributes": {
            "title": index,
            "fields": json.dumps(_field_list(properties)),
            "sourceFilters": json.dumps([{"value": v} for v in t.source_excludes]),
        }})
        views = sorted(f[len(view_prefix):] for f, p in properties.items()
                       if f.startswith(view_prefix) and p["type"] == "text")
        for view in views:
            objects.append({"type": "search", "id": f"{index}.search.{view}", "references": _index_reference(index),
                            "attributes": {
                                "title": t.search.title.format(index=index, view=view),
                                "description": f"Documents of {index} that carry view {view}; add terms to the query "
                                               f"(e.g. {text_field(view)}:wheelchair).",
                                "columns": [*t.search.columns, text_field(view)],
                                "sort": [[t.search.sort_field, "desc"]],
                                "version": 1,
                                "kibanaSavedObjectMeta": {"searchSourceJSON": _search_source(f"{text_field(view)}:*")},
                            }})
        for vis in (v for v in t.visualisations if v.field in properties):  # see missing_fields
            title = vis.title.format(index=index)
            objects.append({"type": "visualization", "id": f"{index}.vis.{vis.id}",
                            "references": _index_reference(index), "attributes": {
                                "title": title,
                                "visState": json.dumps(_vis_state(vis, title)),
                                "uiStateJSON": "{}",
                                "description": "",
                                "version": 1,
                                "kibanaSavedObjectMeta": {"searchSourceJSON": _search_source()},
                            }})
    return objects


def missing_fields(indexes: dict[str, dict], templates: DashboardTemplates | None = None) -> dict[str, list[str]]:
    """{index: the visualisation fields its mapping lacks} for indexes made before those fields existed
    (saved_objects leaves those charts out: they would count nothing)."""
    t = templates or load_templates()
    gaps = {index: [v.field for v in t.visualisations if v.field not in properties]
            for index, properties in indexes.items()}
    return {index: fields for index, fields in gaps.items() if fields}


def to_ndjson(objects: list[dict]) -> str:
    return "".join(json.dumps(o, sort_keys=True) + "\n" for o in objects)


def _no_credentials(request):
    """requests' auth when none is configured: an explicit one, so requests adds no ~/.netrc entry."""
    return request


def import_objects(ndjson: str, url: str = DEFAULT_URL, timeout: float = 60.0,
                   auth: tuple[str, str] | None = None) -> int:
    """POST the NDJSON to Dashboards' saved-objects import (overwriting); returns the count imported.
    `url` carries no credentials (DashboardsSettings takes them out); `auth` is sent only when given.
    Transient refusals (429/502/503/504, resets) are retried with the OpenSearch requests' back-off:
    the import overwrites by id, so a repeat changes nothing."""
    import requests  # deferred: requests, urllib3
    from requests.adapters import HTTPAdapter
    from urllib3.util import Retry

    endpoint = f"{url.rstrip('/')}/api/saved_objects/_import"
    session = requests.Session()
    retry = Retry(total=MAX_RETRIES, connect=0, backoff_factor=BACKOFF_S, backoff_max=BACKOFF_MAX_S,
                  status_forcelist=RETRY_STATUS, allowed_methods=None, raise_on_status=False)
    for scheme in ("http://", "https://"):
        session.mount(scheme, HTTPAdapter(max_retries=retry))
    try:
        resp = session.post(endpoint, params={"overwrite": "true"}, headers={"osd-xsrf": "true"},
                            files={"file": ("evalctl.ndjson", ndjson.encode(), "application/ndjson")},
                            auth=auth or _no_credentials, timeout=timeout)
    except requests.RequestException as e:
        raise DashboardsError(f"OpenSearch Dashboards at {url} does not answer ({e.__class__.__name__}); "
                              "start it (docker compose up -d) or pass --url") from None
    finally:
        session.close()
    if resp.status_code in (401, 403):
        raise DashboardsRefused(
            f"OpenSearch Dashboards at {url} refused the import (HTTP {resp.status_code}"
            f"{', with the credentials given' if auth else ', no credentials were sent'}): set "
            "EVALCTL_DASHBOARDS_USER and EVALCTL_DASHBOARDS_PASSWORD (or username/password in the config file's "
            "dashboards: section) to an account allowed to import saved objects")
    if resp.status_code != 200:
        raise DashboardsError(f"{endpoint} answered HTTP {resp.status_code}: {resp.text[:500]}")
    try:
        body = resp.json()
    except ValueError:
        raise DashboardsError(f"{endpoint} answered HTTP 200 with something that is not JSON ({resp.text[:80]!r}): "
                              "is that URL OpenSearch Dashboards?") from None
    if not body.get("success"):
        errors = "\n  ".join(f"{e.get('type')} {e.get('id')}: {json.dumps(e.get('error'))}"
                             for e in body.get("errors", []))
        raise DashboardsError(f"Dashboards rejected {len(body.get('errors', []))} object(s):\n  {errors}")
    return body["successCount"]
