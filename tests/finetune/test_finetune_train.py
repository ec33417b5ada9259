"""Fine-tuning for real (offline MiniLM, a few steps on real USPTO rows): the model is registered, its
spec resolves and loads offline, it encodes and indexes like any model, a rerun is skipped, a crash
after a checkpoint resumes, transfer compares it with its base; LoRA on a tiny random model."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import re
import shutil

import numpy as np
import pytest
from click.testing import CliRunner

from evalctl.cli.main import cli
from evalctl.corpus.importer import import_corpus
from evalctl.finetune.params import FinetuneOptions, FinetuneParams
from evalctl.finetune.train import FinetuneError, finetune
from evalctl.models import get_model, load_models
from evalctl.corpus.qrels import QrelsSpec, build_citation_qrels
from test_finetune_pairs import native_with_citations

pytest.importorskip("datasets", reason="evalctl[finetune] not installed (datasets, peft)")
pytestmark = pytest.mark.models
STEPS = dict(max_steps=2, batch_size=4, save_steps=2)
CPU = FinetuneOptions(device="cpu", progress=False)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("ft")
    mp = pytest.MonkeyPatch()
    mp.setenv("EVALCTL_CACHE", str(root / "cache"))
    mp.setenv("HF_HUB_OFFLINE", "1")
    corpus = import_corpus("native", [native_with_citations(root / "n.jsonl", 12)], name="ftt-native").corpus
    build_citation_qrels(corpus, QrelsSpec(train_fraction=0.5, dev_fraction=0.0, seed="t1"))
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        tuned = finetune("all-minilm-l6-v2", "R3", [corpus], FinetuneParams(match_size=8, **STEPS), CPU)
    yield {"root": root, "corpus": corpus, "tuned": tuned, "printed": printed.getvalue()}
    mp.undo()


def test_registered_spec_resolves_offline_with_lineage(env):
    res = env["tuned"]
    assert res.model_id == "all-minilm-l6-v2+r3-n8@ftt-native" and res.steps == 2 and not res.skipped
    assert "loss" not in env["printed"]  # without progress the trainer's log dicts are not printed either
    listed = CliRunner().invoke(cli, ["models", "list"]).output
    assert re.search(rf"^\[fine-tuned\] {re.escape(res.model_id)} +all-minilm-l6-v2 +R3 +ftt-native +384 ", listed, re.M)
    spec = get_model(res.model_id)
    base = get_model("all-minilm-l6-v2")
    assert spec.path == str(res.model_dir) and re.fullmatch(r"ft-[0-9a-f]{16}", spec.revision)
    assert (spec.dim, spec.similarity, spec.max_seq_length) == (base.dim, base.similarity, base.max_seq_length)
    lin = spec.lineage
    assert lin["base_model"] == base.id and lin["recipe"]["id"] == "R3" and lin["seed"] == 13
    assert lin["match_size"] == 8 and lin["pairs"]["used"] == {"sections": 8}
    assert lin["training"]["max_steps"] == 2 and lin["training"]["batch_size"] == 4
    assert lin["corpora"][0]["content_hash"] == env["corpus"].content_hash
    assert res.model_id not in load_models()  # the repository's configs are untouched
    assert str(env["root"]) in str(res.spec_file)


def test_tuned_model_encodes_through_the_cache_and_differs_from_base(env):
    from evalctl.indexers.encode_options import EncodeOptions
    from evalctl.indexers.encoder import encode_texts
    from evalctl.indexers.index_layout import index_name

    texts = ["A pizza box with a vented lid.", "A battery cathode electrode."]
    tuned, base = get_model(env["tuned"].model_id), get_model("all-minilm-l6-v2")
    rep = encode_texts(tuned, "document", "T", ["a", "b"], texts, EncodeOptions(progress=False))
    vb = encode_texts(base, "document", "T", ["a", "b"], texts, EncodeOptions(progress=False)).vectors
    assert rep.vectors.shape == (2, 384) and not np.allclose(rep.vectors, vb)
    assert rep.cache_dir.parent.name == tuned.id
    name = index_name("pizza", tuned.id)
    assert name == "evalctl-pizza--all-minilm-l6-v2.r3-n8-ftt-native"
    assert name == name.lower() and not re.search(r'[\\/*?"<>| ,#:]', name)


@pytest.mark.opensearch
def test_tuned_model_indexes_and_transfers(env, os_client):
    from evalctl.evaluators.tasks.transfer import transfer
    from evalctl.evaluators.tasks.transfer_params import TransferParams
    from evalctl.indexers.index_layout import corpus_alias
    from evalctl.indexers.index_loader import index_corpus, read_manifest
    from evalctl.corpus.views import load_views

    corpus, tuned = env["corpus"], env["tuned"].model_id
    views = load_views()
    try:
        for model in ("all-minilm-l6-v2", tuned):
            rep = index_corpus(os_client, corpus, [views["TA"]], get_model(model), progress=False)
            assert rep.n_loaded == len(corpus)
        assert read_manifest(os_client, rep.index)["model"] == tuned
        report = transfer(os_client, [tuned], TransferParams(corpus.name, "TA", split="all"), progress=False)
        row = report.rows[0]
        assert row.base == "all-minilm-l6-v2" and row.recipe == "R3" and row.n_queries > 0
        assert row.p_holm >= row.p and row.verdict in ("degrades", "improves", "n.s.")
        assert f"| {tuned} |" in report.table()
    finally:
        os_client.indices.delete(index=f"{corpus_alias(corpus.name)}--*", ignore_unavailable=True)


def test_rerun_is_skipped_and_a_different_run_under_the_same_id_refused(env):
    again = finetune("all-minilm-l6-v2", "R3", [env["corpus"]], FinetuneParams(match_size=8, **STEPS), CPU)
    assert again.skipped and again.model_id == env["tuned"].model_id
    with pytest.raises(FinetuneError, match="differs in: pairs, seed"):
        finetune("all-minilm-l6-v2", "R3", [env["corpus"]], FinetuneParams(match_size=8, seed=14, **STEPS), CPU)


def test_a_run_killed_after_its_checkpoint_resumes_from_it(env):
    name = "resume-test"
    named = dataclasses.replace(CPU, name=name)
    first = finetune("all-minilm-l6-v2", "R3", [env["corpus"]], FinetuneParams(match_size=8, **STEPS), named)
    # what a crash between the last checkpoint and the final save leaves behind
    shutil.rmtree(first.model_dir)
    first.spec_file.unlink()
    second = finetune("all-minilm-l6-v2", "R3", [env["corpus"]], FinetuneParams(match_size=8, **STEPS), named)
    assert second.resumed_from and second.resumed_from.endswith("checkpoint-2")
    assert get_model(name).path == str(second.model_dir)


def test_lora_trains_merges_and_saves_a_plain_model(tmp_path, env):
    """LoRA construction, two CPU steps and the merge on a tiny randomly initialised BERT (the >= 1B
    path itself needs a GPU and was not run here)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Pooling, Transformer
    from transformers import AutoTokenizer, BertConfig, BertModel

    from evalctl.finetune.train import add_lora, merge_lora, train
    from evalctl.indexers.model_loader import offline_model_dir
    from evalctl.finetune.pairs import build_pairs
    from evalctl.finetune.recipes import LoraSpec, TrainingSpec, get_recipe

    tok_dir = offline_model_dir(get_model("all-minilm-l6-v2"))
    tiny = tmp_path / "tiny"
    BertModel(BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=64)).save_pretrained(tiny)
    AutoTokenizer.from_pretrained(tok_dir).save_pretrained(tiny)
    t = Transformer(str(tiny), max_seq_length=64)
    model = SentenceTransformer(modules=[t, Pooling(t.get_embedding_dimension())], device="cpu")
    add_lora(model, LoraSpec(use="on", r=4, alpha=8, target_modules=("query", "value")))
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    pairs = build_pairs(get_recipe("R3"), [env["corpus"]], match_size=8)
    recipe = dataclasses.replace(get_recipe("R3"), training=TrainingSpec(max_steps=2, batch_size=4, save_steps=2))
    train(model, pairs, recipe, tmp_path / "ckpt", options=CPU)
    merge_lora(model)
    assert not any("lora_" in n for n, _ in model.named_parameters())
    before = model.encode(["a pizza box"])
    model.save(str(tmp_path / "merged"))
    reloaded = SentenceTransformer(str(tmp_path / "merged"), device="cpu")
    assert np.allclose(reloaded.encode(["a pizza box"]), before, atol=1e-5)
