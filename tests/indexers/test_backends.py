"""The runtime's inference backend (torch, onnx, openvino) as part of a vector's identity: the cache key and the
index's result identity change with it, torch's stay what they were before backends existed; a served model and a
backend whose packages do not import are refused naming the setting. With optimum's onnx packages importable, the
onnx vectors of all-MiniLM-L6-v2 match torch's on real titles and fill their own cache entry."""

from __future__ import annotations

import csv
import dataclasses
import importlib
import json
from pathlib import Path

import numpy as np
import pytest

from evalctl.indexers.backends import BackendUnavailable
from evalctl.indexers.embedding_cache import CacheKey, EmbeddingCache
from evalctl.indexers.encode_options import EncodeOptions
from evalctl.indexers.encoder import cache_key, encode_texts
from evalctl.indexers.index_loader import result_identity
from evalctl.indexers.runtime import Runtime, runtime_devices, using
from evalctl.models import Endpoint, get_model

from tests.conftest import private_cache

REPO = Path(__file__).resolve().parents[2]
GRANTS = REPO / "samples" / "uspto-grants-2019" / "patent_grants_60.csv"
SPEC = get_model("all-minilm-l6-v2")
KEY = dict(model_id="m", hf_id="org/m", revision="a" * 40, prompt_variant="plain", prompt="", role="document",
           view="tac", dim=384, precision="float32", versions="torch 2.15, transformers 5.24, sentence-transformers 6.3")


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


ONNX = _importable("optimum.onnxruntime")


def test_a_backend_change_changes_the_vector_identity():
    torch, onnx = CacheKey(**KEY), CacheKey(**KEY, backend="onnx")
    assert onnx.digest() != torch.digest() != CacheKey(**KEY, backend="openvino").digest()
    assert onnx.meta()["backend"] == "onnx" and "backend" not in torch.meta()
    manifest = {"model": "m", "precision": "float32", "encoding_versions": KEY["versions"]}
    assert "backend" not in result_identity(manifest)  # a torch index's results keep their identity
    assert result_identity({**manifest, "backend": "onnx"})["backend"] == "onnx"


def test_an_entry_made_before_backends_were_keyed_is_torch_s(tmp_path):
    """meta.json as the code before backends wrote it (format 2, no backend field): a torch key opens it under its
    old digest and reads its vectors; an onnx key is another entry."""
    old = CacheKey(**KEY)
    entry = tmp_path / "m" / old.digest()
    entry.mkdir(parents=True)
    (entry / "meta.json").write_text(json.dumps({"format": 2, **KEY}), encoding="utf-8")
    cache = EmbeddingCache(CacheKey(**KEY, backend="torch"), root=tmp_path)
    assert cache.dir == entry
    cache.commit([b"h" * 32], np.ones((1, 384), np.float32))
    assert EmbeddingCache(CacheKey(**KEY, backend="onnx"), root=tmp_path).dir != entry
    assert len(EmbeddingCache(CacheKey(**KEY), root=tmp_path)) == 1


def test_a_served_model_refuses_a_non_torch_backend(tmp_path):
    served = dataclasses.replace(SPEC, offline=None, endpoint=Endpoint(url="http://127.0.0.1:9/v1", model="m",
                                                                     revision="r"))
    with pytest.raises(BackendUnavailable, match="served at .*runtime backend onnx .*leave backend unset"):
        encode_texts(served, "document", "tac", ["1"], ["a text"],
                     EncodeOptions(runtime=Runtime(backend="onnx"), cache_root=tmp_path, progress=False))
    assert not list(tmp_path.iterdir())  # refused before any cache entry was made


def test_a_backend_runs_on_the_cpu_in_float32_only():
    assert runtime_devices(Runtime(backend="onnx")) == ["cpu"]
    with pytest.raises(ValueError, match="backend onnx runs on the CPU only, not on device 'cuda'"):
        runtime_devices(Runtime(backend="onnx", device="cuda"))
    with pytest.raises(ValueError, match="backend openvino runs in float32 only, not precision float16"):
        runtime_devices(Runtime(backend="openvino", precision="float16"))
    with pytest.raises(ValueError, match="runtime backend 'tensorrt' is not one of torch, onnx, openvino"):
        Runtime(backend="tensorrt")


@pytest.mark.skipif(ONNX, reason="optimum.onnxruntime imports here: the refusal cannot happen")
def test_a_backend_whose_packages_do_not_import_is_refused_naming_them(tmp_path):
    with using(Runtime(backend="onnx")), pytest.raises(BackendUnavailable) as e:
        cache_key(SPEC, "document", "tac", None, "")
    assert "runtime backend onnx needs optimum.onnxruntime" in str(e.value)
    assert "pip install 'optimum-onnx[onnxruntime]'" in str(e.value)


@pytest.mark.models
@pytest.mark.skipif(not ONNX, reason="optimum.onnxruntime does not import here (optimum-onnx needs transformers "
                    "< 4.58; sentence-transformers 6 needs transformers 5)")
def test_onnx_vectors_match_torch_on_real_titles_in_their_own_entry(tmp_path):
    with open(GRANTS, newline="", encoding="utf-8") as f:
        titles = [r["patent_title"] for r in csv.DictReader(f)][:50]
    ids = [str(i) for i in range(len(titles))]
    mp = private_cache(tmp_path)
    try:
        runs = {b: encode_texts(SPEC, "document", "title", ids, titles,
                                EncodeOptions(runtime=Runtime(backend=b, device="cpu"), progress=False))
                for b in ("torch", "onnx")}
        again = encode_texts(SPEC, "document", "title", ids, titles,
                             EncodeOptions(runtime=Runtime(backend="onnx", device="cpu"), progress=False))
        exported = list((tmp_path / "cache" / "exported" / SPEC.id).iterdir())
    finally:
        mp.undo()
    assert runs["onnx"].cache_dir != runs["torch"].cache_dir and runs["onnx"].n_encoded == 50
    assert again.n_encoded == 0 and len(exported) == 1  # cached vectors; one export
    cosine = np.sum(runs["onnx"].vectors * runs["torch"].vectors, axis=1)  # normalised vectors
    assert cosine.min() >= 0.999, cosine.min()
