"""Encoding precision on a CPU: `auto` is bfloat16 where the CPU has native bf16 and float32 elsewhere (both answers
forced here: EVALCTL_CPU_BF16), a model spec's pin holds under it, bfloat16 is refused where it would be emulated and
int8 off a CPU; each precision is its own cache entry, whose cost record says whether the CPU had bf16; and the
vectors of bfloat16 and int8 stay within a stated cosine of float32's for the real MiniLM and mpnet and a tiny
CLS-pooled BERT (tests/indexers/test_model_recipes.py: the mean and last-token architectures, with a prompt).

The bounds: bfloat16 0.998 (measured 0.9999 on real patents), int8 0.9 (mpnet's int8: 0.93 at worst on
abstract+claims, bench/encode.py --precisions)."""

from __future__ import annotations

import csv
import dataclasses
import json

import numpy as np
import pytest
import torch

from evalctl.indexers.embedding_cache import EmbeddingCache
from evalctl.indexers.encode_options import EncodeOptions
from evalctl.indexers.encoder import Encoder, PrecisionError, cache_key, encode_texts
from evalctl.indexers.model_loader import offline_model_dir
from evalctl.indexers.runtime import Runtime, precision_line, resolve_precision
from evalctl.config_files import SpecError
from evalctl.models import define_inline, get_model

from real_data import USPTO_60

BOUND = {"bfloat16": 0.998, "int8": 0.9}
MINILM = get_model("all-minilm-l6-v2")


def titles(n: int) -> tuple[list[str], list[str]]:
    """Real patent titles: short, as bfloat16 is emulated (slow) on a CPU without it."""
    with open(USPTO_60, newline="", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r["patent_title"].strip()][:n]
    return [r["grant_id"] for r in rows], [r["patent_title"] for r in rows]


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_auto_follows_the_cpu_and_a_pin_holds(monkeypatch):
    pinned = dataclasses.replace(MINILM, id="minilm-fp32", precision="float32")
    monkeypatch.setenv("EVALCTL_CPU_BF16", "1")
    assert resolve_precision(MINILM, "cpu", None) == resolve_precision(MINILM, "cpu", "auto") == "bfloat16"
    assert resolve_precision(pinned, "cpu", "auto") == resolve_precision(pinned, "cpu", "int8") == "float32"
    assert resolve_precision(MINILM, "cuda", "auto") == MINILM.dtype  # an accelerator: the spec's dtype
    assert resolve_precision(MINILM, "cpu", "int8") == "int8"
    assert "auto on cpu: bfloat16 (this CPU has native bf16" in precision_line(Runtime(device="cpu"))
    monkeypatch.setenv("EVALCTL_CPU_BF16", "0")
    assert resolve_precision(MINILM, "cpu", "auto") == "float32"
    assert "auto on cpu: float32 (this CPU has no native bf16" in precision_line(Runtime(device="cpu"))
    assert precision_line(Runtime(device="cpu", precision="int8")).startswith("encoding precision int8 on cpu")
    with pytest.raises(ValueError, match="precision bfloat16: this CPU has no native bf16 instructions .*auto"):
        resolve_precision(MINILM, "cpu", "bfloat16")
    with pytest.raises(ValueError, match=r"bfloat16 \(pinned by model minilm-bf16's spec\)"):
        resolve_precision(dataclasses.replace(MINILM, id="minilm-bf16", precision="bfloat16"), "cpu", None)
    with pytest.raises(ValueError, match="precision int8 is dynamic quantisation for a CPU, not for device cuda"):
        resolve_precision(MINILM, "cuda", "int8")
    with pytest.raises(ValueError, match="runtime precision 'int4' is not one of auto, float32"):
        Runtime(precision="int4")
    monkeypatch.setenv("EVALCTL_CPU_BF16", "yes")
    with pytest.raises(ValueError, match="EVALCTL_CPU_BF16='yes': set 1"):
        resolve_precision(MINILM, "cpu", None)


@pytest.mark.models
def test_each_precision_is_its_own_entry_and_auto_reuses_its_choice(tmp_path, monkeypatch):
    ids, texts = titles(8)

    def encode(precision: str | None):
        return encode_texts(MINILM, "document", "TA", ids, texts,
                            EncodeOptions(device="cpu", runtime=Runtime(precision=precision), cache_root=tmp_path,
                                          progress=False))

    with pytest.raises(PrecisionError, match="model all-minilm-l6-v2: precision bfloat16: this CPU has no native"):
        encode("bfloat16")
    assert not list(tmp_path.iterdir())  # refused before any entry was made
    runs = {p: encode(p) for p in ("float32", "int8")}
    monkeypatch.setenv("EVALCTL_CPU_BF16", "1")
    runs["bfloat16"] = encode("bfloat16")
    auto = encode(None)
    assert auto.precision == "bfloat16" and auto.n_encoded == 0 and auto.cache_dir == runs["bfloat16"].cache_dir
    assert len({r.cache_dir for r in runs.values()}) == 3
    for precision, r in runs.items():
        assert r.precision == precision and r.n_encoded == len(texts)
        assert np.linalg.norm(r.vectors, axis=1) == pytest.approx(1, abs=1e-6)  # normalised in float32
        meta = json.loads((r.cache_dir / "meta.json").read_text())
        assert meta["precision"] == precision
        # half-precision vectors name evalctl's arithmetic on them (it changed), float32 and int8 ones do not
        assert meta["versions"].endswith(", evalctl half 2") is (precision == "bfloat16")
        key = cache_key(MINILM, "document", "TA", None, prompt="", precision=precision)
        cost = EmbeddingCache(key, root=tmp_path).runs()[-1]["cost"]
        assert cost["precision"] == precision and cost["native_bf16"] is (precision == "bfloat16")


def _within_bound(spec, texts: list[str], monkeypatch) -> None:
    monkeypatch.setenv("EVALCTL_CPU_BF16", "1")  # bf16's numerics, emulated where the CPU lacks it
    prompt = spec.prompt_for("document")
    full = Encoder(spec, device="cpu", precision="float32").encode(texts, prompt).vectors
    encoders = {p: Encoder(spec, device="cpu", precision=p) for p in BOUND}
    worst = {p: float(cosines(e.encode(texts, prompt).vectors, full).min()) for p, e in encoders.items()}
    assert all(worst[p] >= BOUND[p] for p in BOUND), worst
    assert {p.dtype for p in encoders["bfloat16"].model.parameters()} == {torch.bfloat16}
    quantised = [m for m in encoders["int8"].model.modules()
                 if type(m).__module__.startswith("torch.ao.nn.quantized.dynamic")]
    assert quantised, "int8 loaded no quantised linear layer"


@pytest.mark.models
@pytest.mark.parametrize("model_id", ["all-minilm-l6-v2", "all-mpnet-base-v2"])
def test_real_models_lower_precisions_stay_near_float32(model_id, monkeypatch):
    _within_bound(get_model(model_id), titles(16)[1], monkeypatch)


@pytest.mark.models
def test_a_tiny_cls_model_lower_precisions_stay_near_float32(tmp_path, monkeypatch):
    """A two-layer BERT with CLS pooling, random weights, MiniLM's tokenizer."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    from transformers import AutoTokenizer, BertConfig, BertModel

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(offline_model_dir(MINILM))
    BertModel(BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4)).save_pretrained(tmp_path / "bert")
    tokenizer.save_pretrained(tmp_path / "bert")
    SentenceTransformer(modules=[Transformer(str(tmp_path / "bert"), max_seq_length=64),
                                 Pooling(64, pooling_mode="cls")]).save(str(tmp_path / "st"))
    spec = dataclasses.replace(MINILM, id="tiny-bert-cls", path=str(tmp_path / "st"), dim=64, max_seq_length=64,
                               params_m=0.1, pooling="cls", normalize=False, offline=None)
    _within_bound(spec, titles(16)[1], monkeypatch)


def test_a_study_defines_a_precision_variant_like_another_model(tmp_path, monkeypatch):
    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path))
    variant = define_inline("minilm-int8", {"like": MINILM.id, "precision": "int8"}, "spec.yaml: models[1]")
    assert variant == dataclasses.replace(MINILM, id="minilm-int8", precision="int8")
    assert get_model("minilm-int8") == variant  # kept under its own id: its own vectors, fields and runs
    with pytest.raises(SpecError, match="spec.yaml: models.1.: spec: like: .*no-such-model"):
        define_inline("other", {"like": "no-such-model", "precision": "int8"}, "spec.yaml: models[1]")
    with pytest.raises(SpecError, match="spec.yaml: models.1.: spec.*precision"):
        define_inline("minilm-int4", {"like": MINILM.id, "precision": "int4"}, "spec.yaml: models[1]")
