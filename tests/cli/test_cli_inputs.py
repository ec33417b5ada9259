"""Issue 25, inputs: each case replayed through the real CLI on real patent text (datasets of the
catalogue, tests/real_data.py), asserting no traceback, the exit code, the exact records kept, and a message naming the option,
record or path.

- an index left half-loaded by a client killed (SIGKILL) mid-load: `index verify` says what is missing and
  which command loads it;
- out-of-range task options (classify, cluster, finetune): usage errors naming the option;
- a full or read-only disk under `corpus qrels`, `encode` and `dashboards export`: one message naming the path,
  nothing half-written. The disk is real: a tmpfs of a few KB (or mounted read-only) in a private mount
  namespace (`unshare -m`, as root; `unshare -Urm` otherwise), which only that one command sees; skipped where
  neither is allowed;
- `corpus import --overwrite` while `retrieve` reads that corpus: the mismatch is one message;
- a UTF-8 byte-order mark in front of every text format (native JSONL, CSV, BEIR, OPS) keeps the first record;
- a text longer than OpenSearch's 50,000,000-character string limit is refused at import as a malformed row,
  and a NaN title is recorded as a bad value, not silently emptied.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import click
import pytest
from click.testing import CliRunner

from conftest import LENS
from evalctl.cli.main import cli
from real_data import ESPACENET_SAMPLE, OPS, USPTO_SAMPLE

PIZZA = ESPACENET_SAMPLE  # 12 records (11 titled), 3 citation queries
USPTO = USPTO_SAMPLE  # 4 grants with titles, abstracts and claims
OPS_PAGE = OPS / "pizza_1990-2000_p01.json.gz"
EVALCTL = Path(sys.executable).with_name("evalctl")
BOM = "\ufeff"


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A private cache, config and index prefix (so the shared node's other indexes are never touched)."""
    prefix = f"hin{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("EVALCTL_CONFIG", str(tmp_path / "config.yaml"))
    monkeypatch.setenv("EVALCTL_INDEX_PREFIX", prefix)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for var in ("EVALCTL_RESULTS", "EVALCTL_DEFAULT_CORPUS"):
        monkeypatch.delenv(var, raising=False)
    return SimpleNamespace(root=tmp_path, cache=tmp_path / "cache", prefix=prefix)


@pytest.fixture
def indexes(home, os_client):
    """The node, and this test's indexes deleted after it."""
    yield os_client
    os_client.indices.delete(index=f"{home.prefix}-*", ignore_unavailable=True)


def invoke(*args):
    out = CliRunner().invoke(cli, [str(a) for a in args])
    assert "Traceback" not in out.output, out.output
    assert out.exception is None or isinstance(out.exception, SystemExit), repr(out.exception)
    return out


def imported(name: str):
    from evalctl.corpus.store import load_corpus

    corpus = load_corpus(name)
    problems = [json.loads(line) for line in (corpus.path / "problems.jsonl").read_text().splitlines()]
    return corpus, problems


def import_ok(fmt: str, name: str, *sources) -> None:
    out = invoke("corpus", "import", "--format", fmt, "--name", name, *sources)
    assert out.exit_code == 0, out.output


def write_jsonl(path: Path, rows: list[dict], encoding: str = "utf-8") -> Path:
    with open(path, "w", encoding=encoding) as f:
        f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    return path


def record_dicts(name: str) -> list[dict]:
    return [r.to_dict() for r in imported(name)[0].records()]


# --------------------------------------------------------------------------- a half-loaded index

# A client that loads the first documents of the corpus through evalctl's own loader and is then killed with
# SIGKILL (no finally block, no cleanup: what a `kill -9` or a lost machine leaves behind).
KILLED_LOAD = """
import dataclasses, os, signal, sys, time
from evalctl.corpus.store import load_corpus
from evalctl.corpus.views import load_views
from evalctl.indexers.index_layout import BulkSettings, index_name, load_index_settings
from evalctl.indexers.index_loader import index_corpus
from evalctl.models import get_model
from evalctl.opensearch.connection import make_client

corpus, model, client = load_corpus(sys.argv[1]), get_model("all-minilm-l6-v2"), make_client()
name, n = index_name(corpus.name, model.id), int(sys.argv[2])

def acknowledged():
    return client.indices.stats(index=name, metric="indexing")["_all"]["primaries"]["indexing"]["index_total"]

class KilledAfter:
    def __getattr__(self, item):
        return getattr(corpus, item)

    def __len__(self):
        return len(corpus)

    def records(self, columns=None):
        for i, r in enumerate(corpus.records(columns)):
            if i == 2 * n:  # n documents sent in their own request, the next n being prepared
                deadline = time.monotonic() + 60
                while acknowledged() < n and time.monotonic() < deadline:
                    time.sleep(0.05)
                os.kill(os.getpid(), signal.SIGKILL)
            yield r

settings = dataclasses.replace(load_index_settings(), bulk=BulkSettings(max_docs=n))
index_corpus(client, KilledAfter(), [load_views()["T"]], model, chunk_docs=n, settings=settings, progress=False)
"""


@pytest.mark.models
def test_verify_reports_an_index_half_loaded_by_a_killed_client(home, indexes):
    from evalctl.indexers.index_layout import index_name

    import_ok("espacenet", "pz", PIZZA)
    killed = subprocess.run([sys.executable, "-c", KILLED_LOAD, "pz", "4"], capture_output=True, text=True, timeout=300)
    assert killed.returncode == -9, killed.stderr
    name = index_name("pz", "all-minilm-l6-v2")
    indexes.indices.refresh(index=name)
    loaded = indexes.count(index=name)["count"]
    assert 4 <= loaded < 12

    out = invoke("index", "verify", "--corpus", "pz", "--model", "all-minilm-l6-v2")
    assert out.exit_code == 2, out.output
    assert f"FAIL  documents: index {loaded}, corpus 12: {12 - loaded} not loaded" in out.output
    assert re.search(r"FAIL  vec_T: \d+ of 12 sampled records have no vector in the index", out.output), out.output
    rerun = "evalctl index --corpus pz --model all-minilm-l6-v2 --view T"
    assert f"`{rerun}` loads only what is missing" in out.output
    # the command it names completes the index, keeping what was loaded
    done = invoke(*rerun.split()[1:])
    assert done.exit_code == 0 and f"{loaded} already present" in done.output, done.output
    again = invoke("index", "verify", "--corpus", "pz", "--model", "all-minilm-l6-v2")
    assert again.exit_code == 0 and "FAIL" not in again.output, again.output


# --------------------------------------------------------------------------- options out of range


@pytest.mark.parametrize("args, option", [
    (("classify", "--model", "m", "--knn-k", "0"), "--knn-k"),
    (("classify", "--model", "m", "--min-support", "-1"), "--min-support"),
    (("classify", "--model", "m", "--min-support", "0"), "--min-support"),  # was silently the label set's own
    (("classify", "--model", "m", "--test-size", "nan"), "--test-size"),
    (("cluster", "--model", "m", "--min-support", "0"), "--min-support"),
    (("cluster", "--model", "m", "--levels", "class,bogus"), "--levels"),
    (("finetune", "--model", "m", "--recipe", "R3", "--corpus", "c", "--batch-size", "0"), "--batch-size"),
    (("finetune", "--model", "m", "--recipe", "R3", "--corpus", "c", "--lr", "nan"), "--lr"),
    (("finetune", "--model", "m", "--recipe", "R3", "--corpus", "c", "--lr", "-1e-5"), "--lr"),
    (("finetune", "--model", "m", "--recipe", "R3", "--corpus", "c", "--epochs", "inf"), "--epochs"),
    (("pairs", "--recipe", "R3", "--corpus", "c", "--match-size", "0"), "--match-size"),
    (("latency", "--corpus", "c", "--method", "bm25", "--concurrency", "1,,4"), "--concurrency"),  # was 1,4
    # a pool of 99,999,999 connections was made before anything was checked: minutes, then no answer
    (("latency", "--corpus", "c", "--method", "bm25", "--concurrency", "1,99999999"), "--concurrency"),
    (("retrieve", "--corpus", "c", "--method", "bm25", "--view", "T", "--concurrency", "100000"), "--concurrency"),
    (("cluster", "--model", "m", "--levels", "class,"), "--levels"),
])
def test_an_option_out_of_range_is_a_usage_error_naming_it(home, args, option):
    out = invoke(*args)
    assert out.exit_code == 2, out.output
    assert f"Invalid value for '{option}'" in out.output
    assert not home.cache.exists()  # refused before anything ran


def test_cluster_levels_are_parsed_into_known_levels(home):
    from evalctl.cli.params import CommaChoices
    from evalctl.corpus.class_codes import LEVELS

    assert CommaChoices(LEVELS).convert(" section, class ", None, None) == ("section", "class")
    assert CommaChoices(LEVELS).convert("", None, None) == ()
    with pytest.raises(click.BadParameter, match="empty item"):
        CommaChoices(LEVELS).convert("section,,class", None, None)


# --------------------------------------------------------------------------- a full or read-only disk


@pytest.fixture(scope="session")
def private_mounts() -> list[str]:
    """unshare's arguments for a private mount namespace, where a tmpfs can be mounted for one command."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    cmd = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-Urm"]
    with tempfile.TemporaryDirectory() as d:
        probe = subprocess.run([*cmd, "mount", "-t", "tmpfs", "-o", "size=4k", "tmpfs", d], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"no private mount namespace here ({' '.join(cmd)}: {probe.stderr.decode().strip()})")
    return cmd


def on_small_disk(namespace: list[str], folder: Path, options: str, *args) -> tuple[int, str, list[str]]:
    """Run `evalctl ARGS` with `folder` on a new tmpfs mounted with `options` (size=8k: full after a few KB;
    ro: read-only) that only this command sees. Returns the exit code, its output, and what the tmpfs held
    when it ended."""
    folder.mkdir(parents=True, exist_ok=True)
    script = ('mount -t tmpfs -o "$1" tmpfs "$2" || exit 99; dir="$2"; shift 2; "$@"; rc=$?; echo @@left; '
              'find "$dir" -mindepth 1 -printf "%P\\n"; exit $rc')
    p = subprocess.run([*namespace, "sh", "-c", script, "sh", options, str(folder), str(EVALCTL), *map(str, args)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode != 99, p.stderr
    out, _, left = p.stdout.partition("@@left\n")
    assert "Traceback" not in p.stderr, p.stderr
    return p.returncode, out + p.stderr, left.split()


@pytest.mark.data  # a real export, fetched through the catalogue (tests/real_data.py)
@pytest.mark.parametrize("options, says", [("size=8k", "no space left on the device (ENOSPC)"),
                                           ("ro", "the file system is read-only (EROFS)")])
def test_corpus_qrels_on_a_full_or_read_only_disk(home, private_mounts, options, says):
    import_ok("espacenet", "pz", PIZZA)
    qrels = home.cache / "corpora" / "pz" / "qrels"
    rc, out, left = on_small_disk(private_mounts, qrels, options, "corpus", "qrels", "pz")
    assert rc == 1, out
    assert f"Error: {qrels / 'citations'}: {says}; nothing was written there" in out, out
    assert left == []  # not even a staging folder
    done = invoke("corpus", "qrels", "pz")  # the disk was the only problem
    assert done.exit_code == 0 and "pairs 3" in done.output, done.output


@pytest.mark.models
def test_encode_on_a_full_disk(home, private_mounts):
    import_ok("espacenet", "pz", PIZZA)
    embeddings = home.cache / "embeddings"
    args = ("encode", "--corpus", "pz", "--model", "all-minilm-l6-v2", "--view", "T")
    rc, out, left = on_small_disk(private_mounts, embeddings, "size=8k", *args)
    assert rc == 1, out
    assert re.search(rf"Error: {re.escape(str(embeddings))}/all-minilm-l6-v2/\w+/[\w-]+\.vectors\.npy: no space left "
                     r"on the device \(ENOSPC\); nothing was written there", out), out
    assert not [f for f in left if f.endswith(".npy")], left  # no shard, not half of one
    done = invoke(*args)
    assert done.exit_code == 0 and "11 encoded" in done.output, done.output


def test_dashboards_export_on_a_full_disk(home, indexes, private_mounts):
    import_ok("espacenet", "pz", PIZZA)
    assert invoke("index", "--corpus", "pz", "--view", "T").exit_code == 0
    full = home.root / "objects.ndjson"
    assert invoke("dashboards", "export", "--out", full).exit_code == 0
    assert full.stat().st_size > 4096  # more than the small disk holds
    out_dir = home.root / "out"
    rc, out, left = on_small_disk(private_mounts, out_dir, "size=4k", "dashboards", "export", "--out",
                                  out_dir / "objects.ndjson")
    assert rc == 1, out
    assert f"Error: {out_dir / 'objects.ndjson'}: no space left on the device (ENOSPC)" in out, out
    assert left == []  # no half file


# --------------------------------------------------------------------------- corpus replaced under a retrieve


def test_corpus_replaced_while_retrieve_reads_it(home, indexes):
    import_ok("lens", "lens", LENS)  # 997 records
    assert invoke("corpus", "qrels", "lens", "--source", "known-item", "--within-view", "T",
                  "--dev-fraction", "0").exit_code == 0
    assert invoke("index", "--corpus", "lens", "--view", "T").exit_code == 0
    smaller = write_jsonl(home.root / "smaller.jsonl", record_dicts("lens")[:100])
    # two queries per request, one request at a time: the searches take seconds, the import one
    retrieve = subprocess.Popen([EVALCTL, "retrieve", "--corpus", "lens", "--method", "bm25", "--view", "T",
                                 "--split", "all", "--batch-size", "2", "--concurrency", "1"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.extend(iter(lambda: retrieve.stderr.read(1), "")), daemon=True)
    reader.start()
    deadline = time.monotonic() + 120
    while "/997" not in "".join(err) and retrieve.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # the progress bar: the query set is loaded, searching starts
    assert invoke("corpus", "import", "--format", "native", "--name", "lens", "--overwrite", smaller).exit_code == 0
    assert retrieve.poll() is None, "the retrieve ended before the corpus was replaced: nothing was tested"
    stdout = retrieve.stdout.read()
    rc = retrieve.wait(timeout=300)
    reader.join(timeout=10)
    stderr = "".join(err)
    assert "Traceback" not in stderr, stderr
    assert rc == 2, stderr
    assert re.search(r"Error: run bm25-bm25-T-all-\w+ was made on version sha256:\w+ of corpus 'lens', which has "
                     r"since been replaced by sha256:\w+", stderr), stderr
    assert re.search(r"^run bm25-bm25-T-all-\w+ ", stdout, re.M)  # the run is kept
    assert imported("lens")[0].manifest["record_count"] == 100


# --------------------------------------------------------------------------- a byte-order mark


def _bom_native(root: Path) -> tuple[str, list[Path], list[Path]]:
    import_ok("espacenet", "src", PIZZA)
    rows = record_dicts("src")
    return "native", [write_jsonl(root / "plain.jsonl", rows)], [write_jsonl(root / "bom.jsonl", rows, "utf-8-sig")]


def _bom_csv(root: Path) -> tuple[str, list[Path], list[Path]]:
    text = USPTO.read_text(encoding="utf-8")
    header, rest = text.split("\n", 1)
    quoted = ",".join(f'"{h}"' for h in header.split(","))  # Excel quotes the header too
    (root / "bom.csv").write_text(BOM + quoted + "\n" + rest, encoding="utf-8")
    return "uspto", [USPTO], [root / "bom.csv"]


def _bom_beir(root: Path) -> tuple[str, list[Path], list[Path]]:
    import_ok("espacenet", "src", PIZZA)
    assert invoke("corpus", "qrels", "src", "--dev-fraction", "0").exit_code == 0
    assert invoke("corpus", "export", "src", root / "plain", "--format", "beir", "--view", "T").exit_code == 0
    shutil.copytree(root / "plain", root / "bom")
    for f in [root / "bom" / "corpus.jsonl", root / "bom" / "queries.jsonl", *(root / "bom" / "qrels").glob("*.tsv")]:
        f.write_text(BOM + f.read_text(encoding="utf-8"), encoding="utf-8")
    return "beir", [root / "plain"], [root / "bom"]


def _bom_ops(root: Path) -> tuple[str, list[Path], list[Path]]:
    (root / "bom.json").write_text(BOM + gzip.decompress(OPS_PAGE.read_bytes()).decode("utf-8"), encoding="utf-8")
    return "ops", [OPS_PAGE], [root / "bom.json"]


@pytest.mark.data  # a real export, fetched through the catalogue (tests/real_data.py)
@pytest.mark.parametrize("make", [_bom_native, _bom_csv, _bom_beir, _bom_ops], ids=["native", "csv", "beir", "ops"])
def test_a_byte_order_mark_keeps_the_first_record(home, make):
    fmt, plain, with_bom = make(home.root)
    import_ok(fmt, "plain", *plain)
    import_ok(fmt, "bom", *with_bom)
    (a, a_problems), (b, b_problems) = imported("plain"), imported("bom")
    assert len(b) == len(a) > 0
    assert b.content_hash == a.content_hash  # the same records, the first one included
    assert b.manifest["queries_count"] == a.manifest["queries_count"]
    assert [p["kind"] for p in b_problems] == [p["kind"] for p in a_problems]


# --------------------------------------------------------------------------- values OpenSearch cannot hold


@pytest.mark.slow  # imports texts over OpenSearch's limit through the CLI (9 s here)
def test_a_text_longer_than_opensearch_takes_is_refused_at_import(home):
    from evalctl.corpus.patent_record import MAX_INDEXED_CHARS, PatentRecord

    import_ok("uspto", "src", USPTO)
    rows = record_dicts("src")
    words = " ".join(r["abstract"] for r in rows)

    def sized(row: dict, chars: int) -> dict:
        """`row` with its abstract made as long as its text (all fields joined) must be `chars`."""
        rest = PatentRecord.from_dict({**row, "abstract": None}).text_chars() + 1
        text = (words * (chars // len(words) + 1))[:chars - rest]
        return {**row, "abstract": text[:-1] + "x"}  # never ends in a space (import strips it)

    too_long, at_limit = sized(rows[1], MAX_INDEXED_CHARS + 1), sized(rows[2], MAX_INDEXED_CHARS)
    src = write_jsonl(home.root / "big.jsonl", [rows[0], too_long, at_limit, rows[3]])
    out = invoke("corpus", "import", "--format", "native", "--name", "big", src)
    assert out.exit_code == 0, out.output[-2000:]
    corpus, problems = imported("big")
    assert [r.id for r in corpus.records()] == [rows[0]["id"], rows[2]["id"], rows[3]["id"]]
    assert problems == [{"kind": "malformed_row", "file": "big.jsonl", "line": 2, "row": None,
                         "field": "title/abstract/claims/description",
                         "message": f"{rows[1]['id']}: its text is 50,000,001 characters, over the 50,000,000 "
                                    "OpenSearch accepts in one string (a view joining its fields could never be "
                                    "indexed); record skipped"}]
    kept = next(r for r in corpus.records() if r.id == rows[2]["id"])
    assert kept.text_chars() == MAX_INDEXED_CHARS  # the limit itself is kept
    assert "malformed_row 1" in out.output


@pytest.mark.data  # a real export, fetched through the catalogue (tests/real_data.py)
def test_a_nan_title_is_recorded_as_missing(home):
    import_ok("uspto", "src", USPTO)
    rows = record_dicts("src")
    src = home.root / "nan.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in [{**rows[0], "title": float("nan")}, *rows[1:]]))
    assert "NaN" in src.read_text().splitlines()[0]  # as JSON writers (Python's, pandas') spell it
    out = invoke("corpus", "import", "--format", "native", "--name", "nan", src)
    assert out.exit_code == 0, out.output
    corpus, problems = imported("nan")
    first = next(corpus.records())
    assert (first.id, first.title, first.abstract) == (rows[0]["id"], None, rows[0]["abstract"])
    assert corpus.manifest["fields"]["title"] == len(rows) - 1
    assert problems == [{"kind": "bad_value", "file": "nan.jsonl", "line": 1, "row": None, "field": "title",
                         "message": "nan is not a text; left empty"}]


def test_a_config_file_far_larger_than_a_spec_is_refused_unread(home, monkeypatch):
    """A 5 MB models file took 20 s to parse on every command; one over 1 MiB is refused naming it, at once."""
    import time

    models = home.root / "my-models"
    models.mkdir()
    monkeypatch.setenv("EVALCTL_MODELS_DIR", str(models))
    big = models / "huge.yaml"
    big.write_text("models:\n" + "".join(f"  - {{id: m{i}, hf_id: org/m, revision: main, dim: 384}}\n"
                                         for i in range(30000)))
    t0 = time.monotonic()
    out = invoke("models", "list")
    assert out.exit_code == 2 and str(big) in out.output and "more than a config file holds" in out.output, out.output
    assert time.monotonic() - t0 < 5


def test_a_config_whose_aliases_expand_past_any_spec_is_refused_unexpanded(home, tmp_path):
    """Nine lines of nested YAML aliases mean 9^9 values: the spec took 91 s and a MemoryError, naming nothing."""
    import time

    levels = ["a: &a [" + ", ".join(['"x"'] * 9) + "]"] + [
        f"{b}: &{b} [" + ", ".join([f"*{a}"] * 9) + "]" for a, b in zip("abcdefg", "bcdefgh")]
    spec = tmp_path / "bomb.yaml"
    spec.write_text("name: bomb\n" + "\n".join(levels) + "\ndescription: [" + ", ".join(["*h"] * 9) + "]\n")
    t0 = time.monotonic()
    out = invoke("run", spec, "--dry-run")
    assert out.exit_code == 2 and str(spec) in out.output and "its aliases expand to" in out.output, out.output
    assert time.monotonic() - t0 < 30  # a hang guard: it ran out of memory after 91 s
    from evalctl.config_files import load_yaml

    small = tmp_path / "anchors.yaml"  # anchors a spec may use are read as ever
    small.write_text("base: &b {k: 1, views: [T, A]}\nx: *b\ny: {<<: *b, k: 2}\n")
    assert load_yaml(small) == {"base": {"k": 1, "views": ["T", "A"]}, "x": {"k": 1, "views": ["T", "A"]},
                                "y": {"k": 2, "views": ["T", "A"]}}
