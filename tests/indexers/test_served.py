"""Served models against a real embedding server (infinity-emb serving the bundled all-MiniLM-L6-v2 on the CPU,
the `infinity_server` fixture; skipped with the reason where `make infinity` has not installed it): vectors equal
to local encoding of the same folder (with a prompt put before the texts here), a retrieval run through the
endpoint equal to the local one, a server killed mid-encode and started again (the rerun sends only what was not
answered), 429s and resets through the fault proxy (retried, announced; a lasting 429 fails naming the endpoint),
and the key in no output and no written file."""

from __future__ import annotations

import csv
import dataclasses
import json
import re
import threading
import time
import uuid

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import private_cache
from fault_proxy import FaultProxy
from retrieval_data import write_known_item_beir
from served_server import SERVED_NAME
from real_data import USPTO_60

pytestmark = [pytest.mark.models]

KEY_ENV = "EVALCTL_TEST_EMBEDDINGS_KEY"
GRANTS = USPTO_60
PROMPT = "Represent this patent claim for finding related patents: "
# A user's spec of the served model: all-MiniLM-L6-v2's facts, and where it is served.
USER_SPEC = """\
models:
  - id: {id}
    hf_id: sentence-transformers/all-MiniLM-L6-v2
    revision: 8b3219a92973c328a8e22fadcfa821b5dc75636a
    family: sbert-all
    params_m: 22.7
    dim: {dim}
    max_seq_length: 256
    pooling: mean
    normalize: true
    similarity: cosine
    dtype: float32
    named_by_study: false
    source: all-MiniLM-L6-v2 served by infinity-emb on this machine
    prompt_variants:
      plain: {{}}
      claims: {{query: "{prompt}"}}
    endpoint:
      url: {url}
      model: {served}
      revision: infinity-emb 0.0.78, cpu, float32
      api_key_env: {key_env}
      max_texts: 16
      concurrency: 2
"""


def patent_texts() -> list[str]:
    """120 real patent texts of the bundled USPTO sample: each grant's title with its abstract, and its claims
    (most past the model's 256 tokens: both sides truncate them)."""
    csv.field_size_limit(1 << 24)
    with open(GRANTS, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return [f"{r['patent_title']}\n{r['abstract']}" for r in rows] + [r["claims_text"] for r in rows]


@pytest.fixture(scope="module")
def served(tmp_path_factory, infinity_server):
    """A private cache and results store, the server's key in KEY_ENV, and the served model's spec saved where
    evalctl reads user specs beside the built-in ones; the local MiniLM's vectors of the patent texts."""
    from evalctl.indexers.encode_options import EncodeOptions
    from evalctl.indexers.encoder import encode_texts
    from evalctl.models import get_model

    root = tmp_path_factory.mktemp("served")
    mp = private_cache(root)
    mp.setenv(KEY_ENV, infinity_server.api_key)
    spec = get_model(user_spec({"server": infinity_server}, f"minilm-served-{uuid.uuid4().hex[:6]}"))
    local = dataclasses.replace(get_model("all-minilm-l6-v2"), prompt_variants=spec.prompt_variants)
    texts = patent_texts()
    ids = [str(i) for i in range(len(texts))]
    reference = {role: encode_texts(local, role, "TA", ids, texts, EncodeOptions(
        variant="claims", device="cpu", cache_root=root / "local", progress=False)).vectors
        for role in ("document", "query")}
    yield {"spec": spec, "local": local, "texts": texts, "ids": ids, "reference": reference, "root": root,
           "server": infinity_server, "outputs": []}
    mp.undo()


def user_spec(served: dict, model_id: str, dim: int = 384) -> str:
    """A user's own models file for the served model (the suite points EVALCTL_MODELS_DIR at its own folder)."""
    from evalctl.paths import user_models_dir

    folder = user_models_dir()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{model_id}.yaml").write_text(USER_SPEC.format(
        id=model_id, prompt=PROMPT, url=served["server"].url, served=SERVED_NAME, key_env=KEY_ENV, dim=dim))
    return model_id


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def _via(spec, proxy: FaultProxy, **limits):
    """The spec with its endpoint behind the fault proxy, and other limits."""
    return dataclasses.replace(spec, endpoint=dataclasses.replace(spec.endpoint, url=f"{proxy.url}/v1", **limits))


def _sent(answered: list[tuple[str, bytes, int]], status: int = 200) -> list[str]:
    """The texts of the embedding requests the server answered with `status`."""
    return [t for line, body, s in answered if line.endswith("/embeddings") and s == status
            for t in json.loads(body)["input"]]


def test_served_vectors_equal_local_encoding(served, tmp_path, capsys):
    """Documents (no prompt) and queries (the variant's prompt, put before each text here) through the endpoint
    give the local model's vectors; the cache entry is keyed by the served name and revision label, and its run
    record counts the requests and the tokens the server reported."""
    from evalctl.indexers.encode_options import EncodeOptions
    from evalctl.indexers.encoder import encode_texts

    spec, texts, ids = served["spec"], served["texts"], served["ids"]
    for role in ("document", "query"):
        report = encode_texts(spec, role, "TA", ids, texts, EncodeOptions(variant="claims", cache_root=tmp_path))
        assert report.prompt == ("" if role == "document" else PROMPT)
        cos = _cosines(report.vectors, served["reference"][role])
        assert cos.min() >= 0.9999, (role, cos.min(), int(cos.argmin()))
        assert report.n_encoded == len(texts)
    meta = json.loads((report.cache_dir / "meta.json").read_text())
    assert meta["versions"] == f"served {SERVED_NAME}, revision infinity-emb 0.0.78, cpu, float32"
    assert meta["model_id"] == spec.id and meta["precision"] == "float32"
    (run,) = [json.loads(p.read_text()) for p in (report.cache_dir / "runs").glob("*.json")]
    assert run["endpoint"] == served["server"].url and run["served_model"] == SERVED_NAME
    assert run["requests"] >= len(texts) / spec.endpoint.max_texts and run["retries"] == 0
    assert run["tokens"] > 256 * 40  # tokens, not characters (the server counts with the tokenizer)
    # the run's cost counts the server's tokens, and says where they were encoded
    assert run["cost"]["tokens"] == run["tokens"] and run["cost"]["texts"] == len(texts)
    assert (run["cost"]["device"], run["cost"]["device_name"], run["cost"]["torch_threads"]) == (
        "served", served["server"].url, None)
    again = encode_texts(spec, "query", "TA", ids, texts, EncodeOptions(variant="claims", cache_root=tmp_path))
    assert again.n_encoded == 0 and np.array_equal(again.vectors, report.vectors)
    served["outputs"].append(capsys.readouterr())


def test_retrieval_through_the_endpoint_equals_the_local_run(served, os_client):
    """`evalctl index` and `evalctl retrieve` with the served model, as a user types them, score every query as
    the local all-MiniLM-L6-v2 does; the index records where the vectors came from (without the key)."""
    from evalctl.cli.main import cli
    from evalctl.corpus.importer import import_corpus
    from evalctl.indexers.index_layout import corpus_alias, index_name
    from evalctl.indexers.index_loader import read_manifest
    from evalctl.evaluators.scoring.runs import load_run

    corpus = import_corpus("beir", [write_known_item_beir(served["root"] / "beir", 30)],
                           name=f"served-ki-{uuid.uuid4().hex[:8]}").corpus
    runner = CliRunner()
    runs = {}
    wrong = user_spec(served, f"{served['spec'].id}-wide", dim=768)  # the server answers 384-dim vectors
    res = runner.invoke(cli, ["index", "--corpus", corpus.name, "--model", wrong, "--view", "A"])
    assert res.exit_code == 2 and "answered vectors of shape (1, 384), its spec says dim 768" in res.output, res.output
    assert not os_client.indices.exists(index=index_name(corpus.name, wrong))  # refused before any index exists
    try:
        for model in (served["spec"].id, "all-minilm-l6-v2"):
            res = runner.invoke(cli, ["index", "--corpus", corpus.name, "--model", model, "--view", "A"])
            assert res.exit_code == 0, res.output
            served["outputs"].append(res.output)
            res = runner.invoke(cli, ["retrieve", "--corpus", corpus.name, "--model", model, "--view", "A",
                                      "--method", "dense", "--qrels", "given", "--split", "all"])
            assert res.exit_code == 0, res.output
            served["outputs"].append(res.output)
            runs[model] = load_run(re.search(r"run (\S+)  \(", res.output).group(1))
        manifest = read_manifest(os_client, index_name(corpus.name, served["spec"].id))
        served["outputs"].append(json.dumps(manifest))
    finally:
        os_client.indices.delete(index=f"{corpus_alias(corpus.name)}--*", ignore_unavailable=True)
    assert manifest["endpoint"] == served["server"].url
    assert manifest["encoding_versions"].startswith(f"served {SERVED_NAME}, revision ")
    remote, local = runs[served["spec"].id].ranking, runs["all-minilm-l6-v2"].ranking
    assert remote.keys() == local.keys() and len(remote) == 31
    for q in local:
        assert [d for d, _ in remote[q]] == [d for d, _ in local[q]], q
        assert np.allclose([s for _, s in remote[q]], [s for _, s in local[q]], atol=1e-5), q


def test_a_server_killed_mid_encode_loses_nothing_and_nothing_is_sent_twice(served, tmp_path):
    """The server dies (SIGKILL) while requests are in flight: the encode fails naming the endpoint, and the cache
    holds exactly the texts the server answered; started again, the rerun sends only the others and finishes."""
    from evalctl.indexers.encode_options import EncodeOptions
    from evalctl.indexers.encoder import encode_texts
    from evalctl.indexers.served_encoder import EndpointError

    server, texts, ids = served["server"], served["texts"], served["ids"]
    options = EncodeOptions(cache_root=tmp_path, commit_every=40, progress=False)
    try:
        with FaultProxy(server.url, keep_bodies=True) as proxy:
            spec = _via(served["spec"], proxy, max_texts=4, retries=2, backoff_s=0.2)

            def kill_after_five_answers():
                deadline = time.monotonic() + 60
                while len(_sent(proxy.answered)) < 20 and time.monotonic() < deadline:
                    time.sleep(0.005)
                server.kill()

            killer = threading.Thread(target=kill_after_five_answers)
            killer.start()
            with pytest.raises(EndpointError, match=re.escape(f"{proxy.url}/v1 failed 3 tries") + ".*run again") as failed:
                encode_texts(spec, "document", "TA", ids, texts, options)
            killer.join()
            first = _sent(proxy.answered)
        assert 20 <= len(first) < len(texts) and len(set(first)) == len(first), len(first)
        assert served["server"].api_key not in str(failed.value)
        server.start()
        with FaultProxy(server.url, keep_bodies=True) as proxy:
            report = encode_texts(_via(spec, proxy), "document", "TA", ids, texts, options)
            second = _sent(proxy.answered)
    finally:
        if not server.running:
            server.start()
    assert report.n_cached == len(first) and report.n_encoded == len(texts) - len(first)
    assert not set(first) & set(second), "a text answered before the kill was sent again"
    assert sorted(first + second) == sorted(texts)  # each text served exactly once
    assert _cosines(report.vectors, served["reference"]["document"]).min() >= 0.9999


def test_429_and_resets_are_retried_and_announced_and_a_lasting_429_fails_clearly(served, tmp_path, capsys):
    from evalctl.indexers.encode_options import EncodeOptions
    from evalctl.indexers.encoder import encode_texts
    from evalctl.indexers.served_encoder import EndpointError

    texts, ids = served["texts"][:40], served["ids"][:40]
    options = EncodeOptions(cache_root=tmp_path, progress=False)
    with FaultProxy(served["server"].url) as proxy:
        spec = _via(served["spec"], proxy, max_texts=8, retries=3, backoff_s=0.05)
        proxy.fail("429", times=2, only="/embeddings").fail("reset", times=1, only="/embeddings")
        report = encode_texts(spec, "document", "TA", ids, texts, options)
        assert len(proxy.injected) == 3 and report.n_encoded == 40
        err = capsys.readouterr().err
        assert err.count(f"endpoint {proxy.url}/v1: HTTP 429; retry ") == 2, err
        assert f"endpoint {proxy.url}/v1: ProtocolError" in err and "retry 1/3" in err, err
        assert _cosines(report.vectors, served["reference"]["document"][:40]).min() >= 0.9999
        (run,) = [json.loads(p.read_text()) for p in (report.cache_dir / "runs").glob("*.json")]
        assert run["retries"] == 3

        proxy.fail("429", times=1000, only="/embeddings")
        with pytest.raises(EndpointError) as failed:  # queries with their prompt: nothing of them cached
            encode_texts(spec, "query", "TA", ids, texts, dataclasses.replace(options, variant="claims"))
        message = str(failed.value)
        assert f"{proxy.url}/v1 failed 4 tries (last: HTTP 429)" in message and "run again to go on" in message
        served["outputs"].append(message)
        served["outputs"].append(capsys.readouterr())


def test_the_key_is_in_no_output_and_no_written_file(served, monkeypatch):
    """`evalctl encode` with the served model, as a user types it (and the outputs of the tests before: encode,
    index, retrieve, retries, failures): the key is in none of their outputs, nor in any file under the cache
    (embedding cache, corpora, specs) or the results store; a wrong key's failure does not show it either, and a
    missing one is refused naming its variable."""
    from evalctl.cli.main import cli
    from evalctl.corpus.importer import import_corpus

    key, model = served["server"].api_key, served["spec"].id
    corpus = import_corpus("beir", [write_known_item_beir(served["root"] / "beir-key", 12)],
                           name=f"served-key-{uuid.uuid4().hex[:8]}").corpus
    runner = CliRunner()
    monkeypatch.delenv(KEY_ENV)
    missing = runner.invoke(cli, ["encode", "--corpus", corpus.name, "--model", model, "--view", "TA"])
    assert missing.exit_code == 2 and f"environment variable {KEY_ENV}, which is not set" in missing.output, missing.output
    wrong = "wrong-" + uuid.uuid4().hex
    monkeypatch.setenv(KEY_ENV, wrong)
    failed = runner.invoke(cli, ["encode", "--corpus", corpus.name, "--model", model, "--view", "TA"])
    assert failed.exit_code == 1 and "HTTP 401" in failed.output and KEY_ENV in failed.output, failed.output
    assert wrong not in failed.output
    monkeypatch.setenv(KEY_ENV, key)
    res = runner.invoke(cli, ["encode", "--corpus", corpus.name, "--model", model, "--view", "TA"])
    assert res.exit_code == 0 and "12 encoded" in res.output, res.output
    outputs = [res.output, failed.output, *map(str, served["outputs"])]
    assert not [o for o in outputs if key in o]
    files = [p for p in served["root"].rglob("*") if p.is_file()]
    assert any(p.name == "meta.json" for p in files) and any(p.parent.name == "runs" for p in files)
    assert not [p for p in files if key.encode() in p.read_bytes()]
