"""`evalctl vectors import` on real USPTO grants with the offline MiniLM: vectors exported from one cache and
node prefix, imported into a fresh cache and prefix, give the same runs without the model being loaded; each
bad input is refused (exit 2) naming the file and row, with nothing written."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from retrieval_data import write_citation_native, write_known_item_beir

pytestmark = [pytest.mark.opensearch, pytest.mark.models]
MODEL = "all-minilm-l6-v2"


def _cli(*args):
    from evalctl.cli.main import cli

    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def _ok(*args):
    res = _cli(*args)
    assert res.exit_code == 0, res.output
    return res.output


def _corpora(root, tag):
    """The two corpora in the current cache: known-item BEIR (30 grants, view A) and citations (11 grants, TA)."""
    from evalctl.corpus.importer import import_corpus
    from evalctl.corpus.qrels import QrelsSpec, build_citation_qrels

    beir = root / "beir"
    if not beir.exists():
        write_known_item_beir(beir, 30)
        write_citation_native(root / "cit.jsonl")
    import_corpus("beir", [beir], name=f"ki-{tag}")
    cit = import_corpus("native", [root / "cit.jsonl"], name=f"cit-{tag}").corpus
    build_citation_qrels(cit, QrelsSpec(dev_fraction=0.0))
    return beir


def _runs(client, tag):
    """run.trec of dense and exact on both corpora (identity name as the tag: equal across prefixes)."""
    from evalctl.evaluators.retrieval.retrieve import RetrievalOptions, RetrievalSpec, retrieve

    out = {}
    for corpus, view, qrels in ((f"cit-{tag}", "TA", "citations"), (f"ki-{tag}", "A", "given")):
        for method in ("dense", "exact"):
            spec = RetrievalSpec(corpus=corpus, view=view, method=method, model=MODEL, qrels=qrels, split=None, k=10)
            run = retrieve(client, spec, RetrievalOptions(progress=False, batch_size=4))
            out[(corpus, method)] = run.result.file("run.trec").read_text()
    return out


@pytest.fixture(scope="module")
def tag():
    return uuid.uuid4().hex[:8]


@pytest.fixture(scope="module")
def original(tmp_path_factory, os_client, tag):
    """Cache A, prefix A: indexed and retrieved the usual way; the vectors exported."""
    root = tmp_path_factory.mktemp("vi-a")
    mp = pytest.MonkeyPatch()
    mp.setenv("EVALCTL_CACHE", str(root / "cache"))
    mp.setenv("EVALCTL_INDEX_PREFIX", f"via{tag}")
    mp.setenv("HF_HUB_OFFLINE", "1")
    beir = _corpora(root, tag)
    _ok("index", "--corpus", f"cit-{tag}", "--model", MODEL, "--view", "TA")
    _ok("index", "--corpus", f"ki-{tag}", "--model", MODEL, "--view", "A")
    runs = _runs(os_client, tag)
    exports = {}
    for corpus, view in ((f"cit-{tag}", "TA"), (f"ki-{tag}", "A")):
        out = _ok("vectors", "export", "--corpus", corpus, "--model", MODEL, "--view", view)
        exports[corpus] = root / out.strip().splitlines()[-1].removeprefix("-> ")
    yield {"root": root, "beir": beir, "runs": runs, "exports": exports}
    os_client.indices.delete(index=f"via{tag}-*", ignore_unavailable=True)
    mp.undo()


@pytest.fixture
def fresh(tmp_path, os_client, tag, monkeypatch, original):
    """A fresh cache and prefix holding the same corpora, and no model loaded in this process."""
    from evalctl.indexers import encoder as encoder_module

    prefix = f"vib{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("EVALCTL_INDEX_PREFIX", prefix)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _corpora(original["root"], tag)
    monkeypatch.setattr(encoder_module, "_SHARED", type(encoder_module._SHARED)())
    yield {"cache": tmp_path / "cache", "models": encoder_module._SHARED}
    os_client.indices.delete(index=f"{prefix}-*", ignore_unavailable=True)


def test_round_trip_export_import_gives_identical_runs(os_client, tag, original, fresh, tmp_path):
    """npy + ids (the export as it is), a BEIR corpus order (rows reordered to corpus.jsonl), and Parquet (a
    re-import: nothing new); then index and retrieve load no model and write the same run files."""
    from evalctl.indexers.index_layout import index_name
    from evalctl.indexers.index_loader import read_manifest

    cit = original["exports"][f"cit-{tag}"]
    out = _ok("vectors", "import", "--corpus", f"cit-{tag}", "--model", MODEL, "--view", "TA",
              "--npy", cit / "vectors.npy", "--ids", cit / "ids.txt", "--precision", "float32")
    assert "11 rows: 10 vectors imported" in out and "coverage: 11 of 11 records" in out
    ki = original["exports"][f"ki-{tag}"]
    pos = {d: i for i, d in enumerate((ki / "ids.txt").read_text().split())}
    order = [json.loads(line)["_id"] for line in (original["beir"] / "corpus.jsonl").read_text().splitlines()]
    assert order != sorted(order)  # the BEIR order is not the export's doc_id order: the rows really move
    np.save(tmp_path / "beir.npy", np.load(ki / "vectors.npy")[[pos[d] for d in order]])
    out = _ok("vectors", "import", "--corpus", f"ki-{tag}", "--model", MODEL, "--view", "A",
              "--npy", tmp_path / "beir.npy", "--beir-corpus", original["beir"] / "corpus.jsonl", "--precision", "float32")
    assert "30 rows: 30 vectors imported" in out and "coverage: 30 of 30 records" in out
    table = pa.table({"id": order, "vector": list(np.load(tmp_path / "beir.npy"))})
    pq.write_table(table, tmp_path / "ki.parquet")
    out = _ok("vectors", "import", "--corpus", f"ki-{tag}", "--model", MODEL, "--view", "A",
              "--parquet", tmp_path / "ki.parquet", "--precision", "float32")
    assert "0 vectors imported (one per distinct text), 30 already held" in out

    _ok("index", "--corpus", f"cit-{tag}", "--model", MODEL, "--view", "TA")
    _ok("index", "--corpus", f"ki-{tag}", "--model", MODEL, "--view", "A")
    assert not fresh["models"]  # every document vector came from the imports: the weights were never loaded
    runs = _runs(os_client, tag)
    # known-item queries are titles, not corpus texts: encoded here into the imported query entry
    assert runs == original["runs"]
    manifest = read_manifest(os_client, index_name(f"cit-{tag}", MODEL))
    assert manifest["encoding_versions"] == "imported" and manifest["precision"] == "float32"
    assert manifest["segments"] == 1
    (record,) = manifest["vectors_import"]["TA"]
    files = {f["path"]: f["sha256"] for f in record["files"]}
    from evalctl.provenance import file_sha256

    assert files == {str((cit / n).resolve()): file_sha256(cit / n) for n in ("vectors.npy", "ids.txt")}
    assert record["command"].startswith("evalctl vectors import --corpus") and "--precision float32" in record["command"]
    assert record["coverage"] == "11/11 records"
    assert "ok" in _ok("index", "verify", "--corpus", f"cit-{tag}", "--model", MODEL)  # against the imported entry


def test_partial_import_encodes_only_the_missing_texts(os_client, tag, original, fresh, tmp_path):
    """7 of 11 records' vectors imported (6 texts: two records are family twins of one text): coverage says so,
    `index` encodes the other 4 texts into the same entry (its run record says how), and the index holds the
    imported vectors bit for bit."""
    from evalctl.indexers.embedding_cache import EmbeddingCache
    from evalctl.indexers.vectors_import import imported_entries
    from evalctl.models import get_model

    cit = original["exports"][f"cit-{tag}"]
    ids = (cit / "ids.txt").read_text().split()
    np.save(tmp_path / "part.npy", np.load(cit / "vectors.npy")[:7])
    (tmp_path / "part.txt").write_text("\n".join(ids[:7]) + "\n")
    out = _ok("vectors", "import", "--corpus", f"cit-{tag}", "--model", MODEL, "--view", "TA",
              "--npy", tmp_path / "part.npy", "--ids", tmp_path / "part.txt", "--precision", "float32")
    assert "coverage: 7 of 11 records" in out and "missing e.g." in out
    _ok("index", "--corpus", f"cit-{tag}", "--model", MODEL, "--view", "TA")
    model = get_model(MODEL)
    (entry,) = imported_entries(model, "TA", None, model.prompt_for("document", task_type="retrieval"),
                                f"cit-{tag}").values()
    assert isinstance(entry, EmbeddingCache) and len(entry) == 10
    encoded = [r for r in entry.runs() if "import" not in r]
    assert [r["n_encoded"] for r in encoded] == [4] and encoded[0]["versions"].startswith("torch")
    from evalctl.indexers.index_layout import index_name

    idx = index_name(f"cit-{tag}", MODEL)
    hits = os_client.search(index=idx, body={"size": 11, "query": {"ids": {"values": ids[:7]}}, "_source": ["vec_TA"]})
    got = {h["_id"]: h["_source"]["vec_TA"] for h in hits["hits"]["hits"]}
    np.testing.assert_array_equal(np.array([got[i] for i in ids[:7]], dtype=np.float32),
                                  np.load(cit / "vectors.npy")[:7])


def _bad_inputs(tmp, export):
    """(name, arguments after the common ones, what the message must say) for each bad input."""
    vectors, ids = np.load(export / "vectors.npy"), (export / "ids.txt").read_text().split()

    def npy(name, array, id_list=ids):
        np.save(tmp / f"{name}.npy", array)
        (tmp / f"{name}.txt").write_text("\n".join(id_list) + "\n")
        return ["--npy", tmp / f"{name}.npy", "--ids", tmp / f"{name}.txt"]

    nan, inf = vectors.copy(), vectors.copy()
    nan[3, 5], inf[6, 0] = np.nan, np.inf
    dup, unknown = list(ids), list(ids)
    dup[4], unknown[2] = ids[1], "US0000000"
    ragged = pa.table({"id": ids[:3], "vector": [list(vectors[0]), list(vectors[1][:100]), list(vectors[2])]})
    pq.write_table(ragged, tmp / "ragged.parquet")
    pq.write_table(pa.table({"doc": ids}), tmp / "nocol.parquet")
    np.savez(tmp / "archive.npz", vectors=vectors)
    (tmp / "latin1.txt").write_bytes("\n".join(ids[:5] + ["US\u00e91"] + ids[6:]).encode("latin-1") + b"\n")
    pq.write_table(pa.table({"id": ids, "vector": list(vectors)}), tmp / "corrupt.parquet")
    page = pq.ParquetFile(tmp / "corrupt.parquet").metadata.row_group(0).column(1).data_page_offset
    raw = bytearray((tmp / "corrupt.parquet").read_bytes())
    raw[page + 64:page + 2064] = bytes(b ^ 0x5A for b in raw[page + 64:page + 2064])  # the footer stays readable
    (tmp / "corrupt.parquet").write_bytes(raw)
    pq.write_table(pa.Table.from_arrays([pa.array(ids), pa.array(list(vectors)), pa.array(ids)],
                                        names=["id", "vector", "id"]), tmp / "twocols.parquet")
    return [
        ("npz as npy", ["--npy", tmp / "archive.npz", "--ids", export / "ids.txt"], ["archive.npz", ".npz archive"]),
        ("non-UTF-8 ids", ["--npy", export / "vectors.npy", "--ids", tmp / "latin1.txt"],
         ["latin1.txt line 6", "UTF-8"]),
        ("one column for both", ["--parquet", tmp / "twocols.parquet", "--id-column", "vector"],
         ["--id-column and --vector-column", "'vector'"]),
        ("corrupt data page", ["--parquet", tmp / "corrupt.parquet"], ["corrupt.parquet", "not a readable Parquet"]),
        ("duplicate column names", ["--parquet", tmp / "twocols.parquet"], ["twocols.parquet", "column 'id'", "2 times"]),

        ("wrong dim", npy("dim", vectors[:, :300]), ["dim.npy", "300-dim", "gives 384"]),
        ("NaN", npy("nan", nan), ["nan.npy row 3", ids[3], "non-finite"]),
        ("inf", npy("inf", inf), ["inf.npy row 6", ids[6], "non-finite"]),
        ("duplicate id", npy("dup", vectors, dup), ["dup.npy row 4", "line 5 of", "duplicate id, also row 1"]),
        ("unknown id", npy("unknown", vectors, unknown), ["unknown.npy row 2", "'US0000000'", "no such record"]),
        ("missing id file", ["--npy", export / "vectors.npy", "--ids", tmp / "absent.txt"], ["absent.txt: no such ids"]),
        ("mismatched lengths", npy("short", vectors, ids[:-1]), ["short.npy has 11 rows", "short.txt has 10 ids"]),
        ("unnormalised", npy("norm", vectors * 2), ["norm.npy row 0", "norm 2", "normalise"]),
        ("ragged parquet", ["--parquet", tmp / "ragged.parquet"], ["ragged.parquet row 1", "100 values"]),
        ("no vector column", ["--parquet", tmp / "nocol.parquet"], ["nocol.parquet: no column 'id', 'vector'"]),
    ]


def test_bad_inputs_are_refused_naming_file_and_row_and_write_nothing(tag, original, fresh, tmp_path):
    cases = _bad_inputs(tmp_path, original["exports"][f"cit-{tag}"])
    for name, args, says in cases:
        res = _cli("vectors", "import", "--corpus", f"cit-{tag}", "--model", MODEL, "--view", "TA",
                   "--precision", "float32", *args)
        assert res.exit_code == 2, (name, res.output)
        for part in says:
            assert part in res.output, (name, part, res.output)
        assert not (fresh["cache"] / "embeddings").exists(), name  # nothing half-written, not even meta.json


def test_index_refuses_missing_texts_when_the_weights_are_not_here(os_client, tag, original, fresh, tmp_path,
                                                                   monkeypatch):
    """A partial import with no weights to encode the rest: refused before an index exists."""
    from evalctl.indexers import index_loader, model_loader, vectors_import
    from evalctl.indexers.index_layout import index_name
    from evalctl.indexers.index_loader import read_manifest

    cit = original["exports"][f"cit-{tag}"]
    ids = (cit / "ids.txt").read_text().split()
    np.save(tmp_path / "part.npy", np.load(cit / "vectors.npy")[:7])
    (tmp_path / "part.txt").write_text("\n".join(ids[:7]) + "\n")
    _ok("vectors", "import", "--corpus", f"cit-{tag}", "--model", MODEL, "--view", "TA",
        "--npy", tmp_path / "part.npy", "--ids", tmp_path / "part.txt", "--precision", "float32")

    def no_weights(spec, source="auto"):  # the weights of a model run elsewhere, absent on this machine
        raise model_loader.ModelLoadError(f"model {spec.id}: no weights here")

    for module in (model_loader, index_loader, vectors_import):  # each module that calls it
        monkeypatch.setattr(module, "require_weights", no_weights)
    res = _cli("index", "--corpus", f"cit-{tag}", "--model", MODEL, "--view", "TA")
    assert res.exit_code == 2 and "cover 7 of 11 records of view TA" in res.output and "no weights here" in res.output
    assert read_manifest(os_client, index_name(f"cit-{tag}", MODEL)) is None


def _noisy(vectors, seed=0):
    """Unit vectors near `vectors` but not equal (|diff| ~0.1): what another machine's encode would not give."""
    noisy = vectors + np.random.default_rng(seed).normal(0, 0.02, vectors.shape).astype(np.float32)
    return (noisy / np.linalg.norm(noisy, axis=1, keepdims=True)).astype(np.float32)


def _index_vectors(os_client, corpus, ids, view="TA"):
    from evalctl.indexers.index_layout import index_name

    hits = os_client.search(index=index_name(corpus, MODEL), body={
        "size": len(ids), "query": {"ids": {"values": ids}}, "_source": [f"vec_{view}"]})
    got = {h["_id"]: h["_source"][f"vec_{view}"] for h in hits["hits"]["hits"]}
    return np.array([got[i] for i in ids], dtype=np.float32)


def _twins(vectors):
    """The rows of the two records of one text (write_citation_native's family twins)."""
    (pair,) = [(i, j) for i in range(len(vectors)) for j in range(i + 1, len(vectors)) if (vectors[i] == vectors[j]).all()]
    return pair


def test_import_is_scoped_to_its_corpus(os_client, tag, original, fresh, tmp_path):
    """Noisy vectors imported for corpus cit; its twin corpus (the same texts under another name, never imported)
    is indexed on TA and A with its own encodes: not labelled imported, none of cit's vectors, and not refused for
    lacking an import of A; cit's own index carries cit's import."""
    from evalctl.corpus.importer import import_corpus
    from evalctl.indexers.index_layout import index_name
    from evalctl.indexers.index_loader import read_manifest

    import_corpus("native", [original["root"] / "cit.jsonl"], name=f"twin-{tag}")
    cit = original["exports"][f"cit-{tag}"]
    ids, vectors = (cit / "ids.txt").read_text().split(), np.load(cit / "vectors.npy")
    noisy = _noisy(vectors)
    i, j = _twins(vectors)
    noisy[j] = noisy[i]  # family twins of one text: one vector
    np.save(tmp_path / "noisy.npy", noisy)
    _ok("vectors", "import", "--corpus", f"cit-{tag}", "--model", MODEL, "--view", "TA",
        "--npy", tmp_path / "noisy.npy", "--ids", cit / "ids.txt", "--precision", "float32")
    _ok("index", "--corpus", f"twin-{tag}", "--model", MODEL, "--view", "TA", "--view", "A")
    twin = read_manifest(os_client, index_name(f"twin-{tag}", MODEL))
    assert twin["encoding_versions"] != "imported" and "vectors_import" not in twin, twin
    np.testing.assert_allclose(_index_vectors(os_client, f"twin-{tag}", ids), vectors, atol=1e-4)
    _ok("index", "--corpus", f"cit-{tag}", "--model", MODEL, "--view", "TA")
    own = read_manifest(os_client, index_name(f"cit-{tag}", MODEL))
    assert own["encoding_versions"] == "imported" and [r["corpus"] for r in own["vectors_import"]["TA"]] == [f"cit-{tag}"]
    np.testing.assert_array_equal(_index_vectors(os_client, f"cit-{tag}", ids), noisy)


def test_same_text_with_different_vectors_is_refused_naming_both_ids(tag, original, fresh, tmp_path):
    """Records 0 and 1 carry one text: given different vectors for them, the import is refused (as merge refuses
    it), naming both ids, and nothing is written."""
    cit = original["exports"][f"cit-{tag}"]
    ids, vectors = (cit / "ids.txt").read_text().split(), np.load(cit / "vectors.npy")
    i, j = _twins(vectors)
    vectors[j] = _noisy(vectors[j:j + 1])[0]
    np.save(tmp_path / "clash.npy", vectors)
    res = _cli("vectors", "import", "--corpus", f"cit-{tag}", "--model", MODEL, "--view", "TA",
               "--npy", tmp_path / "clash.npy", "--ids", cit / "ids.txt", "--precision", "float32")
    assert res.exit_code == 2 and "different vectors" in res.output, res.output
    assert repr(ids[i]) in res.output and repr(ids[j]) in res.output, res.output
    assert not (fresh["cache"] / "embeddings").exists()


def _entry_files(cache):
    return sorted(p.relative_to(cache).as_posix() for p in (cache / "embeddings").rglob("*") if p.is_file())


_KILLED_IMPORT = """
import os, signal, sys
from pathlib import Path
import numpy as np
from evalctl.indexers import embedding_cache
from evalctl.cli.main import cli

real_save, real_record = embedding_cache._atomic_save, embedding_cache.EmbeddingCache.record_run

def save_then_die(path, array):  # kill -9 while the shard's hashes (its commit point) are half written
    if path.name.endswith(".hashes.npy"):
        with embedding_cache.writing(path) as tmp, open(tmp, "wb") as f:
            np.save(f, array)
            f.flush()
            os.kill(os.getpid(), signal.SIGKILL)
    real_save(path, array)

def record_then_die(self, run):  # kill -9 once the shard is committed, before its import record
    os.kill(os.getpid(), signal.SIGKILL)

if sys.argv[1] == "mid-commit":
    embedding_cache._atomic_save = save_then_die
else:
    embedding_cache.EmbeddingCache.record_run = record_then_die
cli(sys.argv[2:])
"""


def test_killed_or_empty_import_is_not_labelled_imported(os_client, tag, original, fresh, tmp_path):
    """A 0-row import is refused with nothing written. An import killed (-9) mid-commit or after its commit
    leaves no import record, so `index` encodes here and does not say `imported`; the next import removes the
    killed one's temporary and orphan shard files and records itself."""
    import subprocess
    import sys

    from evalctl.indexers.index_layout import index_name
    from evalctl.indexers.index_loader import read_manifest

    cit = original["exports"][f"cit-{tag}"]
    common = ["vectors", "import", "--corpus", f"cit-{tag}", "--model", MODEL, "--view", "TA", "--precision", "float32"]
    np.save(tmp_path / "empty.npy", np.zeros((0, 384), dtype=np.float32))
    (tmp_path / "empty.txt").write_text("")
    res = _cli(*common, "--npy", tmp_path / "empty.npy", "--ids", tmp_path / "empty.txt")
    assert res.exit_code == 2 and "no rows" in res.output, res.output
    assert not (fresh["cache"] / "embeddings").exists()

    given = ["--npy", str(cit / "vectors.npy"), "--ids", str(cit / "ids.txt")]
    for point in ("mid-commit", "after-commit"):
        proc = subprocess.run([sys.executable, "-c", _KILLED_IMPORT, point, *common, *given], capture_output=True)
        assert proc.returncode == -9, (point, proc.stderr.decode()[-2000:])
        files = _entry_files(fresh["cache"])
        runs = [(fresh["cache"] / f).read_text() for f in files if "/runs/" in f]
        assert not any('"import"' in r for r in runs), (point, runs)
        if point == "mid-commit":  # what a kill leaves: a temporary and a vectors file without its hashes
            assert any(f.rsplit("/", 1)[1].startswith(".") for f in files), files
            assert any(f.endswith(".vectors.npy") for f in files) and not any(f.endswith(".hashes.npy") for f in files)
            _ok("index", "--corpus", f"cit-{tag}", "--model", MODEL, "--view", "TA")
            manifest = read_manifest(os_client, index_name(f"cit-{tag}", MODEL))
            assert manifest["encoding_versions"] != "imported" and "vectors_import" not in manifest, manifest
            os_client.indices.delete(index=index_name(f"cit-{tag}", MODEL))
    _ok(*common, *given)
    files = [Path(f) for f in _entry_files(fresh["cache"])]
    assert not any(f.name.startswith(".") for f in files), files
    stems = {kind: {f.parent / f.name.split(".")[0] for f in files if f.name.endswith(f".{kind}.npy")}
             for kind in ("vectors", "hashes")}
    assert stems["vectors"] == stems["hashes"], files  # no orphan shard file
    _ok("index", "--corpus", f"cit-{tag}", "--model", MODEL, "--view", "TA")
    manifest = read_manifest(os_client, index_name(f"cit-{tag}", MODEL))
    assert manifest["encoding_versions"] == "imported" and len(manifest["vectors_import"]["TA"]) == 1, manifest
