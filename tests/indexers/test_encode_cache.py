"""Embedding cache and the encode loop, with a deterministic stand-in encoder (no model needed)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from evalctl.indexers.embedding_cache import EmbeddingCache, EmbeddingCacheError
from evalctl.indexers.encode_options import EncodeOptions, Encoded
from evalctl.indexers.encoder import cache_key, encode_texts, in_shard, parse_shard
from evalctl.models import get_model

SPEC = get_model("bge-small-en-v1.5")  # 384-dim, with a query-only prompt


class FakeEncoder:
    """Vectors derived from (prompt, text); can fail after a number of commits."""

    dim = SPEC.dim
    precision = "float32"

    def __init__(self, fail_after: int | None = None):
        self.fail_after = fail_after
        self.calls = 0
        self.encoded: list[str] = []

    def encode(self, texts, prompt):
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise KeyboardInterrupt("simulated kill")
        self.calls += 1
        self.encoded += texts
        seeds = [int.from_bytes(hashlib.sha256((prompt + t).encode()).digest()[:4], "big") for t in texts]
        vectors = np.stack([np.random.default_rng(s).standard_normal(self.dim) for s in seeds]).astype(np.float32)
        return Encoded(vectors, sum(len(t) > 40 for t in texts))


TEXTS = [f"patent text number {i} " + "x" * (i % 7) * 10 for i in range(50)]
IDS = [f"US{i}" for i in range(50)]


def _run(tmp_path, encoder, role="document", texts=TEXTS, ids=IDS, **kw):
    return encode_texts(SPEC, role, "tac", ids, texts,
                        EncodeOptions(encoder=encoder, commit_every=8, cache_root=tmp_path, progress=False, **kw))


def test_interrupted_run_resumes_without_reencoding(tmp_path):
    dying = FakeEncoder(fail_after=3)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, dying)
    assert len(dying.encoded) == 24  # three committed groups of 8
    rerun = FakeEncoder()
    report = _run(tmp_path, rerun)
    assert report.n_cached == 24 and report.n_encoded == 26
    assert not set(rerun.encoded) & set(dying.encoded)
    fresh = _run(tmp_path / "fresh", FakeEncoder())
    np.testing.assert_array_equal(report.vectors, fresh.vectors)


def test_identical_texts_encoded_once_and_order_kept(tmp_path):
    enc = FakeEncoder()
    texts = ["a claim", "b claim", "a claim", "c claim", "b claim"]
    report = _run(tmp_path, enc, texts=texts, ids=[str(i) for i in range(5)])
    assert report.n_unique == 3 and sorted(enc.encoded) == ["a claim", "b claim", "c claim"]
    np.testing.assert_array_equal(report.vectors[0], report.vectors[2])
    assert not np.array_equal(report.vectors[0], report.vectors[1])


def test_query_and_document_vectors_never_collide(tmp_path):
    doc = _run(tmp_path, FakeEncoder())
    query_enc = FakeEncoder()
    query = _run(tmp_path, query_enc, role="query")
    assert query.prompt == "Represent this sentence for searching relevant passages: " and doc.prompt == ""
    assert len(query_enc.encoded) == 50  # nothing reused from the document cache
    assert query.cache_dir != doc.cache_dir
    assert not np.array_equal(query.vectors, doc.vectors)
    plain = _run(tmp_path, FakeEncoder(), role="query", variant="plain")
    assert plain.cache_dir not in (query.cache_dir, doc.cache_dir)


def test_same_prompt_in_another_role_or_view_reuses_vectors(tmp_path):
    plain = get_model("all-minilm-l6-v2")  # no prompts: a query's vector is its text's document vector
    assert plain.prompt_for("query", task_type="retrieval") == plain.prompt_for("document", task_type="retrieval")

    def run(encoder, role, view, texts):
        return encode_texts(plain, role, view, IDS[: len(texts)], texts,
                            EncodeOptions(encoder=encoder, commit_every=8, cache_root=tmp_path, progress=False))

    doc = run(FakeEncoder(), "document", "TA", TEXTS[:30])
    enc = FakeEncoder()
    query = run(enc, "query", "T", TEXTS[20:50])  # 10 texts are documents' texts, 20 are new
    assert sorted(enc.encoded) == sorted(TEXTS[30:50])
    assert (query.n_reused, query.n_cached, query.n_encoded) == (10, 10, 20)
    assert query.cache_dir != doc.cache_dir
    np.testing.assert_array_equal(query.vectors[:10], doc.vectors[20:30])
    again = FakeEncoder()
    assert run(again, "query", "T", TEXTS[20:50]).n_reused == 0 and again.encoded == []


def test_fully_cached_rerun_encodes_nothing_and_lookup_by_text(tmp_path):
    first = _run(tmp_path, FakeEncoder())
    again = FakeEncoder()
    second = _run(tmp_path, again)
    assert again.encoded == [] and second.n_cached == 50
    np.testing.assert_array_equal(first.vectors, second.vectors)
    cache = EmbeddingCache(cache_key(SPEC, "document", "tac", None, prompt=""), root=tmp_path)
    vectors, found = cache.lookup([TEXTS[3], "never encoded"])
    assert found.tolist() == [True, False]
    np.testing.assert_array_equal(vectors[0], first.vectors[3])
    assert np.isnan(vectors[1]).all()


def _shards(report):
    return sorted(report.cache_dir.glob("*.vectors.npy"))


def test_corrupt_shard_is_reported_not_used(tmp_path):
    report = _run(tmp_path, FakeEncoder())
    victim = _shards(report)[0]
    data = bytearray(victim.read_bytes())
    data[-8:] = b"\x00\x00\xc0\x7f" * 2  # flip the last values (NaN bit patterns)
    victim.write_bytes(bytes(data))
    with pytest.raises(EmbeddingCacheError, match="checksum|non-finite"):
        _run(tmp_path, FakeEncoder())
    victim.write_bytes(bytes(data[: len(data) // 2]))  # truncated file
    with pytest.raises(EmbeddingCacheError, match="corrupt"):
        _run(tmp_path, FakeEncoder())


def test_wrong_dimension_or_foreign_shard_is_reported(tmp_path):
    report = _run(tmp_path, FakeEncoder())
    victim = _shards(report)[0]
    np.save(victim, np.zeros((8, 12), dtype=np.float32))
    with pytest.raises(EmbeddingCacheError, match="12-dim"):
        _run(tmp_path, FakeEncoder())
    hashes = next(report.cache_dir.glob("*.hashes.npy"))
    hashes.rename(hashes.with_name("00000000" + hashes.name[8:]))  # sorts before the damaged shard
    with pytest.raises(EmbeddingCacheError, match="another cache key"):
        _run(tmp_path, FakeEncoder())


def test_meta_mismatch_is_reported(tmp_path):
    report = _run(tmp_path, FakeEncoder())
    meta = report.cache_dir / "meta.json"
    meta.write_text(meta.read_text().replace('"bge-small-en-v1.5"', '"other-model"'))
    with pytest.raises(EmbeddingCacheError, match="another key"):
        _run(tmp_path, FakeEncoder())


def test_empty_texts_are_refused_with_the_id(tmp_path):
    with pytest.raises(ValueError, match="'US1'"):
        _run(tmp_path, FakeEncoder(), texts=["ok", "  "], ids=["US0", "US1"])


def test_shards_split_ids_stably_and_completely():
    assert parse_shard("1/3") == (1, 3)
    for bad in ("3/3", "x", "1/0"):
        with pytest.raises(ValueError):
            parse_shard(bad)
    parts = [[i for i in IDS if in_shard(i, (k, 3))] for k in range(3)]
    assert sorted(sum(parts, [])) == sorted(IDS) and all(parts)


def test_swapped_rows_of_a_hashes_file_are_reported_not_used(tmp_path):
    """Two rows of a shard's hashes file swapped would give each text the other's vector; the shard's
    checksum covers hashes and vectors in row order, so the swap is refused by name."""
    report = _run(tmp_path, FakeEncoder())
    hashes_file = sorted(report.cache_dir.glob("*.hashes.npy"))[0]
    hashes = np.load(hashes_file)
    hashes[[0, 1]] = hashes[[1, 0]]
    with open(hashes_file, "wb") as f:  # the same name, so only the content tells
        np.save(f, hashes)
    with pytest.raises(EmbeddingCacheError, match=f"row order of {hashes_file.name}"):
        _run(tmp_path, FakeEncoder())
