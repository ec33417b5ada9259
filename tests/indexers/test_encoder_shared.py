"""One loaded model per process for the same model, revision, device and precision: encoders share it (an
`evalctl run` loads each model once), give the same vectors as a model loaded on its own, and a changed
revision (a retrained fine-tuned model) loads anew. Real all-MiniLM-L6-v2 from its offline package."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from evalctl.indexers import encoder as encoder_module
from evalctl.indexers.encode_options import EncodeOptions
from evalctl.indexers.encoder import Encoder, LazyEncoder, encode_texts
from evalctl.indexers.model_loader import load_model
from evalctl.models import get_model

pytestmark = pytest.mark.models

TEXTS = ["A pizza oven with a rotating stone deck heated from below.",
         "Method of folding a pizza box from a single corrugated blank."]


@pytest.fixture
def spec(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(encoder_module, "_SHARED", type(encoder_module._SHARED)())  # this test's own
    return get_model("all-minilm-l6-v2")


def test_encoders_share_one_loaded_model(spec, tmp_path):
    first = Encoder(spec, device="cpu", batch_size=8)
    lazy = LazyEncoder(spec, device="cpu", batch_size=2)
    report = encode_texts(spec, "document", "T", ["a", "b"], TEXTS,
                          EncodeOptions(encoder=lazy, cache_root=tmp_path, progress=False))
    assert lazy._encoder.model is first.model
    assert len(encoder_module._SHARED) == 1
    own = load_model(spec, device="cpu")  # loaded on its own: the same numbers
    expected = own.encode(TEXTS, normalize_embeddings=spec.normalize, convert_to_numpy=True)
    assert np.allclose(report.vectors, expected, atol=1e-6)
    assert own is not first.model


def test_another_revision_or_device_loads_anew(spec):
    base = Encoder(spec, device="cpu")
    retrained = Encoder(dataclasses.replace(spec, revision="0" * 40), device="cpu")
    assert retrained.model is not base.model
    assert Encoder(spec, device="cpu").model is base.model
    assert len(encoder_module._SHARED) == 2


def test_a_model_evicted_inside_a_frozen_heap_is_still_freed(spec, monkeypatch):
    import gc
    import weakref

    from evalctl.gc_tuning import long_lived_frozen

    old = Encoder(spec, device="cpu").model
    room = int(1.5 * encoder_module._weight_bytes(old))  # one such model at a time
    monkeypatch.setattr(encoder_module, "resident_budget", lambda device: room)
    old.cycle = old  # freed by the cyclic collector only, as a model with back references would be
    gone = weakref.ref(old)
    del old
    with long_lived_frozen():  # e.g. a load that resumes and loads another model to encode
        Encoder(dataclasses.replace(spec, revision="1" * 40), device="cpu")
        gc.collect()
        assert gone() is None
