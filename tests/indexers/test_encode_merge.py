"""Encoding spread over machines, end to end (issue 28, item 6): three `evalctl encode --shard i/3` processes, each
with a cache of its own (three machines), on 200 real Lens pizza patents with the offline MiniLM; their caches
merged by `evalctl vectors merge` into a fourth, which `evalctl index` then loads without encoding anything.
A merge that lacks a shard, holds another key or disagrees on a vector is refused (exit 2) naming it, with
nothing written."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import lens_head

pytestmark = [pytest.mark.opensearch, pytest.mark.models]
MODEL = "all-minilm-l6-v2"
VIEW = "T"
N = 3


def _cli(*args):
    from evalctl.cli.main import cli

    return CliRunner().invoke(cli, [str(a) for a in args])


def _entry(cache):
    """The one MiniLM entry of a cache folder."""
    (entry,) = (cache / "embeddings" / MODEL).glob("*/meta.json")
    return entry.parent


def json_key(entry):
    """The cache key a cache folder's entry holds."""
    from evalctl.indexers.embedding_cache import CacheKey

    meta = json.loads((entry / "meta.json").read_text())
    return CacheKey(**{k: v for k, v in meta.items() if k != "format"})


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """Three caches, each holding the corpus and its own shard's vectors, encoded by three processes at once."""
    from evalctl.corpus.importer import import_corpus

    root = tmp_path_factory.mktemp("merge")
    csv = lens_head(root / "lens200.csv", 200)
    name = f"lens-{uuid.uuid4().hex[:6]}"
    mp = pytest.MonkeyPatch()
    mp.setenv("HF_HUB_OFFLINE", "1")
    caches = [root / f"machine{i}" for i in range(N)]
    for cache in caches + [root / "here"]:  # every machine imports the same export
        mp.setenv("EVALCTL_CACHE", str(cache))
        import_corpus("lens", [csv], name=name)
    procs = [subprocess.Popen(
        [sys.executable, "-c", "from evalctl.cli.main import main; main()", "encode", "--corpus", name,
         "--model", MODEL, "--view", VIEW, "--shard", f"{i}/{N}"],
        env={**os.environ, "EVALCTL_CACHE": str(cache)}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True) for i, cache in enumerate(caches)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    mp.setenv("EVALCTL_CACHE", str(root / "here"))
    yield {"root": root, "name": name, "caches": caches, "outs": outs, "mp": mp}
    mp.undo()


def _view_ids(name):
    from evalctl.corpus.store import load_corpus
    from evalctl.corpus.views import load_views
    from evalctl.indexers.encode_corpus import view_texts

    ids, texts, _ = view_texts(load_corpus(name), load_views()[VIEW])
    return dict(zip(ids, texts))


def test_each_process_encoded_only_its_shard(shards):
    from evalctl.indexers.encoder import in_shard

    texts = _view_ids(shards["name"])
    counts = [sum(in_shard(i, (k, N)) for i in texts) for k in range(N)]
    assert sum(counts) == len(texts) and min(counts) > 0
    for k, out in enumerate(shards["outs"]):
        assert f"shard {k}/{N}: {counts[k]} records" in out and ": 0 cached," in out, out


def test_a_missing_shard_is_refused_naming_its_records(shards):
    from evalctl.indexers.encoder import in_shard

    out = _cli("vectors", "merge", "--corpus", shards["name"], "--model", MODEL, "--view", VIEW, *shards["caches"][:2])
    assert out.exit_code == 2, out.output
    assert "are in none of the 2 caches" in out.output and "nothing was merged" in out.output
    named = out.output.split("records e.g. ")[1].split(")")[0].split(", ")
    assert named and all(in_shard(i, (2, N)) for i in named)
    assert not (shards["root"] / "here" / "embeddings").exists()  # nothing written


def test_another_key_and_another_vector_are_refused(shards):
    from evalctl.indexers.embedding_cache import EmbeddingCache, text_hash

    root, caches = shards["root"], shards["caches"]
    # machine 2's entry as if made at float16: its key (and so its folder) differs
    other = root / "float16"
    shutil.copytree(caches[2], other)
    entry = _entry(other)
    meta = json.loads((entry / "meta.json").read_text())
    meta["precision"] = "float16"
    (entry / "meta.json").write_text(json.dumps(meta))
    entry.rename(entry.with_name("f" * 24))
    out = _cli("vectors", "merge", "--corpus", shards["name"], "--model", MODEL, "--view", VIEW, caches[0], caches[1],
               other)
    assert out.exit_code == 2 and "has another key (precision: source has 'float16', this machine 'float32')" in out.output, out.output
    # machine 1 also holding one of machine 0's texts, with another vector
    clash = root / "clash"
    shutil.copytree(caches[1], clash)
    texts = _view_ids(shards["name"])
    mine = EmbeddingCache(json_key(_entry(caches[0])), root=caches[0] / "embeddings")
    doc_id = next(i for i, t in texts.items() if text_hash(t) in mine)
    h = text_hash(texts[doc_id])
    EmbeddingCache(json_key(_entry(clash)), root=clash / "embeddings").commit([h], mine.get([h]) * 0.5)
    out = _cli("vectors", "merge", "--corpus", shards["name"], "--model", MODEL, "--view", VIEW, caches[0], clash,
               caches[2])
    assert out.exit_code == 2 and f"record {doc_id} ({VIEW}):" in out.output and "different vectors" in out.output, out.output
    assert not (root / "here" / "embeddings").exists()


def test_merged_caches_index_without_encoding(shards, os_client):
    from evalctl.indexers.embedding_cache import EmbeddingCache, text_hash
    from evalctl.indexers.encode_options import EncodeOptions
    from evalctl.indexers.encoder import encode_texts
    from evalctl.models import get_model

    name, caches, here = shards["name"], shards["caches"], shards["root"] / "here"
    out = _cli("vectors", "merge", "--corpus", name, "--model", MODEL, "--view", VIEW, *caches)
    assert out.exit_code == 0, out.output
    texts = _view_ids(name)
    distinct = len(set(texts.values()))
    assert f"{len(texts)} records, {distinct} distinct texts: all present; {distinct} merged" in out.output
    merged = EmbeddingCache(json_key(_entry(here)), root=here / "embeddings")
    assert len(merged) == distinct  # each text once
    again = _cli("vectors", "merge", "--corpus", name, "--model", MODEL, "--view", VIEW, *caches)
    assert again.exit_code == 0 and f"0 merged, {distinct} already here" in again.output, again.output
    # the vectors are the ones this machine makes for those texts
    sample = dict(list(texts.items())[:12])
    local = encode_texts(get_model(MODEL), "document", VIEW, list(sample), list(sample.values()),
                         EncodeOptions(progress=False, cache_root=shards["root"] / "local-check")).vectors
    got = merged.get([text_hash(t) for t in sample.values()])
    assert np.abs(local - got).max() < 1e-4

    shards["mp"].setenv("EVALCTL_INDEX_PREFIX", f"merge{uuid.uuid4().hex[:6]}")
    try:
        out = _cli("index", "--corpus", name, "--model", MODEL, "--view", VIEW, "--vectors", "document")
        assert out.exit_code == 0 and "loaded " in out.output, out.output
        runs = EmbeddingCache(json_key(_entry(here)), root=here / "embeddings").runs()
        assert [r for r in runs if r.get("n_encoded")] == [], runs  # the load encoded nothing
        assert [list(r) for r in runs if "merge" in r] and len(runs) == 2  # the two merges, nothing else
        out = _cli("index", "verify", "--corpus", name, "--model", MODEL)
        assert out.exit_code == 0 and "verified" in out.output, out.output
    finally:
        from evalctl.indexers.index_layout import index_name

        os_client.indices.delete(index=index_name(name, MODEL), ignore_unavailable=True)
