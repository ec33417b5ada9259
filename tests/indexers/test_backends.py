"""The runtime's inference backend (torch, onnx, openvino) as part of a vector's identity: the cache key and the
index's result identity change with it, torch's stay what they were before backends existed; a served model and a
backend whose packages do not import are refused naming the setting. Where optimum's onnx or openvino packages import,
that backend's vectors of all-MiniLM-L6-v2 match torch's on real titles, fill their own cache entry, and the model is
exported once."""

from __future__ import annotations

import csv
import dataclasses
import importlib
import json
from pathlib import Path

import numpy as np
import pytest

from evalctl.config_files import SpecError, build
from evalctl.indexers import model_loader
from evalctl.indexers.backends import BackendUnavailable
from evalctl.indexers.embedding_cache import CacheKey, EmbeddingCache
from evalctl.indexers.encode_options import EncodeOptions
from evalctl.indexers.encoder import cache_key, encode_texts
from evalctl.indexers.index_loader import result_identity
from evalctl.indexers.runtime import Runtime, runtime_devices, using
from evalctl.models import Endpoint, get_model

from conftest import private_cache
from real_data import USPTO_60

REPO = Path(__file__).resolve().parents[2]
GRANTS = USPTO_60
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
# the backends that can run here (none in the project's venv: see docs/performance.md, CPU inference backends)
RUNNABLE = [b for b, module in (("onnx", "optimum.onnxruntime"), ("openvino", "optimum.intel.openvino"))
            if _importable(module)]


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
    # a study spec's runtime section, read as `evalctl run` reads it
    assert build(Runtime, {"backend": "openvino"}, "spec.yaml: runtime").backend == "openvino"
    with pytest.raises(SpecError, match="spec.yaml: runtime.backend: 'tensorrt' is not one of"):
        build(Runtime, {"backend": "tensorrt"}, "spec.yaml: runtime")


@pytest.mark.skipif(ONNX, reason="optimum.onnxruntime imports here: the refusal cannot happen")
def test_a_backend_whose_packages_do_not_import_is_refused_naming_them(tmp_path):
    with using(Runtime(backend="onnx")), pytest.raises(BackendUnavailable) as e:
        cache_key(SPEC, "document", "tac", None, prompt="")
    assert "runtime backend onnx needs optimum.onnxruntime" in str(e.value)
    assert "pip install 'optimum-onnx[onnxruntime]'" in str(e.value)


@pytest.mark.models
@pytest.mark.skipif(not RUNNABLE, reason="neither optimum.onnxruntime nor optimum.intel.openvino imports here "
                    "(optimum-onnx 0.1 needs transformers < 4.58, optimum-intel 2.2 transformers < 5.6)")
def test_backend_vectors_match_torch_on_real_titles_in_their_own_entry(tmp_path, monkeypatch):
    with open(GRANTS, newline="", encoding="utf-8") as f:
        titles = [r["patent_title"] for r in csv.DictReader(f)][:50]
    ids = [str(i) for i in range(len(titles))]
    mp = private_cache(tmp_path)
    try:
        backend = RUNNABLE[0]
        runs = {b: encode_texts(SPEC, "document", "title", ids, titles,
                                EncodeOptions(runtime=Runtime(backend=b, device="cpu"), progress=False))
                for b in ("torch", backend)}
        exported = list((tmp_path / "cache" / "exported" / SPEC.id).iterdir())
        again = encode_texts(SPEC, "document", "title", ids, titles[:49] + ["A pizza oven with a rotating stone"],
                             EncodeOptions(runtime=Runtime(backend=backend, device="cpu"), progress=False))
        after = list((tmp_path / "cache" / "exported" / SPEC.id).iterdir())
        key = cache_key(SPEC, "document", "title", None, prompt="", precision="float32", backend=backend)
        record = EmbeddingCache(key).runs()

        def no_export(*args, **kwargs):
            raise AssertionError("exported again")

        monkeypatch.setattr(model_loader, "_load_route", no_export)  # a fresh load must come from the cached export
        assert model_loader.load_model(SPEC, device="cpu", backend=backend).get_embedding_dimension() == 384
    finally:
        mp.undo()
    assert runs[backend].cache_dir != runs["torch"].cache_dir and runs[backend].n_encoded == 50
    assert again.n_encoded == 1 and exported == after and len(exported) == 1  # loaded from the one export
    assert [r["backend"] for r in record] == [backend, backend] and backend in record[0]["versions"]
    cosine = np.sum(runs[backend].vectors * runs["torch"].vectors, axis=1)  # normalised vectors
    assert cosine.min() >= 0.999, cosine.min()


@pytest.mark.skipif(ONNX, reason="optimum.onnxruntime imports here: the refusal cannot happen")
def test_cli_encode_refuses_an_unimportable_backend_with_exit_2(monkeypatch, tmp_path):
    """`evalctl encode --backend onnx` (corpus and view glue as stand-ins, as test_encode_models does): exit 2, the
    message names the setting and the package, and nothing was written to the cache."""
    import types

    from click.testing import CliRunner

    import evalctl.indexers.encode_corpus as encoding
    from evalctl.cli.main import cli

    records = [types.SimpleNamespace(id="US1", text="A pizza oven with a rotating stone")]
    corpus = types.SimpleNamespace(name="grants", path=None, manifest={"content_hash": "abc123"},
                                   records=lambda: iter(records), queries=lambda: iter(()))
    monkeypatch.setattr(encoding, "load_views", lambda: {"tac": types.SimpleNamespace(render=lambda r: r.text)})
    monkeypatch.setattr(encoding, "load_corpus", lambda name: corpus)
    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path))
    out = CliRunner().invoke(cli, ["encode", "--corpus", "grants", "--model", "all-minilm-l6-v2", "--view", "tac",
                                   "--backend", "onnx"])
    assert out.exit_code == 2, out.output
    assert "runtime backend onnx needs optimum.onnxruntime" in out.output and "optimum-onnx" in out.output
    assert not (tmp_path / "embeddings").exists()
