"""Dashboards saved objects: structure against the mapping index_layout builds, the scripted CPC
subclass field on the real node, and the import client against a recording local HTTP server (no
OpenSearch Dashboards runs here: no Docker engine)."""

from __future__ import annotations

import email
import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, HTTPServer

import pandas as pd
import pytest
from click.testing import CliRunner

from corpus_helpers import FIXTURES
from evalctl.cli.main import cli
from evalctl.dashboards.objects import (
    INDEX_REF, DashboardsError, import_objects, index_properties, load_templates, saved_objects, to_ndjson,
)
from evalctl.indexers.index_layout import IndexSettings, index_body, index_name, text_field, vector_field

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
    # per index: one pattern, one search per view, two visualisations
    assert len(lines) == sum(1 + len(v) + 2 for v in (MODEL_VIEWS, BM25_VIEWS))


def test_one_index_pattern_per_index_with_fields_from_the_mapping(indexes, objects):
    fields = pattern_fields(objects)
    assert set(fields) == set(indexes)
    for index, properties in indexes.items():
        p = next(o for o in of_type(objects, "index-pattern") if o["id"] == index)
        assert p["attributes"]["title"] == index
        plain = {n for n, f in fields[index].items() if not f["scripted"] and not n.startswith("_")}
        assert plain == {n for n, m in properties.items() if m["type"] != "knn_vector"}
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
    assert len(vis) == 2 * len(indexes)
    for v in vis:
        (ref,) = v["references"]
        assert ref["name"] == INDEX_REF and ref["id"] in fields
        assert json.loads(v["attributes"]["kibanaSavedObjectMeta"]["searchSourceJSON"])["indexRefName"] == INDEX_REF
        state = json.loads(v["attributes"]["visState"])
        assert json.loads(v["attributes"]["uiStateJSON"]) == {}
        (terms,) = [a for a in state["aggs"] if a["type"] == "terms"]
        field = fields[ref["id"]][terms["params"]["field"]]
        assert field["aggregatable"]
        if not field["scripted"]:
            assert indexes[ref["id"]][field["name"]]["type"] == "keyword"
    kinds = {(json.loads(v["attributes"]["visState"])["type"],
              [a for a in json.loads(v["attributes"]["visState"])["aggs"] if a["type"] == "terms"][0]["params"]["field"])
             for v in vis}
    assert kinds == {("histogram", "cpc_subclass"), ("pie", "jurisdiction")}


def test_scripted_cpc_subclass_reads_a_mapped_field(objects):
    (script,) = [s.script for s in load_templates().scripted_fields if s.name == "cpc_subclass"]
    assert "doc['cpc']" in script
    for fields in pattern_fields(objects).values():
        assert fields["cpc_subclass"]["script"] == script and fields["cpc_subclass"]["lang"] == "painless"
        assert "cpc" in fields


# ---------------------------------------------------------------- real node


@pytest.fixture(scope="module")
def lens_rows():
    rows = pd.read_csv(FIXTURES / "lens_pizza_sample.csv", encoding="latin-1", nrows=6)
    return [{"doc_id": r["Publication Number"], "title": r["Title"], "jurisdiction": r["Jurisdiction"],
             "cpc": r["CPC Classifications"].split(";;") if isinstance(r["CPC Classifications"], str) else []}
            for _, r in rows.iterrows()]


@pytest.mark.opensearch
def test_cpc_subclass_script_counts_each_document_once_per_subclass(os_client, index_name, lens_rows):
    os_client.indices.create(index=index_name, body=index_body(["T"], None, None, IndexSettings(), meta={}))
    for row in lens_rows:
        os_client.index(index=index_name, id=row["doc_id"], body=row)
    os_client.indices.refresh(index=index_name)
    (script,) = [s.script for s in load_templates().scripted_fields if s.name == "cpc_subclass"]
    resp = os_client.search(index=index_name, body={"size": 0, "aggs": {"sub": {"terms": {
        "script": {"source": script, "lang": "painless"}, "size": 50}}}})
    got = {b["key"]: b["doc_count"] for b in resp["aggregations"]["sub"]["buckets"]}
    expected: dict[str, int] = {}
    for row in lens_rows:
        for sub in {c[:4] for c in row["cpc"]}:
            expected[sub] = expected.get(sub, 0) + 1
    assert got == expected
    assert got["A21D"] == 2  # A21D13/007 and A21D13/0003 in one record count once


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
            [index, f"{index}.search.T", f"{index}.search.TA", f"{index}.vis.cpc-subclass", f"{index}.vis.jurisdiction"])
    finally:
        os_client.indices.delete(index=index, ignore_unavailable=True)


# ---------------------------------------------------------------- import client


class Recorder(BaseHTTPRequestHandler):
    """Answers like Dashboards' import endpoint (`answer`, with HTTP `status`) and keeps what it was sent."""

    answer: dict = {}
    status = 200
    requests: list = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.requests.append({"method": self.command, "path": self.path, "headers": dict(self.headers), "body": body})
        payload = json.dumps(self.answer).encode()
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def dashboards_server():
    Recorder.requests = []
    server = HTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", Recorder
    server.shutdown()
    server.server_close()


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
