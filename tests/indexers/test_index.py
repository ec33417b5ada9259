"""Indexing real patents (USPTO grants, abstract + claims) with the offline models into the real node:
queries find the expected documents, a node that dies mid-load loses nothing, a second model gets its
own index, and mismatched data is refused."""

from __future__ import annotations

import csv
import dataclasses
import time
import uuid
from dataclasses import dataclass

import numpy as np
import pytest

from corpus_wrapper import CorpusWrapper
from click.testing import CliRunner

from conftest import USPTO

pytestmark = [pytest.mark.opensearch, pytest.mark.models]

N_RECORDS = 40


def write_rows(path, n, skip=0):
    """The first n USPTO grants (after `skip`), as a USPTO-style CSV."""
    csv.field_size_limit(1 << 24)
    with open(USPTO, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        rows = [r for _, r in zip(range(skip + n), reader)][skip:]
        fields = reader.fieldnames
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    return path


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """A private data cache and a corpus of 40 real grants named after this test run."""
    from evalctl.corpus.importer import import_corpus

    root = tmp_path_factory.mktemp("evalctl")
    mp = pytest.MonkeyPatch()
    mp.setenv("EVALCTL_CACHE", str(root / "cache"))
    mp.setenv("HF_HUB_OFFLINE", "1")
    name = f"uspto-test-{uuid.uuid4().hex[:8]}"
    src = write_rows(root / "grants.csv", N_RECORDS)
    corpus = import_corpus("uspto", [src], name=name).corpus
    yield {"root": root, "corpus": corpus, "name": name}
    mp.undo()


@pytest.fixture(scope="module")
def minilm():
    from evalctl.models import get_model

    return get_model("all-minilm-l6-v2")


@pytest.fixture(scope="module")
def views():
    from evalctl.corpus.views import load_views

    return load_views()


@pytest.fixture(scope="module")
def cleanup(os_client, env):
    yield
    from evalctl.indexers.index_layout import corpus_alias

    os_client.indices.delete(index=f"{corpus_alias(env['name'])}--*", ignore_unavailable=True)


@dataclass
class DiesAfter(CorpusWrapper):
    """The corpus, but the node is stopped once `n` documents were acknowledged and more are pending."""

    corpus: object
    n: int
    node: object
    client: object
    index: str

    def records(self, columns=None):
        for i, r in enumerate(self.corpus.records(columns)):
            if i == self.n + 5:
                deadline = time.monotonic() + 60
                while self._acknowledged() < self.n and time.monotonic() < deadline:
                    time.sleep(0.05)
                self.node.stop()
            yield r

    def _acknowledged(self) -> int:
        stats = self.client.indices.stats(index=self.index, metric="indexing")
        return stats["_all"]["primaries"]["indexing"]["index_total"]


def test_node_dies_mid_load_then_rerun_completes(on_private_node, env, minilm, views):
    """On the tests' private node (it is stopped mid-load): the shared node serves everything else."""
    from opensearchpy.exceptions import ConnectionError as OSConnectionError

    from evalctl.indexers.index_layout import BulkSettings, index_name, load_index_settings
    from evalctl.indexers.index_loader import index_corpus
    from evalctl.indexers.index_verify import verify_index
    from evalctl.opensearch.connection import load_settings, make_client

    node, client = on_private_node, make_client(load_settings())
    corpus = env["corpus"]
    dying = DiesAfter(corpus, 5, node, client, index_name(corpus.name, minilm.id))
    small_bulks = dataclasses.replace(load_index_settings(), bulk=BulkSettings(max_docs=5))
    with pytest.raises(OSConnectionError):
        index_corpus(client, dying, [views["TAC"]], minilm, chunk_docs=10, settings=small_bulks, progress=False)
    node.start()
    rep = index_corpus(client, corpus, [views["TAC"]], minilm, chunk_docs=10, progress=False)
    assert 5 <= rep.n_already < N_RECORDS  # what was acknowledged before the crash is kept, not reloaded
    assert rep.n_already + rep.n_loaded == N_RECORDS

    idx = rep.index
    ids = [h["_id"] for h in __import__("opensearchpy").helpers.scan(client, index=idx, query={"_source": False})]
    assert sorted(ids) == sorted(r.id for r in corpus.records())  # exact set, no duplicates
    check = verify_index(client, corpus, views, minilm, sample=N_RECORDS)
    assert check.ok, check.problems
    settings = client.indices.get_settings(index=idx)[idx]["settings"]["index"]
    assert settings.get("refresh_interval") in (None, "1s")  # restored after the load


def test_queries_find_expected_documents(os_client, env, minilm, views, cleanup):
    from evalctl.indexers.embedding_cache import EmbeddingCache
    from evalctl.indexers.encoder import cache_key
    from evalctl.indexers.index_layout import index_name, text_field, vector_field
    from evalctl.indexers.index_loader import index_corpus

    corpus = env["corpus"]
    rep = index_corpus(os_client, corpus, [views["TAC"]], minilm, progress=False)
    assert rep.n_loaded + rep.n_already == N_RECORDS
    idx = index_name(corpus.name, minilm.id)
    target = next(r for r in corpus.records() if r.title)
    hits = os_client.search(index=idx, body={"query": {"match": {text_field("TAC"): target.title}}})["hits"]["hits"]
    assert hits[0]["_id"] == target.id

    prompt = minilm.prompt_for("document", task_type="retrieval")
    cache = EmbeddingCache(cache_key(minilm, "document", "TAC", None, prompt=prompt))
    vec, found = cache.lookup([views["TAC"].render(target)])
    assert found.all()
    hits = os_client.search(index=idx, body={"size": 3, "query": {"knn": {vector_field("TAC"): {
        "vector": vec[0].tolist(), "k": 3}}}})["hits"]["hits"]
    assert hits[0]["_id"] == target.id
    assert hits[0]["_score"] == pytest.approx(1.0, abs=1e-4)  # (1 + cos) / 2 for the same vector


def test_second_model_keeps_first_and_mismatch_is_refused(os_client, env, minilm, views, cleanup):
    from evalctl.corpus.importer import import_corpus
    from evalctl.indexers.index_layout import index_name
    from evalctl.indexers.index_loader import IndexMismatch, index_corpus, read_manifest
    from evalctl.models import get_model

    corpus = env["corpus"]
    index_corpus(os_client, corpus, [views["TAC"]], minilm, progress=False)
    first = index_name(corpus.name, minilm.id)
    before = (os_client.count(index=first)["count"], read_manifest(os_client, first))

    mpnet = get_model("all-mpnet-base-v2")
    rep = index_corpus(os_client, corpus, [views["T"]], mpnet, progress=False)  # titles: mpnet is slow on a CPU
    assert rep.index != first and rep.n_loaded == N_RECORDS
    assert (os_client.count(index=first)["count"], read_manifest(os_client, first)) == before
    mapping = os_client.indices.get_mapping(index=rep.index)[rep.index]["mappings"]["properties"]
    assert mapping["vec_T"]["dimension"] == 768

    other = import_corpus("uspto", [write_rows(env["root"] / "other.csv", 5, skip=N_RECORDS)],
                          out=env["root"] / "other").corpus
    other = dataclasses.replace(other, name=corpus.name)  # same name, different content: never merged
    with pytest.raises(IndexMismatch, match="corpus_hash"):
        index_corpus(os_client, other, [views["TAC"]], minilm, progress=False)
    assert os_client.count(index=first)["count"] == N_RECORDS


def test_cli_index_verify_status(os_client, env, cleanup):
    from evalctl.cli.main import cli

    runner = CliRunner()
    r = runner.invoke(cli, ["index", "--corpus", env["name"], "--view", "T", "--view", "TA"])
    assert r.exit_code == 0, r.output
    assert f"corpus has {N_RECORDS}" in r.output
    r = runner.invoke(cli, ["index", "verify", "--corpus", env["name"]])
    assert r.exit_code == 0 and "verified" in r.output, r.output
    r = runner.invoke(cli, ["index", "status"])
    assert r.exit_code == 0 and f"{env['name']}--bm25" in r.output, r.output
    r = runner.invoke(cli, ["index", "--corpus", "no-such-corpus"])
    assert r.exit_code != 0 and "no corpus" in r.output and "Traceback" not in r.output


def test_vectors_read_back_exactly(os_client, env, minilm, views, cleanup):
    """Every stored vector equals the float32 vector the encoder produced."""
    from evalctl.indexers.embedding_cache import EmbeddingCache
    from evalctl.indexers.encoder import cache_key
    from evalctl.indexers.index_layout import index_name, vector_field
    from evalctl.indexers.index_loader import index_corpus

    corpus = env["corpus"]
    index_corpus(os_client, corpus, [views["TAC"]], minilm, progress=False)
    idx = index_name(corpus.name, minilm.id)
    records = [r for r in corpus.records() if views["TAC"].render(r)]
    resp = os_client.mget(index=idx, body={"ids": [r.id for r in records]}, _source_includes=[vector_field("TAC")])
    stored = np.array([d["_source"][vector_field("TAC")] for d in resp["docs"]], dtype=np.float32)
    prompt = minilm.prompt_for("document", task_type="retrieval")
    cached, found = EmbeddingCache(cache_key(minilm, "document", "TAC", None, prompt=prompt)).lookup(
        [views["TAC"].render(r) for r in records])
    assert found.all()
    np.testing.assert_array_equal(stored, cached)


def test_reindex_from_a_warm_cache_loads_no_model(os_client, env, minilm, views, monkeypatch):
    """The dimension check before creating an index needs no model load when the cache already holds the
    model's vectors for the view (it refuses vectors of another dim)."""
    from evalctl.corpus.importer import import_corpus
    from evalctl.indexers import encoder as encoder_module
    from evalctl.indexers.index_loader import index_corpus

    src = write_rows(env["root"] / "warm.csv", 8, skip=N_RECORDS)
    corpus = import_corpus("uspto", [src], name=f"{env['name']}-warm").corpus
    first = index_corpus(os_client, corpus, [views["TA"]], minilm, progress=False)  # encodes: the cache is warm
    try:
        os_client.indices.delete(index=first.index)  # a lost index, or a node wiped
        # no model loaded in this process (a fresh model cache of its own: later tests keep theirs)
        monkeypatch.setattr(encoder_module, "_SHARED", type(encoder_module._SHARED)())
        again = index_corpus(os_client, corpus, [views["TA"]], minilm, progress=False)
        assert not encoder_module._SHARED  # every vector came from the cache: the weights were never loaded
        assert again.n_loaded == first.n_loaded == 8 and not again.failed
        os_client.indices.refresh(index=again.index)
        hit = os_client.search(index=again.index, body={"size": 1, "_source": ["vec_TA"]})["hits"]["hits"][0]
        assert len(hit["_source"]["vec_TA"]) == minilm.dim
    finally:
        os_client.indices.delete(index=first.index, ignore_unavailable=True)


@dataclass
class MeetsFirst(CorpusWrapper):
    """The corpus, but its records are handed out only once every load of the barrier has read what the
    index held: two loads that both found it empty."""

    corpus: object
    barrier: object

    def records(self, columns=None):
        self.barrier.wait(timeout=120)
        yield from self.corpus.records(columns)


def test_two_concurrent_loads_report_what_each_did(os_client, env, views, cleanup):
    """Both loads found the index empty and sent every document: the documents one of them created are
    'already present' for the other, so the two report N loaded between them, not N each."""
    import threading

    from evalctl.indexers.index_layout import BulkSettings, index_name, load_index_settings
    from evalctl.indexers.index_loader import index_corpus
    from evalctl.opensearch.connection import load_settings, make_client

    corpus = env["corpus"]
    name = index_name(corpus.name, None)
    os_client.indices.delete(index=name, ignore_unavailable=True)
    index_corpus(os_client, corpus, [views["T"]], progress=False)  # the index exists: no race to create it
    os_client.delete_by_query(index=name, body={"query": {"match_all": {}}}, refresh=True)
    small_bulks = dataclasses.replace(load_index_settings(), bulk=BulkSettings(max_docs=4))
    barrier, reports, errors = threading.Barrier(2), [], []

    def load():
        try:
            reports.append(index_corpus(make_client(load_settings()), MeetsFirst(corpus, barrier), [views["T"]],
                                        chunk_docs=4, settings=small_bulks, progress=False))
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=load) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert sum(r.n_loaded for r in reports) == N_RECORDS, [(r.n_loaded, r.n_already) for r in reports]
    assert all(r.n_loaded + r.n_already == N_RECORDS and not r.failed for r in reports)
    os_client.indices.refresh(index=name)
    assert os_client.count(index=name)["count"] == N_RECORDS


def test_replicas_a_single_node_cannot_place_are_named(os_client, env, cleanup):
    from evalctl.cli.main import cli

    nodes = os_client.cluster.health()["number_of_data_nodes"]
    runner = CliRunner()
    r = runner.invoke(cli, ["index", "--corpus", env["name"], "--view", "T", "--replicas", str(nodes)])
    assert r.exit_code == 0, r.output
    assert (f"warning: replicas {nodes} (--replicas" in r.output and f"{nodes} data node" in r.output
            and "is yellow" in r.output and f"--replicas {nodes - 1}" in r.output), r.output
    r = runner.invoke(cli, ["index", "--corpus", env["name"], "--view", "T", "--replicas", "0"])
    assert r.exit_code == 0 and "yellow" not in r.output, r.output
