"""Loading sends pre-built `_bulk` requests: grouping by documents and bytes, documents the node refuses
recorded by id (real node), and 429 refusals sent again after a backoff (the retry loop on its own)."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import orjson
import pytest

from evalctl.indexers.index_layout import BulkSettings
from evalctl.indexers.index_loader import IndexReport, _chunks, bulk_requests, send_bulk


def _line(index: str, doc_id: str, source: dict) -> tuple[str, bytes]:
    return doc_id, orjson.dumps({"index": {"_index": index, "_id": doc_id}}) + b"\n" + orjson.dumps(source) + b"\n"


def test_requests_are_cut_by_documents_and_bytes():
    lines = [(str(i), b"x" * 10) for i in range(7)]
    assert [len(g) for g in bulk_requests(lines, max_docs=3, max_bytes=1000)] == [3, 3, 1]
    assert [len(g) for g in bulk_requests(lines, max_docs=100, max_bytes=25)] == [2, 2, 2, 1]
    assert [len(g) for g in bulk_requests([("big", b"y" * 50), ("a", b"z")], 10, 25)] == [1, 1]  # big goes alone
    assert [d for g in bulk_requests(lines, 3, 25) for d, _ in g] == [d for d, _ in lines]


def test_a_full_request_goes_out_without_waiting_for_the_next_document():
    def lines():  # the next document is a whole chunk of preparation away
        yield from [(str(i), b"x") for i in range(3)]
        raise AssertionError("asked for a fourth document before the first request was handed on")

    assert [d for d, _ in next(bulk_requests(lines(), max_docs=3, max_bytes=1000))] == ["0", "1", "2"]


def test_the_first_chunk_can_be_smaller():
    assert [len(c) for c in _chunks(range(10), 4, first=2)] == [2, 4, 4]
    assert [len(c) for c in _chunks(range(10), 4)] == [4, 4, 2]


@pytest.mark.opensearch
def test_refused_documents_are_named_and_the_rest_loaded(os_client):
    index = f"evalctl-test-bulk-{uuid.uuid4().hex[:8]}"
    os_client.indices.create(index=index, body={"mappings": {"dynamic": "strict", "properties": {
        "doc_id": {"type": "keyword"}, "n": {"type": "integer"}}}})
    try:
        report = IndexReport(index=index, n_corpus=3, n_already=0, missing_view={})
        request = [_line(index, "ok-1", {"doc_id": "ok-1", "n": 1}), _line(index, "bad", {"doc_id": "bad", "nope": 2}),
                   _line(index, "ok-2", {"doc_id": "ok-2", "n": "not a number"})]
        send_bulk(os_client, request, BulkSettings(), report)
        os_client.indices.refresh(index=index)
        assert report.n_loaded == 1 and os_client.count(index=index)["count"] == 1
        assert [f.split(":")[0] for f in report.failed] == ["bad", "ok-2"]
        assert "strict_dynamic_mapping_exception" in report.failed[0] and "number_format" in report.failed[1]
    finally:
        os_client.indices.delete(index=index)


class QueueFullOnce:
    """Answers the first `_bulk` with 429 for its second document (a node whose write queue is full)."""

    def __init__(self):
        self.bodies: list[bytes] = []
        self.transport = SimpleNamespace(kwargs={"timeout": 120.0})  # where opensearch-py keeps its read timeout

    def bulk(self, body, params):
        self.bodies.append(body)
        self.params = params
        n = body.count(b"\n") // 2
        if len(self.bodies) == 1:
            items = [{"index": {"status": 201}}, {"index": {"status": 429, "error": {"type": "es_rejected"}}}]
            return {"took": 1, "errors": True, "items": items + [{"index": {"status": 201}}] * (n - 2)}
        return {"took": 1, "errors": False, "items": [{"index": {"status": 201}}] * n}


def test_queue_full_documents_are_sent_again(monkeypatch):
    sleeps = []
    monkeypatch.setattr("evalctl.indexers.index_loader.time.sleep", sleeps.append)
    client, report = QueueFullOnce(), IndexReport(index="i", n_corpus=3, n_already=0, missing_view={})
    request = [_line("i", d, {"doc_id": d}) for d in ("a", "b", "c")]
    send_bulk(client, request, BulkSettings(initial_backoff=0.5), report)
    assert report.n_loaded == 3 and not report.failed and sleeps == [0.5]
    assert client.bodies[1] == request[1][1]  # only the refused document, its bytes unchanged
    # the node's wait for a shard without a primary (bulk.timeout), and the client's own read timeout beside it
    assert client.params["timeout"] == "1m" and client.params["request_timeout"] == 120.0


def test_a_bulk_timeout_is_a_time_of_opensearch_or_refused_naming_the_file():
    from evalctl.config_files import SpecError
    from evalctl.indexers.index_layout import load_index_settings

    assert BulkSettings(timeout="5s").timeout == "5s" and load_index_settings().bulk.timeout == "1m"
    for bad in ("5", "1 m", "0s", "-1s", "5 minutes"):
        with pytest.raises(ValueError, match=f"bulk timeout '{bad}': a whole number and a unit, ms, s, m or h"):
            BulkSettings(timeout=bad)
    with pytest.raises(SpecError, match=r"configs/index.yaml.*bulk timeout '5'"):
        load_index_settings(bulk={"timeout": "5"})


class QueueAlwaysFull(QueueFullOnce):
    def bulk(self, body, params):
        self.bodies.append(body)
        return {"took": 1, "errors": True, "items": [{"index": {"status": 429, "error": {"type": "es_rejected"}}}]}


def test_documents_still_refused_after_the_retries_are_recorded(monkeypatch):
    sleeps = []
    monkeypatch.setattr("evalctl.indexers.index_loader.time.sleep", sleeps.append)
    report = IndexReport(index="i", n_corpus=1, n_already=0, missing_view={})
    send_bulk(QueueAlwaysFull(), [_line("i", "b", {})], BulkSettings(max_retries=2, initial_backoff=1, max_backoff=1.5),
              report)
    assert sleeps == [1, 1.5] and report.n_loaded == 0 and report.failed == ["b: {'type': 'es_rejected'}"]
