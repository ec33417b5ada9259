"""Cost kept beside quality (issue 42): `evalctl encode` records what encoding took (texts, tokens, seconds, rates,
device, precision, threads, hours per million patents) in the cache entry's run records, a run that encodes
nothing records nothing and keeps the entry's key; a load records its index's store and memory cost in the
manifest, measured again when a later load adds documents. Real MiniLM, real USPTO grants, the shared node."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

import pytest
from click.testing import CliRunner

from conftest import private_cache
from corpus_wrapper import CorpusWrapper
from test_index import write_rows

pytestmark = [pytest.mark.opensearch, pytest.mark.models]

MODEL = "all-minilm-l6-v2"
N_RECORDS = 12


@pytest.fixture(scope="module")
def grants(tmp_path_factory):
    from evalctl.corpus.importer import import_corpus

    root = tmp_path_factory.mktemp("encode-cost")
    mp = private_cache(root)
    name = f"cost-{uuid.uuid4().hex[:8]}"
    corpus = import_corpus("uspto", [write_rows(root / "grants.csv", N_RECORDS)], name=name).corpus
    yield corpus
    mp.undo()


def _encode(*args: str):
    from evalctl.cli.main import cli

    r = CliRunner().invoke(cli, ["encode", "--view", "TA", "--model", MODEL, "--device", "cpu", *args])
    assert r.exit_code == 0, r.output
    return r.output


def _entry(output: str):
    from pathlib import Path

    from evalctl.indexers.embedding_cache import read_runs

    cache_dir = Path(output.rsplit("cache: ", 1)[1].strip())
    return cache_dir, json.loads((cache_dir / "meta.json").read_text()), read_runs(cache_dir)


def test_encoding_records_its_cost_and_a_cache_hit_keeps_it_and_the_key(grants):
    from evalctl.indexers.encode_cost import entry_cost

    first = _encode("--corpus", grants.name, "--shard", "0/2")  # part of the view: the next run adds the rest
    cache_dir, meta, runs = _entry(first)
    (run,) = runs
    cost = run["cost"]
    assert cost["texts"] == run["n_encoded"] > 0
    assert cost["tokens"] > cost["texts"] and cost["texts_per_s"] > 0 and cost["tokens_per_s"] > 0
    assert cost["hours_per_million_patents"] == pytest.approx(cost["seconds"] / cost["texts"] * 1e6 / 3600, rel=1e-3)
    assert cost["device"] == "cpu" and cost["device_name"] and cost["precision"] == "float32"
    assert cost["native_bf16"] is False  # the suite runs as on a CPU without it (tests/conftest.py)
    assert cost["torch_threads"] >= 1 and cost["max_batch_tokens"] > 0
    assert "cost of this run:" in first and "h per million patents (extrapolated)" in first

    rest = _encode("--corpus", grants.name)  # the whole view: encodes only the other shard's texts
    again_dir, again_meta, runs = _entry(rest)
    assert (again_dir, again_meta) == (cache_dir, meta)  # another timing, the same entry and key
    (total,) = entry_cost(runs)
    assert total["runs"] == 2 and total["texts"] == sum(r["cost"]["texts"] for r in runs) == sum(
        r["n_encoded"] for r in runs)
    assert total["tokens"] == sum(r["cost"]["tokens"] for r in runs)
    # exactly the model's own count of the view's texts, cut at its max_seq_length, padding not counted
    from evalctl.corpus.views import load_views
    from evalctl.indexers.encode_corpus import view_texts
    from evalctl.indexers.encoder import shared_model
    from evalctl.models import get_model

    _, texts, _ = view_texts(grants, load_views()["TA"])
    model = shared_model(get_model(MODEL), "cpu", "auto", "float32")  # the one the CLI loaded
    assert total["tokens"] == int(model.tokenize(texts)["attention_mask"].sum())
    assert "cost of the cached vectors:" in rest and "over 2 runs" in rest

    hit = _encode("--corpus", grants.name)  # everything cached: nothing encoded, nothing recorded
    hit_dir, hit_meta, hit_runs = _entry(hit)
    assert (hit_dir, hit_meta, hit_runs) == (cache_dir, meta, runs)
    assert "cost of this run" not in hit and "over 2 runs" in hit  # the earlier measurement is shown
    assert "cost" not in meta and "cost" not in json.dumps(meta)  # never part of the key


@dataclass
class FirstRecords(CorpusWrapper):
    corpus: object
    n: int

    def records(self, columns=None):
        return (r for i, r in enumerate(self.corpus.records(columns)) if i < self.n)


def test_index_manifest_records_cost_and_a_load_that_adds_documents_measures_again(os_client, grants):
    from evalctl.cli.main import cli
    from evalctl.corpus.views import load_views
    from evalctl.indexers.index_loader import index_corpus, read_manifest, result_identity
    from evalctl.models import get_model

    model, views = get_model(MODEL), [load_views()["TA"]]
    try:
        rep = index_corpus(os_client, FirstRecords(grants, 5), views, model, progress=False)
        first = read_manifest(os_client, rep.index)
        cost = first["cost"]
        assert cost["documents"] == 5 and cost["store_bytes"] > 0 and cost["store_bytes_per_patent"] > 0
        assert cost["layout"] == {"engine": "lucene", "encoder": "flat", "data_type": "float",
                                  "vectors_in_source": True}
        assert cost["vector_fields"] == 1 and cost["dim"] == model.dim and cost["warmed"] is True
        # float32 vectors: at least 4 bytes a component in the vector file
        assert cost["vector_bytes_per_dimension"] >= 4 and cost["store_bytes_per_dimension"] > 4
        assert cost["vector_files_bytes"]["vex"] == cost["hnsw_graph_file_bytes"] > 0
        # Lucene's graphs are not in the k-NN plugin's native memory on OpenSearch 3.5: null, with the reason
        assert cost["native_memory_bytes"] is None and "engine lucene" in cost["native_memory_null_because"]

        again = index_corpus(os_client, FirstRecords(grants, 5), views, model, progress=False)
        assert again.n_loaded == 0 and read_manifest(os_client, rep.index)["cost"] == cost  # nothing added: kept
        index_corpus(os_client, grants, views, model, progress=False)
        grown = read_manifest(os_client, rep.index)
        assert grown["cost"]["documents"] == N_RECORDS and grown["cost"]["store_bytes"] != cost["store_bytes"]
        assert result_identity(grown) == result_identity(first)  # a measurement, not part of what the index is

        r = CliRunner().invoke(cli, ["index", "status"])
        assert r.exit_code == 0, r.output
        shown = r.output.split(rep.index, 1)[1]
        assert f"cost ({grown['cost']['measured_at']}): {N_RECORDS} documents" in shown
        assert "native memory none recorded (engine lucene" in shown
    finally:
        os_client.indices.delete(index=f"*-{grants.name}--*", ignore_unavailable=True)
