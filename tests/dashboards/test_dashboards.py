"""Dashboards saved objects: structure against the mapping index_layout builds; the requests Dashboards
sends for the charts' fields (a bar's filter, a KQL term, the terms aggregation and its "Other" bucket),
rebuilt from Dashboards' source and replayed on the real node against an index of the quickstart's OPS
pizza sample; an index made before those fields; and the import client against a recording local HTTP
server (no OpenSearch Dashboards runs here: no Docker engine)."""

from __future__ import annotations

import email
import json
import uuid
from collections import Counter

import pytest
from click.testing import CliRunner

from conftest import private_cache
from dashboards_server import dashboards_server  # noqa: F401 - a fixture: the recording import endpoint
from evalctl.cli.main import cli
from evalctl.dashboards.objects import (
    INDEX_REF, DashboardsError, import_objects, index_properties, load_templates, missing_fields, saved_objects,
    to_ndjson,
)
from evalctl.indexers.index_layout import FACETS, IndexSettings, index_body, index_name, text_field, vector_field
from real_data import OPS

MODEL_VIEWS = ["T", "TAC"]
BM25_VIEWS = ["T", "A", "C", "TA", "TAC", "TACD"]


def props(views, dim):
    return index_body(views, dim, "cosine" if dim else None, IndexSettings(), meta={})["mappings"]["properties"]


@pytest.fixture(scope="module")
def indexes():
    return {index_name("pizza", "all-minilm-l6-v2"): props(MODEL_VIEWS, 8),
            index_name("pizza", None): props(BM25_VIEWS, None)}


@pytest.fixture(scope="module")
def objects(indexes):
    return [json.loads(line) for line in to_ndjson(saved_objects(indexes)).splitlines()]


def of_type(objects, kind):
    return [o for o in objects if o["type"] == kind]


def pattern_fields(objects):
    """index-pattern id -> {field name: field spec} (the `fields` attribute is a JSON string)."""
    return {o["id"]: {f["name"]: f for f in json.loads(o["attributes"]["fields"])}
            for o in of_type(objects, "index-pattern")}


def test_ndjson_lines_are_complete_saved_objects(indexes):
    text = to_ndjson(saved_objects(indexes))
    assert text.endswith("\n")
    lines = text.splitlines()
    ids = set()
    for line in lines:
        o = json.loads(line)
        assert {"type", "id", "attributes", "references"} <= set(o)
        assert o["type"] in ("index-pattern", "search", "visualization")
        assert isinstance(o["references"], list) and o["attributes"]["title"]
        assert (o["type"], o["id"]) not in ids
        ids.add((o["type"], o["id"]))
    # per index: one pattern, one search per view, the visualisations
    assert len(lines) == sum(1 + len(v) + len(load_templates().visualisations) for v in (MODEL_VIEWS, BM25_VIEWS))


def test_one_index_pattern_per_index_with_fields_from_the_mapping(indexes, objects):
    fields = pattern_fields(objects)
    assert set(fields) == set(indexes)
    for index, properties in indexes.items():
        p = next(o for o in of_type(objects, "index-pattern") if o["id"] == index)
        assert p["attributes"]["title"] == index
        assert not any(f["scripted"] for f in fields[index].values())
        plain = {n for n in fields[index] if not n.startswith("_")}
        assert plain == {n for n, m in properties.items() if m["type"] != "knn_vector"}
        assert {n: fields[index][n]["esTypes"] for n in FACETS} == {n: ["keyword"] for n in FACETS}
        for name in plain:
            assert fields[index][name]["aggregatable"] == (properties[name]["type"] in ("keyword", "date"))
        excluded = [f["value"] for f in json.loads(p["attributes"]["sourceFilters"])]
        assert excluded == [vector_field("*")]


def test_searches_reference_existing_patterns_and_show_their_view(indexes, objects):
    fields = pattern_fields(objects)
    searches = of_type(objects, "search")
    for s in searches:
        (ref,) = s["references"]
        assert ref == {"name": INDEX_REF, "type": "index-pattern", "id": ref["id"]} and ref["id"] in fields
        source = json.loads(s["attributes"]["kibanaSavedObjectMeta"]["searchSourceJSON"])
        assert source["indexRefName"] == INDEX_REF and source["filter"] == []
        view_field = s["attributes"]["columns"][-1]
        assert source["query"] == {"query": f"{view_field}:*", "language": "kuery"}
        for column in s["attributes"]["columns"] + [s["attributes"]["sort"][0][0]]:
            assert column in indexes[ref["id"]], column
    views = {(s["references"][0]["id"], s["attributes"]["columns"][-1]) for s in searches}
    assert views == {(i, text_field(v)) for i, vs in zip(indexes, (MODEL_VIEWS, BM25_VIEWS)) for v in vs}


def test_visualisations_aggregate_fields_the_pattern_has(indexes, objects):
    fields = pattern_fields(objects)
    vis = of_type(objects, "visualization")
    assert len(vis) == 3 * len(indexes)
    for v in vis:
        (ref,) = v["references"]
        assert ref["name"] == INDEX_REF and ref["id"] in fields
        assert json.loads(v["attributes"]["kibanaSavedObjectMeta"]["searchSourceJSON"])["indexRefName"] == INDEX_REF
        state = json.loads(v["attributes"]["visState"])
        assert json.loads(v["attributes"]["uiStateJSON"]) == {}
        (terms,) = [a for a in state["aggs"] if a["type"] == "terms"]
        field = fields[ref["id"]][terms["params"]["field"]]
        assert field["aggregatable"] and not field["scripted"]
        assert indexes[ref["id"]][field["name"]]["type"] == "keyword"
    kinds = {(json.loads(v["attributes"]["visState"])["type"],
              [a for a in json.loads(v["attributes"]["visState"])["aggs"] if a["type"] == "terms"][0]["params"]["field"])
             for v in vis}
    assert kinds == {("histogram", "cpc_subclass"), ("histogram", "ipc3"), ("pie", "jurisdiction")}


def test_an_index_without_a_chart_field_gets_no_chart_for_it(indexes):
    old = {name: {f: p for f, p in props.items() if f not in FACETS} for name, props in indexes.items()}
    assert missing_fields(indexes) == {}
    assert missing_fields(old) == {name: ["cpc_subclass", "ipc3"] for name in old}
    charts = {o["id"].rsplit(".", 1)[1] for o in saved_objects(old) if o["type"] == "visualization"}
    assert charts == {"jurisdiction"}


# ---------------------------------------------------------------- real node


# The code prefix each chart field holds, cut here from the stored codes, not by the code under test.
PREFIXES = {"cpc_subclass": ("cpc", 4), "ipc_subclass": ("ipc", 4), "ipc3": ("ipc", 3)}


@pytest.fixture(scope="module")
def pizza(tmp_path_factory, os_client):
    """The OPS pizza sample (2,973 publications) indexed as `evalctl index --model bm25 --view T` does, under an
    index prefix of this module; with each record's distinct prefixes per chart field."""
    from evalctl.corpus.importer import import_corpus
    from evalctl.corpus.views import load_views
    from evalctl.indexers.index_loader import index_corpus

    mp = private_cache(tmp_path_factory.mktemp("dashboards"))
    prefix = f"dash-{uuid.uuid4().hex[:6]}"
    mp.setenv("EVALCTL_INDEX_PREFIX", prefix)
    corpus = import_corpus("ops", [OPS], name="pizza").corpus
    report = index_corpus(os_client, corpus, [load_views()["T"]], None, progress=False)
    assert report.n_loaded == len(corpus) and not report.failed
    records = list(corpus.records())
    prefixes = {f: [{c.code[:n] for c in getattr(r, source)} for r in records] for f, (source, n) in PREFIXES.items()}
    yield {"corpus": corpus, "index": report.index, "prefixes": prefixes, "mp": mp}
    os_client.indices.delete(index=f"{prefix}-*", ignore_unavailable=True)
    mp.undo()


# The request bodies OpenSearch Dashboards sends, as its source builds them (opensearch-project/
# OpenSearch-Dashboards, src/plugins/data/common/): a query is buildOpenSearchQuery's bool
# (opensearch_query/opensearch_query/build_opensearch_query.ts, from_filters.ts, from_kuery.ts); a bar clicked
# is createFilterTerms -> buildPhraseFilter, a match_phrase on a field that is not scripted
# (search/aggs/buckets/create_filter/terms.ts, opensearch_query/filters/phrase_filter.ts); `field:value` typed
# in KQL is a one-clause should of `match` (opensearch_query/kuery/functions/is.ts, and.ts); the terms agg is
# field, size and order {_count: desc} (search/aggs/buckets/terms.ts); its "Other" bucket is a second request,
# a filters agg keyed "" of an exists filter (not for a scripted field) and a negated phrase filter per bucket
# shown (search/aggs/buckets/_terms_other_bucket_helper.ts, buildOtherBucketAgg).


def _query(filters=(), must_not=()) -> dict:
    return {"bool": {"must": [], "filter": list(filters), "should": [], "must_not": list(must_not)}}


MATCH_ALL = _query([{"match_all": {}}])  # the empty KQL query


def _phrase(field: str, value: str) -> dict:
    return {"match_phrase": {field: value}}


def _kql_is(field: str, value: str) -> dict:
    return _query([{"bool": {"should": [{"match": {field: value}}], "minimum_should_match": 1}}])


def _terms_request(field: str, size: int) -> dict:
    return {"size": 0, "query": MATCH_ALL,
            "aggs": {"2": {"terms": {"field": field, "order": {"_count": "desc"}, "size": size}}}}


def _other_request(field: str, shown: list[str]) -> dict:
    other = _query([{"exists": {"field": field}}], [_phrase(field, k) for k in shown])
    return {"size": 0, "query": MATCH_ALL, "aggs": {"other-filter": {"filters": {"filters": {"": other}}}}}


def _hits(client, index: str, query: dict) -> int:
    return client.search(index=index, body={"size": 0, "track_total_hits": True, "query": query})["hits"]["total"]["value"]


def _chart_fields(index: str, properties: dict) -> dict[str, tuple[dict, int]]:
    """{field: (its index-pattern field spec, chart size)} for the charts the saved objects hold, plus
    ipc_subclass as a chart of 25 would ask (Discover's field list offers it the same way)."""
    objects = saved_objects({index: properties})
    (pattern,) = [o for o in objects if o["type"] == "index-pattern"]
    specs = {f["name"]: f for f in json.loads(pattern["attributes"]["fields"])}
    sizes = {"ipc_subclass": 25}
    for o in objects:
        if o["type"] == "visualization":
            (terms,) = [a for a in json.loads(o["attributes"]["visState"])["aggs"] if a["type"] == "terms"]
            sizes[terms["params"]["field"]] = terms["params"]["size"]
    return {f: (specs[f], sizes[f]) for f in PREFIXES}


@pytest.mark.opensearch
@pytest.mark.parametrize("field", list(PREFIXES))
def test_dashboards_requests_on_a_code_field_count_what_the_corpus_holds(os_client, pizza, field):
    index, per_record = pizza["index"], pizza["prefixes"][field]
    spec, size = _chart_fields(index, index_properties(os_client, index)[index])[field]
    assert not spec["scripted"] and spec["aggregatable"] and spec["esTypes"] == ["keyword"]
    counts = Counter(v for values in per_record for v in values)
    # the chart: the `size` most frequent values, ties by value (OpenSearch's order after _count)
    shown = sorted(counts, key=lambda v: (-counts[v], v))[:size]
    resp = os_client.search(index=index, body=_terms_request(field, size))
    buckets = resp["aggregations"]["2"]["buckets"]
    assert [(b["key"], b["doc_count"]) for b in buckets] == [(v, counts[v]) for v in shown]
    # a bar clicked, and the same value typed in KQL: the documents of that bar
    for value in shown[:5]:
        assert _hits(os_client, index, _query([_phrase(field, value)])) == counts[value], value
        assert _hits(os_client, index, _kql_is(field, value)) == counts[value], value
    # "Other": documents with a value of the field, none of them shown
    other = os_client.search(index=index, body=_other_request(field, [b["key"] for b in buckets]))
    expected_other = sum(1 for values in per_record if values and not values & set(shown))
    assert other["aggregations"]["other-filter"]["buckets"][""]["doc_count"] == expected_other
    print(f"{field}: {len(counts)} values, top {size} shown, {shown[0]} {counts[shown[0]]} documents, "
          f"Other {expected_other} of {sum(1 for v in per_record if v)} with a value ({len(per_record)} in all)")


@pytest.mark.opensearch
def test_an_index_made_before_the_code_fields_is_refused_and_gets_no_chart(os_client, pizza, tmp_path, monkeypatch):
    """Documents with the fields never join an index without them (Dashboards would count its other documents
    as having no value); Dashboards objects for it leave its charts out and say how to get them."""
    from evalctl.corpus.views import load_views
    from evalctl.indexers.index_loader import IndexMismatch, index_corpus, index_manifest

    monkeypatch.setenv("EVALCTL_INDEX_PREFIX", f"dash-old-{uuid.uuid4().hex[:6]}")  # this test's indexes only
    old = index_name(pizza["corpus"].name, None)
    # the manifest and mapping `evalctl index` wrote before the code fields
    meta = index_manifest(pizza["corpus"], None, ["T"], IndexSettings())
    del meta["facets"]
    body = index_body(["T"], None, None, IndexSettings(), meta)
    for f in FACETS:
        del body["mappings"]["properties"][f]
    os_client.indices.create(index=old, body=body)
    try:
        with pytest.raises(IndexMismatch, match=r"(?s)facets: index has None.*cpc_subclass, ipc_subclass, ipc3"
                                                r".*rebuild it.*evalctl index delete"):
            index_corpus(os_client, pizza["corpus"], [load_views()["T"]], None, progress=False)
        os_client.indices.refresh(index=old)
        assert os_client.count(index=old)["count"] == 0  # refused before any document was sent
        out = tmp_path / "objects.ndjson"
        result = CliRunner().invoke(cli, ["dashboards", "export", "--out", str(out)])
        assert result.exit_code == 0, result.output
        assert f"index {old} has no field cpc_subclass, ipc3" in result.stderr
        assert f"evalctl index delete {old}" in result.stderr
        ids = {json.loads(line)["id"] for line in out.read_text().splitlines()}
        assert ids == {old, f"{old}.search.T", f"{old}.vis.jurisdiction"}
    finally:
        os_client.indices.delete(index=old, ignore_unavailable=True)


@pytest.mark.opensearch
def test_export_command_writes_objects_for_live_indexes(os_client, tmp_path):
    index = index_name(f"test-{uuid.uuid4().hex[:8]}", None)
    os_client.indices.create(index=index, body=index_body(["T", "TA"], None, None, IndexSettings(), meta={}))
    try:
        assert index_properties(os_client, index) == {index: props(["T", "TA"], None)}
        out = tmp_path / "objects.ndjson"
        result = CliRunner().invoke(cli, ["dashboards", "export", "--out", str(out)])
        assert result.exit_code == 0, result.output
        mine = [json.loads(line) for line in out.read_text().splitlines() if json.loads(line)["id"].startswith(index)]
        assert sorted(o["id"] for o in mine) == sorted(
            [index, f"{index}.search.T", f"{index}.search.TA", f"{index}.vis.cpc-subclass", f"{index}.vis.ipc3",
             f"{index}.vis.jurisdiction"])
    finally:
        os_client.indices.delete(index=index, ignore_unavailable=True)


# ---------------------------------------------------------------- import client


def test_import_posts_multipart_ndjson_with_xsrf_header(dashboards_server, indexes):
    url, recorder = dashboards_server
    ndjson = to_ndjson(saved_objects(indexes))
    recorder.answer = {"success": True, "successCount": len(ndjson.splitlines())}
    assert import_objects(ndjson, url + "/") == len(ndjson.splitlines())
    (req,) = recorder.requests
    assert req["method"] == "POST"
    assert req["path"] == "/api/saved_objects/_import?overwrite=true"
    headers = {k.lower(): v for k, v in req["headers"].items()}
    assert headers["osd-xsrf"] == "true"
    assert headers["content-type"].startswith("multipart/form-data; boundary=")
    msg = email.message_from_bytes(b"Content-Type: " + headers["content-type"].encode() + b"\r\n\r\n" + req["body"])
    (part,) = msg.get_payload()
    assert part.get_param("name", header="content-disposition") == "file"
    assert part.get_filename().endswith(".ndjson")
    assert part.get_payload(decode=True).decode() == ndjson


def test_import_reports_rejected_objects(dashboards_server):
    url, recorder = dashboards_server
    recorder.answer = {"success": False, "successCount": 0, "errors": [
        {"id": "evalctl-x--bm25", "type": "index-pattern", "error": {"type": "conflict"}}]}
    with pytest.raises(DashboardsError, match="index-pattern evalctl-x--bm25.*conflict"):
        import_objects('{"type": "index-pattern"}\n', url)


def test_import_without_dashboards_says_how_to_start_it():
    with pytest.raises(DashboardsError, match="does not answer.*docker compose up"):
        import_objects("{}\n", "http://127.0.0.1:9", timeout=5)
