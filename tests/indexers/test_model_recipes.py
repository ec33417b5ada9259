"""Every study architecture encodes as its model card says, from a folder: tiny random models (2 layers,
hidden 64) of the real transformers classes with a BPE tokenizer trained here on real patent text (the dataset uspto-grants-2019),
saved as sentence-transformers folders, against a plain reference of each recipe (each text alone, no
padding, the pooling written out). Also: the token-budget batching, out-of-memory halving, several devices,
shards merging through the cache, resident models bounded by memory, and format-1 cache entries."""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import shutil
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import USPTO
from evalctl.indexers import encoder as encoder_mod
from evalctl.indexers.embedding_cache import CacheKey, EmbeddingCache
from evalctl.indexers.encode_options import EncodeOptions
from evalctl.indexers.encoder import (Encoder, assign_batches, cache_key, encode_texts, in_shard, plan_batches,
                                      shared_model)
from evalctl.indexers.model_loader import ModelLoadError, require_weights
from evalctl.indexers.runtime import Runtime, current, using
from evalctl.models import get_model

pytestmark = pytest.mark.models

LIMIT = 48  # tokens: most title+abstract texts are cut, some are not
REMOTE_CODE = '''
from transformers import LlamaConfig, LlamaModel


class BidirLlamaConfig(LlamaConfig):
    model_type = "bidir_llama"


class BidirLlamaModel(LlamaModel):
    """Llama attending both ways (as llama-nemotron-embed's remote code): a 4D mask passes as it is."""

    config_class = BidirLlamaConfig

    def forward(self, input_ids=None, attention_mask=None, **kwargs):
        if attention_mask is not None and attention_mask.ndim == 2:
            n = attention_mask.shape[1]
            attention_mask = attention_mask[:, None, None, :].bool().expand(-1, 1, n, n)
        return super().forward(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
'''


def patent_texts(n: int = 24) -> tuple[list[str], list[str]]:
    csv.field_size_limit(10**8)
    with open(USPTO, encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return [r["grant_id"] for r in rows[:n]], [r["patent_title"] + "\n" + r["abstract"] for r in rows[:n]]


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=["<pad>", "<bos>", "<eos>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(patent_texts(150)[1], trainer)
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return path


def _tokenizer(tokenizer_file: Path, template: str, padding_side: str):
    from tokenizers import Tokenizer, processors
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer.from_file(str(tokenizer_file))
    tok.post_processor = processors.TemplateProcessing(
        single=template, special_tokens=[(t, tok.token_to_id(t)) for t in ("<bos>", "<eos>") if t in template])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
                                   padding_side=padding_side)


ARCH = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=256, pad_token_id=0, bos_token_id=1,
            eos_token_id=2)


def _build(kind: str, folder: Path, tokenizer_file: Path) -> dict:
    """A sentence-transformers folder of `kind` and what its recipe is (pooling, Dense layers, remote code)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Dense, Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    torch.manual_seed(zlib.crc32(kind.encode()) % 1000)  # str hash() differs per process: weights would too
    backbone = folder / "backbone"
    if kind == "qwen3":  # Qwen3-Embedding: causal, last token (the appended eos), left padding; saved in bf16
        from transformers import Qwen3Config, Qwen3Model

        model, template, side, pooling = Qwen3Model(Qwen3Config(**ARCH)).to(torch.bfloat16), "$A <eos>", "left", "lasttoken"
    elif kind == "gemma3-causal":  # KaLM-Gemma3: causal Gemma3, last token
        from transformers import Gemma3TextConfig, Gemma3TextModel

        model, template, side, pooling = Gemma3TextModel(Gemma3TextConfig(**ARCH)), "<bos> $A <eos>", "left", "lasttoken"
    elif kind == "gemma3-bidir":  # EmbeddingGemma: bidirectional Gemma3, mean, Dense up and down
        from transformers import Gemma3TextConfig, Gemma3TextModel

        model = Gemma3TextModel(Gemma3TextConfig(**ARCH, use_bidirectional_attention=True))
        template, side, pooling = "<bos> $A <eos>", "right", "mean"
    else:  # llama-nemotron-embed: remote code making Llama bidirectional, mean
        import sys

        (folder / "code").mkdir(parents=True)
        (folder / "code" / "modeling_bidir.py").write_text(REMOTE_CODE)
        sys.path.insert(0, str(folder / "code"))
        try:
            from modeling_bidir import BidirLlamaConfig, BidirLlamaModel
        finally:
            sys.path.pop(0)
        cfg = BidirLlamaConfig(**ARCH)
        cfg.auto_map = {"AutoConfig": "modeling_bidir.BidirLlamaConfig", "AutoModel": "modeling_bidir.BidirLlamaModel"}
        model, template, side, pooling = BidirLlamaModel(cfg), "<bos> $A <eos>", "right", "mean"
    model.save_pretrained(backbone)
    _tokenizer(tokenizer_file, template, side).save_pretrained(backbone)
    if kind == "llama-bidir":
        shutil.copy(folder / "code" / "modeling_bidir.py", backbone)
    modules = [Transformer(str(backbone), max_seq_length=LIMIT, model_kwargs={"trust_remote_code": True},
                           config_kwargs={"trust_remote_code": True}, processor_kwargs={"trust_remote_code": True})
               if kind == "llama-bidir" else Transformer(str(backbone), max_seq_length=LIMIT),
               Pooling(64, pooling_mode=pooling)]
    dense = []
    if kind == "gemma3-bidir":
        dense = [Dense(64, 96, bias=False, activation_function=None), Dense(96, 64, bias=False, activation_function=None)]
        modules += dense
    modules.append(Normalize())
    # a default prompt in the folder's config: a prompt-less variant must still get none
    st = SentenceTransformer(modules=modules, prompts={"query": "query: ", "document": "passage: "},
                             default_prompt_name="document")
    st.save(str(folder / "st"))
    return {"folder": folder / "st", "backbone": backbone, "pooling": pooling,
            "dense": [d.linear.weight.detach().clone() for d in dense], "remote": kind == "llama-bidir"}


KINDS = ("qwen3", "gemma3-causal", "gemma3-bidir", "llama-bidir")


@pytest.fixture(scope="module")
def built(tokenizer_file, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("models")
    return {k: _build(k, root / k, tokenizer_file) for k in KINDS}


def reference(recipe: dict, texts: list[str], prompt: str = "", padding_side: str | None = None) -> np.ndarray:
    """The model card's recipe, written out: transformers model in float32, each text alone (no padding),
    last token or mean over tokens, the Dense layers, L2 normalisation."""
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(recipe["backbone"], dtype=torch.float32,
                                      trust_remote_code=recipe["remote"]).eval()
    tok = AutoTokenizer.from_pretrained(recipe["backbone"])
    out = []
    with torch.inference_mode():
        for t in texts:
            ids = tok(prompt + t, truncation=True, max_length=LIMIT, return_tensors="pt")
            hidden = model(**ids).last_hidden_state[0]
            v = hidden[-1] if recipe["pooling"] == "lasttoken" else hidden.mean(0)
            for w in recipe["dense"]:
                v = w.float() @ v
            out.append(torch.nn.functional.normalize(v, dim=0).numpy())
    return np.stack(out)


def spec_for(recipe: dict, **changes):
    """A study spec (Qwen3-0.6B's: bfloat16 on accelerators, prompt variants) pointed at the tiny folder."""
    base = get_model("qwen3-embedding-0.6b")
    fields = dict(id=f"tiny-{recipe['folder'].parent.name}", path=str(recipe["folder"]), dim=64, max_seq_length=LIMIT,
                  params_m=0.1, trust_remote_code=recipe["remote"],
                  pooling="mean" if recipe["pooling"] == "mean" else "last-token")
    return dataclasses.replace(base, **{**fields, **changes})


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.mark.parametrize("kind", KINDS)
def test_vectors_equal_the_recipe_and_do_not_depend_on_batching(built, kind, tmp_path):
    recipe = built[kind]
    spec = spec_for(recipe)
    ids, texts = patent_texts()
    ref = reference(recipe, texts)
    one = encode_texts(spec, "document", "TA", ids, texts,
                       EncodeOptions(variant="plain", device="cpu", cache_root=tmp_path / "a", progress=False))
    assert np.abs(one.vectors - ref).max() < 1e-5
    assert one.precision == "float32" and one.prompt == ""  # fp32 on a CPU though the spec says bfloat16
    # small batches (padding differs in every one), texts of one at a time: the same vectors
    small = encode_texts(spec, "document", "TA", ids, texts,
                         EncodeOptions(variant="plain", runtime=Runtime(max_batch_tokens=3 * LIMIT), device="cpu",
                                       cache_root=tmp_path / "b", progress=False))
    assert np.abs(small.vectors - one.vectors).max() < 1e-5
    # truncation comes from the tokenisation that encoded: the texts over LIMIT tokens alone
    tok = shared_model(spec, "cpu", "auto", "float32").tokenizer
    assert one.n_truncated == sum(len(tok(t)["input_ids"]) > LIMIT for t in texts) > 0


def test_padding_side_from_the_spec_and_the_instructed_prompt(built, tmp_path):
    recipe = built["qwen3"]
    ids, texts = patent_texts(12)
    right = spec_for(recipe, tokenizer_kwargs={"padding_side": "right"})
    assert shared_model(right, "cpu", "auto", "float32").tokenizer.padding_side == "right"
    got = encode_texts(right, "query", "TA", ids, texts,
                       EncodeOptions(variant="instructed", device="cpu", cache_root=tmp_path, progress=False))
    prompt = right.prompt_for("query", variant="instructed")
    assert got.prompt == prompt and np.abs(got.vectors - reference(recipe, texts, prompt)).max() < 1e-5


def test_a_prompt_less_variant_gets_no_prompt_whatever_the_folder_default(built, tmp_path):
    """The folder's default_prompt_name would add "passage: " (as a bare model.encode does)."""
    from sentence_transformers import SentenceTransformer

    recipe = built["qwen3"]
    ids, texts = patent_texts(8)
    got = encode_texts(spec_for(recipe), "document", "TA", ids, texts,
                       EncodeOptions(variant="plain", device="cpu", cache_root=tmp_path, progress=False))
    bare = SentenceTransformer(str(recipe["folder"]), device="cpu", model_kwargs={"dtype": torch.float32}).encode(texts)
    assert np.abs(got.vectors - reference(recipe, texts)).max() < 1e-5
    assert np.abs(bare - reference(recipe, texts, "passage: ")).max() < 1e-5  # what the old route recorded as ""


def test_remote_code_folder_needs_trust_remote_code(built, tmp_path):
    recipe = built["llama-bidir"]
    spec = spec_for(recipe)
    ids, texts = patent_texts(6)
    got = encode_texts(spec, "document", "TA", ids, texts,
                       EncodeOptions(variant="plain", device="cpu", cache_root=tmp_path, progress=False))
    assert np.abs(got.vectors - reference(recipe, texts)).max() < 1e-5  # bidirectional, from the folder
    # a copy whose config says model_type llama (as Nemotron's): without trust_remote_code transformers would
    # quietly build a causal LlamaModel; refused, naming the config; with it, the remote code runs
    as_llama = tmp_path / "as-llama"
    shutil.copytree(recipe["folder"], as_llama)
    config = next(p for p in as_llama.rglob("config.json") if "auto_map" in p.read_text())
    config.write_text(config.read_text().replace('"bidir_llama"', '"llama"'))
    for folder in (recipe["folder"], as_llama):
        untrusted = dataclasses.replace(spec, trust_remote_code=False, path=str(folder), id="tiny-untrusted")
        with pytest.raises(ModelLoadError, match=r"auto_map.*trust_remote_code: true"):
            encode_texts(untrusted, "document", "TA", ids, texts,
                         EncodeOptions(variant="plain", device="cpu", cache_root=tmp_path, progress=False))
    trusted = encode_texts(dataclasses.replace(spec, path=str(as_llama), id="tiny-as-llama"), "document", "TA", ids,
                           texts, EncodeOptions(variant="plain", device="cpu", cache_root=tmp_path, progress=False))
    assert np.abs(trusted.vectors - reference(recipe, texts)).max() < 1e-5


def test_precision_is_enforced_recorded_and_keyed(built, tmp_path, monkeypatch):
    monkeypatch.setenv("EVALCTL_CPU_BF16", "1")  # bfloat16 is refused on a CPU without it
    recipe = built["qwen3"]  # saved in bfloat16
    spec = spec_for(recipe)
    ids, texts = patent_texts(8)
    fp32 = shared_model(spec, "cpu", "auto", "float32")
    assert {p.dtype for p in fp32.parameters()} == {torch.float32}
    with using(Runtime(precision="bfloat16")):
        half = encode_texts(spec, "document", "TA", ids, texts,
                            EncodeOptions(variant="plain", device="cpu", cache_root=tmp_path, progress=False))
    full = encode_texts(spec, "document", "TA", ids, texts,
                        EncodeOptions(variant="plain", device="cpu", cache_root=tmp_path, progress=False,
                                      runtime=Runtime(precision="float32")))
    assert {p.dtype for p in shared_model(spec, "cpu", "auto", "bfloat16").parameters()} == {torch.bfloat16}
    assert half.precision == "bfloat16" and full.precision == "float32" and full.n_encoded == len(texts)
    assert half.cache_dir != full.cache_dir  # never one entry for both
    assert 1e-4 < np.abs(half.vectors - full.vectors).max() < 0.1
    meta = json.loads((full.cache_dir / "meta.json").read_text())
    assert meta["precision"] == "float32" and "torch" in meta["versions"] and meta["format"] == 2
    key = cache_key(spec, "document", "TA", "plain", prompt="", precision="float32")
    run = EmbeddingCache(key, root=tmp_path).runs()[-1]
    assert run["precision"] == "float32" and run["device"] == "cpu" and run["oom_halvings"] == 0


@pytest.mark.parametrize("kind", ["qwen3", "gemma3-bidir"])
def test_lower_precisions_stay_near_float32_with_a_prompt(built, kind, monkeypatch):
    """Last-token (Qwen3) and mean pooling with Dense layers (EmbeddingGemma): bfloat16 and int8 vectors of prompted
    texts within the bounds of tests/indexers/test_precision.py of float32's."""
    monkeypatch.setenv("EVALCTL_CPU_BF16", "1")  # bf16's numerics, emulated where the CPU lacks it
    spec = spec_for(built[kind])
    texts, prompt = patent_texts(8)[1], "Instruct: Given a patent, retrieve the patents it cites\nQuery: "
    full = Encoder(spec, device="cpu", precision="float32").encode(texts, prompt).vectors
    for precision, bound in (("bfloat16", 0.998), ("int8", 0.9)):
        vectors = Encoder(spec, device="cpu", precision=precision).encode(texts, prompt).vectors
        assert (vectors * full).sum(1).min() >= bound, (precision, (vectors * full).sum(1).min())


def test_cuda_out_of_memory_halves_the_batch_and_is_recorded(built, tmp_path, monkeypatch):
    recipe = built["gemma3-causal"]
    spec = spec_for(recipe)
    ids, texts = patent_texts(16)
    model = shared_model(spec, "cpu", "auto", "float32")
    forward = type(model[0]).forward

    def small_memory(self, features, *a, **k):  # a device that holds 4 texts of LIMIT tokens
        if features["input_ids"].numel() > 4 * LIMIT:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (injected)")
        return forward(self, features, *a, **k)

    monkeypatch.setattr(type(model[0]), "forward", small_memory)
    got = encode_texts(spec, "document", "TA", ids, texts,
                       EncodeOptions(variant="plain", device="cpu", cache_root=tmp_path,
                                     runtime=Runtime(max_batch_tokens=16 * LIMIT), progress=False))
    assert got.oom_halvings >= 2 and got.max_batch_tokens <= 4 * LIMIT
    assert np.abs(got.vectors - reference(recipe, texts)).max() < 1e-5
    key = cache_key(spec, "document", "TA", "plain", prompt="", precision="float32")
    assert EmbeddingCache(key, root=tmp_path).runs()[-1]["oom_halvings"] == got.oom_halvings


def test_batch_planning_and_dealing_to_devices():
    lengths = [48, 48, 40, 30, 20, 10, 5, 5]
    batches = plan_batches(lengths, 100)
    assert batches == [[0, 1], [2, 3], [4, 5, 6, 7]]  # padded size texts x longest <= 100
    assert plan_batches([300, 10], 100) == [[0], [1]]  # a text over the budget goes alone
    assert plan_batches(lengths, 10_000, max_texts=3) == [[0, 1, 2], [3, 4, 5], [6, 7]]
    dealt = assign_batches(batches, lengths, 2)
    assert sorted(p for d in dealt for b in d for p in b) == list(range(8))  # every text once
    loads = [sum(len(b) * lengths[b[0]] for b in d) for d in dealt]
    assert max(loads) - min(loads) <= 96


def test_several_devices_merge_in_order(built):
    spec = spec_for(built["gemma3-bidir"])
    _, texts = patent_texts(12)
    one = Encoder(spec, device="cpu", max_batch_tokens=2 * LIMIT).encode(texts, "")
    two = Encoder(spec, device="cpu,cpu", max_batch_tokens=2 * LIMIT)
    assert two.devices == ["cpu", "cpu"]
    both = two.encode(texts, "")
    assert np.abs(both.vectors - one.vectors).max() < 1e-6 and both.n_truncated == one.n_truncated


def test_shards_merge_through_the_cache(built, tmp_path):
    spec = spec_for(built["qwen3"])
    ids, texts = patent_texts(16)
    for i, root in enumerate((tmp_path / "m0", tmp_path / "m1")):  # two machines, one shard each
        part = [(d, t) for d, t in zip(ids, texts) if in_shard(d, (i, 2))]
        encode_texts(spec, "document", "TA", [d for d, _ in part], [t for _, t in part],
                     EncodeOptions(variant="plain", device="cpu", cache_root=root, progress=False))
    key = cache_key(spec, "document", "TA", "plain", prompt="", precision="float32")
    mine = EmbeddingCache(key, root=tmp_path / "m0").dir
    for f in EmbeddingCache(key, root=tmp_path / "m1").dir.glob("*.npy"):  # copying the shard files is the merge
        shutil.copy(f, mine)
    merged = encode_texts(spec, "document", "TA", ids, texts,
                          EncodeOptions(variant="plain", device="cpu", cache_root=tmp_path / "m0", progress=False))
    assert merged.n_encoded == 0 and np.abs(merged.vectors - reference(built["qwen3"], texts)).max() < 1e-5


def test_resident_models_are_bounded_by_memory(built, monkeypatch):
    a, b = spec_for(built["qwen3"], id="tiny-resident-a"), spec_for(built["gemma3-causal"], id="tiny-resident-b")
    first = shared_model(a, "cpu", "auto", "float32")
    size = sum(p.numel() * p.element_size() for p in first.parameters())
    monkeypatch.setattr(encoder_mod, "resident_budget", lambda device: int(1.5 * size))
    monkeypatch.setattr(encoder_mod, "_SHARED", encoder_mod.OrderedDict(encoder_mod._SHARED))
    shared_model(b, "cpu", "auto", "float32")
    resident = {k[0] for k in encoder_mod._SHARED}
    assert "tiny-resident-b" in resident and "tiny-resident-a" not in resident  # a went before b loaded


def test_format_1_entries_stay_readable(tmp_path):
    spec = get_model("all-minilm-l6-v2")
    old = cache_key(spec, "document", "T", None, prompt="", precision="float32", versions=None)
    fields = {k: v for k, v in dataclasses.asdict(old).items() if k not in ("precision", "versions", "corpus")}
    before = hashlib.sha256(json.dumps({"format": 1, **fields}, sort_keys=True).encode()).hexdigest()[:24]
    assert old.digest() == before  # the digest a format-1 entry was stored under
    entry = EmbeddingCache(old, root=tmp_path)
    entry.commit([b"\x01" * 32], np.ones((1, 384), dtype=np.float32))
    assert json.loads((entry.dir / "meta.json").read_text()) == {"format": 1, **fields}
    assert len(EmbeddingCache(CacheKey(**fields), root=tmp_path)) == 1  # read back as float32, versions unknown
    new = cache_key(spec, "document", "T", None, prompt="", precision="float32")
    assert new.digest() != before and not EmbeddingCache(new, root=tmp_path).siblings()


def test_runtime_layers():
    spec_section = Runtime(device="cuda", precision="bfloat16", max_batch_tokens=65536)
    with using(Runtime(precision="float32")), using(spec_section, beneath=True):
        assert current() == Runtime(device="cuda", precision="float32", max_batch_tokens=65536)
    assert current() == Runtime()
    with pytest.raises(ValueError, match="max_batch_tokens"):
        Runtime(max_batch_tokens=0)


def test_missing_weights_message_names_the_code_repository(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    with pytest.raises(ModelLoadError) as e:
        require_weights(get_model("nomic-embed-text-v1.5"))
    assert "nomic-ai/nomic-embed-text-v1.5 at revision" in str(e.value)
    assert "nomic-ai/nomic-bert-2048" in str(e.value) and "models--nomic-ai--nomic-bert-2048" in str(e.value)


@pytest.mark.opensearch
def test_cli_index_with_weights_in_a_folder_gives_the_recipe_vectors(built, tmp_path, monkeypatch, os_client):
    """`evalctl index --model qwen3-embedding-0.6b` with `path:` in (a copy of) its spec file: the index holds the
    recipe's vectors, and its manifest the precision and package versions that made them."""
    import uuid

    import yaml
    from click.testing import CliRunner

    from evalctl.cli.main import cli
    from evalctl.corpus.importer import import_corpus
    from evalctl.corpus.views import load_views
    from evalctl.indexers.index_layout import index_name, vector_field
    from evalctl.indexers.index_loader import read_manifest
    from evalctl.config_files import configs_dir

    configs = tmp_path / "configs"
    shutil.copytree(configs_dir(), configs)
    qwen = configs / "models" / "qwen3-embedding.yaml"
    data = yaml.safe_load(qwen.read_text())
    entry = data["models"][0]
    # the `patent` variant: no document prompt, a clustering and a classification instruction of its own
    entry.update(path=str(built["qwen3"]["folder"]), dim=64, max_seq_length=LIMIT, params_m=0.1,
                 default_variant="patent")
    data["models"] = [entry]  # its siblings inherit through an anchor the rewrite loses: leave them out
    qwen.write_text(yaml.safe_dump(data, sort_keys=False))
    monkeypatch.setenv("EVALCTL_CONFIGS", str(configs))
    monkeypatch.setenv("EVALCTL_INDEX_PREFIX", f"recipes-{uuid.uuid4().hex[:6]}")
    src = tmp_path / "grants.csv"
    with open(USPTO, encoding="utf-8") as f, open(src, "w", encoding="utf-8") as out:
        out.writelines(line for _, line in zip(range(13), f))  # header and 12 grants
    corpus = import_corpus("uspto", [src], name="recipes").corpus
    out = CliRunner().invoke(cli, ["index", "--corpus", "recipes", "--model", "qwen3-embedding-0.6b", "--view", "TA",
                                   "--device", "cpu", "--max-batch-tokens", str(2 * LIMIT)])
    assert out.exit_code == 0, out.output
    name = index_name("recipes", "qwen3-embedding-0.6b")
    try:
        manifest = read_manifest(os_client, name)
        assert manifest["precision"] == "float32" and manifest["encoding_versions"].startswith("torch ")
        view = load_views()["TA"]
        records = {r.id: r for r in corpus.records()}
        fields = [vector_field("TA"), vector_field("TA", "clustering")]
        hits = os_client.search(index=name, body={"size": 100, "_source": fields})["hits"]["hits"]
        ids = sorted(h["_id"] for h in hits)
        texts = [view.render(records[i]) for i in ids]
        by_id = {h["_id"]: h["_source"] for h in hits}
        got = np.array([by_id[i][fields[0]] for i in ids])
        assert len(ids) == 12 and np.abs(got - reference(built["qwen3"], texts)).max() < 1e-5
        # the clustering field holds the recipe's vectors of the task instruction + text
        prompt = entry["prompt_variants"]["patent"]["clustering"]
        task = np.array([by_id[i][fields[1]] for i in ids])
        assert np.abs(task - reference(built["qwen3"], texts, prompt=prompt)).max() < 1e-5
        assert np.abs(task - got).max() > 1e-3  # not the document vectors again
    finally:
        os_client.indices.delete(index=name, ignore=404)
