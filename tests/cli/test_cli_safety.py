"""Hostile but honest use (issue 16): names that try to be paths, secrets in URLs and configs, a node that
does not answer or dies mid-command, bad options, a model spec that lies about its dimension, damaged cache
shards, concurrent identical commands. Every case asserts: no traceback, a message naming what is wrong,
exit code 2 (bad input) or 1 (failure), nothing written outside the cache, no secret in any output or file.
CSV and per-value import cases are in corpus/test_corpus_bad_rows.py."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from evalctl.cli.main import cli
from real_data import ESPACENET_SAMPLE

pytestmark = pytest.mark.opensearch

PIZZA = ESPACENET_SAMPLE  # 12 records, 3 citation queries
CLOSED = "http://127.0.0.1:9"  # nothing listens on the discard port
SECRET = "s3cret-Pa55-" + uuid.uuid4().hex[:6]


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A private cache inside tmp_path/inside; everything else under tmp_path is 'outside' the cache."""
    cache = tmp_path / "inside" / "cache"
    monkeypatch.setenv("EVALCTL_CACHE", str(cache))
    monkeypatch.setenv("EVALCTL_CONFIG", str(tmp_path / "inside" / "config.yaml"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for var in ("EVALCTL_OPENSEARCH_USER", "EVALCTL_OPENSEARCH_PASSWORD", "EVALCTL_RESULTS"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def invoke(*args, env=None):
    out = CliRunner().invoke(cli, [str(a) for a in args], env=env)
    assert "Traceback" not in out.output, out.output
    assert out.exception is None or isinstance(out.exception, SystemExit), repr(out.exception)
    return out


def outside_listing(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if not str(p.relative_to(root)).startswith("inside")}


def node_url() -> str:
    from evalctl.opensearch.connection import load_settings, resolve_url

    return resolve_url(load_settings())


@pytest.fixture
def pizza(home, os_client):
    """A uniquely named corpus of the 12 pizza patents with citation qrels; its indexes deleted after."""
    name = f"hz-{uuid.uuid4().hex[:8]}"
    assert invoke("corpus", "import", "--format", "espacenet", "--name", name, PIZZA).exit_code == 0
    assert invoke("corpus", "qrels", name).exit_code == 0
    yield name
    os_client.indices.delete(index=f"evalctl-{name}*", ignore_unavailable=True)


# --------------------------------------------------------------------------- (a) names never paths


@pytest.mark.parametrize("bad", ["x-../../../../outside", "../outside", "a/b", ".hidden", "a" * 300, "sp ace", ""])
def test_corpus_names_are_never_paths(home, bad):
    victim = home / "outside"
    victim.mkdir()
    (victim / "keep.txt").write_text("not a corpus")
    before = outside_listing(home)
    out = invoke("corpus", "import", "--format", "espacenet", "--name", bad, "--overwrite", PIZZA)
    assert out.exit_code == 2 and ("not a valid name" if bad else "give the corpus a --name") in out.output
    assert outside_listing(home) == before and (victim / "keep.txt").read_text() == "not a corpus"


def test_overwrite_replaces_only_a_corpus(home):
    folder = home / "mine"
    folder.mkdir()
    (folder / "thesis.tex").write_text("precious")
    out = invoke("corpus", "import", "--format", "espacenet", "--out", folder, "--name", "ok", "--overwrite", PIZZA)
    assert out.exit_code == 2 and "is not an evalctl corpus" in out.output
    assert sorted(p.name for p in folder.iterdir()) == ["thesis.tex"]
    # An empty folder, or a corpus of ours, may be (re)written.
    empty = home / "empty"
    empty.mkdir()
    assert invoke("corpus", "import", "--format", "espacenet", "--out", empty, "--name", "ok", PIZZA).exit_code == 0
    assert json.loads((empty / "manifest.json").read_text())["record_count"] == 12


def test_other_names_are_checked(home):
    assert invoke("corpus", "import", "--format", "espacenet", "--name", "ok", PIZZA).exit_code == 0
    out = invoke("corpus", "qrels", "ok", "--name", "../../escape")
    assert out.exit_code == 2 and "qrels name '../../escape' is not a valid name" in out.output
    assert not (home / "inside" / "cache" / "corpora" / "escape").exists()
    from evalctl import results_store
    from evalctl.names import BadName

    with pytest.raises(BadName):
        results_store.write("runs", "../x", {"name": "n"}, {})
    # A result label is only a label: unsafe characters are replaced, the identity hash keeps it unique.
    r = results_store.write("runs", "ok", {"name": "../../a/b"}, {"f": "x"})
    assert r.path.parent == results_store.results_root() / "ok" / "runs" and r.path.name.startswith("_")


# --------------------------------------------------------------------------- (b) secrets


def test_secret_in_url_is_never_printed_or_stored(home, pizza, monkeypatch):
    from urllib.parse import urlparse

    u = urlparse(node_url())
    monkeypatch.setenv("EVALCTL_OPENSEARCH_URL", f"{u.scheme}://admin:{SECRET}@{u.netloc}")
    outputs = [invoke("opensearch", "status"), invoke("index", "--corpus", pizza),
               invoke("retrieve", "--method", "bm25", "--corpus", pizza, "--view", "T"), invoke("index", "status")]
    assert [o.exit_code for o in outputs] == [0, 0, 0, 0], [o.output for o in outputs]
    assert "as admin (password set)" in outputs[0].output
    monkeypatch.setenv("EVALCTL_OPENSEARCH_URL", f"http://admin:{SECRET}@127.0.0.1:9")
    outputs.append(invoke("opensearch", "status"))
    outputs.append(invoke("retrieve", "--method", "bm25", "--corpus", pizza, "--view", "T", "--rerun"))
    assert [o.exit_code for o in outputs[-2:]] == [1, 1]
    for o in outputs:
        assert SECRET not in o.output
    for f in (home / "inside").rglob("*"):
        if f.is_file():
            assert SECRET.encode() not in f.read_bytes(), f


def test_secret_in_config_is_never_echoed_and_readable_config_warns(home):
    from evalctl.opensearch.connection import load_settings

    cfg = home / "inside" / "config.yaml"
    cfg.parent.mkdir(parents=True, exist_ok=True)
    cfg.write_text(yaml.safe_dump({"opensearch": {"url": CLOSED, "username": "u", "password": [SECRET]}}))
    cfg.chmod(0o600)
    out = invoke("opensearch", "status")
    assert out.exit_code == 2 and "password" in out.output and SECRET not in out.output
    cfg.write_text(yaml.safe_dump({"opensearch": {"url": CLOSED, "username": "u", "password": SECRET}}))
    cfg.chmod(0o644)
    proc = subprocess.run([sys.executable, "-c", "from evalctl.opensearch.connection import load_settings; load_settings()"],
                          capture_output=True, text=True, env=os.environ.copy())
    assert proc.returncode == 0 and "readable by other users" in proc.stderr and "chmod 600" in proc.stderr
    assert SECRET not in proc.stderr
    cfg.chmod(0o600)
    proc = subprocess.run([sys.executable, "-c", "from evalctl.opensearch.connection import load_settings; load_settings()"],
                          capture_output=True, text=True, env=os.environ.copy())
    assert proc.returncode == 0 and proc.stderr == ""
    assert load_settings().password == SECRET and SECRET not in repr(load_settings())


def test_redact():
    from evalctl.opensearch.connection import redact

    assert redact(f"GET https://me:{SECRET}@h:9200/x failed", SECRET) == "GET https://***@h:9200/x failed"
    assert redact(f"value [{SECRET!r}] bad", [SECRET]) == "value *** bad"


def malformed_urls() -> list[str]:
    """URLs with a user:password written in every shape a user gets wrong: no scheme, a scheme missing its
    colon or a slash, another scheme, a password holding '/' or '@', a broken host or port, a host list."""
    prefixes = ("", "http:/", "https//", "http//", "//", "http:", "ftp://", "http://", "HTTPS://", "http:///")
    userinfos = (f"user:{SECRET}", f"user:a/{SECRET}", f"us@er:{SECRET}@x")
    hosts = ("127.0.0.1:9", "[::1:9", "127.0.0.1:99999")
    urls = [f"{p}{u}@{h}" for p in prefixes for u in userinfos for h in hosts]
    return urls + [f"{u},{CLOSED}" for u in urls[::7]] + [f"{CLOSED},{u}" for u in urls[::11]]


@pytest.mark.parametrize("variable, args", [("EVALCTL_OPENSEARCH_URL", ("index", "status")),
                                            ("EVALCTL_DASHBOARDS_URL", ("dashboards", "install"))])
def test_secret_in_a_malformed_url_is_never_printed_or_stored(home, monkeypatch, variable, args):
    """Whatever shape the URL has, no message (the URL parser's own included) and no file quotes the
    password; the OpenSearch URL is the closed port, so nothing reaches the shared node."""
    monkeypatch.setenv("EVALCTL_OPENSEARCH_URL", CLOSED)
    leaked = []
    for url in malformed_urls():
        monkeypatch.setenv(variable, url)
        out = invoke(*args)
        assert out.exit_code in (1, 2), (url, out.output)
        if SECRET in out.output:
            leaked.append((url, out.output))
    assert not leaked, leaked
    for f in home.rglob("*"):
        if f.is_file():
            assert SECRET.encode() not in f.read_bytes(), f


def test_redact_scrubs_userinfo_wherever_it_stands():
    from evalctl.opensearch.connection import redact

    for url in malformed_urls():
        for text in (url, repr(url), f"X={url}: bad", f"(Failed to parse: {url})", f"<{url}>"):
            assert SECRET not in redact(text), text
    assert redact("http://127.0.0.1:9200 and https//h:1 are kept") == "http://127.0.0.1:9200 and https//h:1 are kept"
    assert redact(f"E='https//user:{SECRET}@h:1': bad") == "E='https//***@h:1': bad"
    assert redact(f"E='user:{SECRET}@h:1'") == "E='***@h:1'"
    assert redact("ndcg@10=0.5, recall@100 0.7; mail me@example.org") == "ndcg@10=0.5, recall@100 0.7; mail me@example.org"
    # a model reference is no URL (hf:ORG/NAME@REVISION)
    kept = "model hf:BAAI/bge-small-en-v1.5@v1.0: not cached; 'hf:org/x@0123abcd'"
    assert redact(kept) == kept
    assert redact(f"hf:org/x@0123 https://user:{SECRET}@h:1") == "hf:org/x@0123 https://***@h:1"
    kept = "place it at models--org--x/refs/v1@x; hf:org/x@v1@x"  # a path, and a revision holding an @
    assert redact(kept) == kept



def test_redact_does_not_hang_on_a_long_word():
    """A bulk refusal may quote a whole text: a 1 MB word once took hours (each position rescanned the rest)."""
    import threading

    from evalctl.opensearch.connection import redact

    word = "x" * 1_000_000
    out = {}
    t = threading.Thread(target=lambda: out.update(r=redact(f"{word} {word}@ https://u:{SECRET}@h:1")), daemon=True)
    t.start()
    t.join(60)  # seconds to a few hours before: a hang, not a speed target
    assert not t.is_alive(), "redact hung on a 1 MB word"
    assert out["r"] == f"{word} {word}@ https://***@h:1"

# --------------------------------------------------------------------------- (c) messages, not tracebacks


NODE_COMMANDS = [
    ("retrieve", "--method", "bm25", "--corpus", "{c}", "--view", "T"),
    ("classify", "--corpus", "{c}", "--model", "all-minilm-l6-v2"),
    ("cluster", "--corpus", "{c}", "--model", "all-minilm-l6-v2"),
    ("vectors", "export", "--corpus", "{c}", "--model", "all-minilm-l6-v2"),
    ("index", "verify", "--corpus", "{c}"),
    ("index", "status"),
    ("index", "--corpus", "{c}"),
    ("opensearch", "status"),
]


def test_node_that_does_not_answer_is_named(home, monkeypatch):
    assert invoke("corpus", "import", "--format", "espacenet", "--name", "down", PIZZA).exit_code == 0
    assert invoke("corpus", "qrels", "down").exit_code == 0
    monkeypatch.setenv("EVALCTL_OPENSEARCH_URL", CLOSED)
    for args in NODE_COMMANDS:
        out = invoke(*(a.format(c="down") for a in args))
        assert out.exit_code == 1, (args, out.output)
        # a configured cluster: the advice is about that cluster (the managed node's is `opensearch start`)
        assert CLOSED in out.output and "unset EVALCTL_OPENSEARCH_URL" in out.output, (args, out.output)
        assert "during the load" not in out.output and "stopped answering" not in out.output


def test_debug_shows_the_traceback(home, monkeypatch):
    monkeypatch.setenv("EVALCTL_OPENSEARCH_URL", CLOSED)
    out = CliRunner().invoke(cli, ["--debug", "index", "status"])
    assert out.exit_code == 1 and out.exception.__class__.__name__ == "ConnectionError"


class DyingProxy:
    """A TCP proxy to the real node that forwards `requests` HTTP requests (those whose request line
    holds `only`, when given), then dies (closes everything)."""

    def __init__(self, target: str, requests: int, only: bytes = b""):
        from urllib.parse import urlparse

        t = urlparse(target)
        self.target = (t.hostname, t.port or 9200)
        self.left = requests
        self.only = only
        self.lock = threading.Lock()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self.conns += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, False), daemon=True).start()

    def _pipe(self, src, dst, counting):
        try:
            while data := src.recv(65536):
                line = data.split(b"\r\n", 1)[0]
                if counting and line.split(b" ", 1)[0] in (b"GET", b"POST", b"PUT", b"HEAD", b"DELETE") \
                        and self.only in line:
                    with self.lock:
                        self.left -= 1
                        if self.left < 0:
                            self.die()
                            return
                dst.sendall(data)
        except OSError:
            pass

    def die(self):
        self.server.close()
        for c in self.conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
                c.close()
            except OSError:
                pass


@pytest.mark.parametrize("after", [3, 8])
def test_node_lost_mid_index_keeps_what_was_loaded(home, pizza, os_client, monkeypatch, after):
    proxy = DyingProxy(node_url(), after)
    monkeypatch.setenv("EVALCTL_OPENSEARCH_URL", proxy.url)
    out = invoke("index", "--corpus", pizza, "--chunk-docs", "2")
    proxy.die()
    assert out.exit_code == 1 and "stopped answering during the command" in out.output, out.output
    assert proxy.url in out.output and "rerun the same command" in out.output
    monkeypatch.delenv("EVALCTL_OPENSEARCH_URL")
    assert invoke("index", "--corpus", pizza).exit_code == 0
    index = f"evalctl-{pizza}--bm25"
    os_client.indices.refresh(index=index)
    assert os_client.count(index=index)["count"] == 12


def test_node_lost_mid_retrieve(home, pizza, monkeypatch):
    assert invoke("index", "--corpus", pizza).exit_code == 0
    proxy = DyingProxy(node_url(), 2, only=b"_msearch")  # dies at the third of three query batches
    monkeypatch.setenv("EVALCTL_OPENSEARCH_URL", proxy.url)
    out = invoke("retrieve", "--method", "bm25", "--corpus", pizza, "--view", "T", "--split", "all",
                 "--batch-size", "1")
    proxy.die()
    assert out.exit_code == 1 and "stopped answering during the command" in out.output, out.output


def test_bad_numbers_are_messages(home, pizza):
    for args, msg in [(("--k", "0"), "--k 0: must be between 1 and 10000"),
                      (("--k", "100000"), "--k 100000: must be between 1 and 10000"),
                      (("--batch-size", "0"), "--batch-size")]:
        out = invoke("retrieve", "--method", "bm25", "--corpus", pizza, "--view", "T", *args)
        assert out.exit_code == 2 and msg in out.output, out.output
    out = invoke("index", "--corpus", pizza, "--batch-size", "0")
    assert out.exit_code == 2 and "--batch-size" in out.output and "0 is not in the range x>=1" in out.output


@pytest.fixture
def wrong_dim_model(home):
    from dataclasses import asdict

    from evalctl.models import get_model, registered_dir

    spec = json.loads(json.dumps(asdict(get_model("all-minilm-l6-v2")), default=list))
    spec = {k: v for k, v in spec.items() if v is not None}
    spec.update(id="minilm-says-512", dim=512)
    registered_dir().mkdir(parents=True, exist_ok=True)
    (registered_dir() / "minilm-says-512.yaml").write_text(yaml.safe_dump({"models": [spec]}))
    return "minilm-says-512"


@pytest.mark.models
def test_model_dim_mismatch_refused_before_an_index_exists(home, pizza, os_client, wrong_dim_model):
    out = invoke("index", "--corpus", pizza, "--model", wrong_dim_model, "--view", "T")
    assert out.exit_code == 2 and "384-dim" in out.output and "512" in out.output, out.output
    assert not os_client.indices.exists(index=f"evalctl-{pizza}--{wrong_dim_model}")


@pytest.mark.models
@pytest.mark.parametrize("damage", ["truncate", "wrong-width"])
def test_damaged_cache_shard_is_named(home, pizza, damage):
    import numpy as np

    encode = ("encode", "--corpus", pizza, "--model", "all-minilm-l6-v2", "--view", "T")
    assert invoke(*encode).exit_code == 0
    shard = next((home / "inside" / "cache").rglob("*.vectors.npy"))
    if damage == "truncate":
        shard.write_bytes(shard.read_bytes()[:200])
    else:
        np.save(shard, np.zeros((12, 100), dtype=np.float32))
    out = invoke(*encode)
    assert out.exit_code == 1 and shard.name in out.output and "remove" in out.output, out.output


# --------------------------------------------------------------------------- (d) concurrency


def _evalctl(*args):
    return subprocess.Popen([sys.executable, "-c", "from evalctl.cli.main import main; main()", *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=os.environ.copy())


def _all_ok(procs):
    outs = [p.communicate(timeout=300)[0] for p in procs]
    for p, o in zip(procs, outs):
        assert p.returncode == 0 and "Traceback" not in o, o
    return outs


def test_concurrent_index_of_a_new_index(home, pizza, os_client):
    _all_ok([_evalctl("index", "--corpus", pizza) for _ in range(3)])
    index = f"evalctl-{pizza}--bm25"
    os_client.indices.refresh(index=index)
    assert os_client.count(index=index)["count"] == 12


def test_concurrent_identical_reruns(home, pizza):
    from evalctl import results_store

    assert invoke("index", "--corpus", pizza).exit_code == 0
    retrieve = ("retrieve", "--method", "bm25", "--corpus", pizza, "--view", "T", "--split", "all")
    assert invoke(*retrieve).exit_code == 0
    _all_ok([_evalctl(*retrieve, "--rerun") for _ in range(3)])
    runs = list(results_store.iter_results("run", pizza))
    assert len(runs) == 1 and sum(1 for _ in runs[0].path.parent.iterdir()) == 1  # no leftovers
    assert len(runs[0].file("run.trec").read_text().splitlines()) > 0


def test_concurrent_identical_imports(home):
    from evalctl.corpus.store import load_corpus

    _all_ok([_evalctl("corpus", "import", "--format", "espacenet", "--name", "same", PIZZA) for _ in range(3)])
    assert len(load_corpus("same")) == 12
    assert [p.name for p in (home / "inside" / "cache" / "corpora").iterdir()] == ["same"]  # no leftovers


@pytest.mark.models
def test_two_runs_of_one_spec(home, os_client):
    name = f"hz-{uuid.uuid4().hex[:8]}"
    spec = home / "spec.yaml"
    spec.write_text(yaml.safe_dump({
        "name": "concurrent", "models": [{"id": "all-minilm-l6-v2"}],
        "corpora": [{"name": name, "format": "espacenet", "sources": [str(PIZZA)],
                     "qrels": {"name": "citations", "direction": "both", "dev_fraction": 0.0}}],
        "indexes": [{"corpus": name, "views": ["T"]}],
    }))
    try:
        outs = _all_ok([_evalctl("run", spec) for _ in range(2)])
        assert all("FAILED" not in o for o in outs), outs
        os_client.indices.refresh(index=f"evalctl-{name}--all-minilm-l6-v2")
        assert os_client.count(index=f"evalctl-{name}--all-minilm-l6-v2")["count"] == 12
    finally:
        os_client.indices.delete(index=f"evalctl-{name}*", ignore_unavailable=True)


# --------------------------------------------------------------------------- (g) a shared cluster


def test_index_prefix_keeps_caches_apart(home, pizza, os_client, monkeypatch):
    """Two caches with one corpus name but different data share the cluster under their own prefixes."""
    assert invoke("index", "--corpus", pizza).exit_code == 0  # the default prefix: evalctl
    other = home / "other-cache"
    monkeypatch.setenv("EVALCTL_CACHE", str(other))
    monkeypatch.setenv("EVALCTL_INDEX_PREFIX", "evalctl-bob")
    half = home / "half.csv"
    half.write_text("".join(PIZZA.read_text(encoding="latin-1").splitlines(keepends=True)[:6]), encoding="latin-1")
    assert invoke("corpus", "import", "--format", "espacenet", "--name", pizza, half).exit_code == 0
    try:
        assert invoke("index", "--corpus", pizza).exit_code == 0
        status = invoke("index", "status")
        assert "index prefix: evalctl-bob" in status.output and f"evalctl-bob-{pizza}--bm25" in status.output
        assert f"\nevalctl-{pizza}--bm25" not in status.output
        monkeypatch.delenv("EVALCTL_INDEX_PREFIX")
        status = invoke("index", "status")  # the default prefix lists its own indexes, not bob's
        assert f"evalctl-{pizza}--bm25" in status.output and "evalctl-bob-" not in status.output
        out = invoke("index", "delete", f"evalctl-bob-{pizza}--bm25", "--yes")
        assert out.exit_code == 2 and "not an evalctl index of prefix 'evalctl'" in out.output
        os_client.indices.refresh(index=f"evalctl-{pizza}--bm25,evalctl-bob-{pizza}--bm25")
        assert os_client.count(index=f"evalctl-{pizza}--bm25")["count"] == 12
        assert os_client.count(index=f"evalctl-bob-{pizza}--bm25")["count"] == 5
        monkeypatch.setenv("EVALCTL_INDEX_PREFIX", "Bad--Prefix")
        out = invoke("index", "status")
        assert out.exit_code == 2 and "EVALCTL_INDEX_PREFIX='Bad--Prefix'" in out.output
    finally:
        os_client.indices.delete(index=f"evalctl-bob-{pizza}*", ignore_unavailable=True)


def test_every_message_is_scrubbed(home, monkeypatch):
    monkeypatch.setenv("EVALCTL_DASHBOARDS_URL", f"http://kibana:{SECRET}@127.0.0.1:9")
    out = invoke("dashboards", "install")
    # the credentials are taken out of the URL (tests/opensearch/test_connection_faults.py checks where they go)
    assert out.exit_code != 0 and SECRET not in out.output and "kibana" not in out.output


def test_a_new_index_whose_every_document_is_refused_is_removed(home, os_client):
    """Every document refused by the node (here a family id longer than a term may be) left an empty index behind,
    which later commands took for a made one; the index the load created is removed, the refusals named."""
    import json

    name = f"hr-{uuid.uuid4().hex[:8]}"
    records = [{"id": f"P{i}", "title": f"pizza box {i}", "family_id": "F" * 40000 + str(i)} for i in range(3)]
    (home / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert invoke("corpus", "import", "--format", "native", "--name", name, home / "c.jsonl").exit_code == 0
    out = invoke("index", "--corpus", name, "--view", "T")
    assert out.exit_code == 2 and "3 documents were refused" in out.output and "immense term" in out.output
    assert not os_client.indices.get(index=f"evalctl-{name}*", ignore_unavailable=True)


def test_a_refusal_is_explained_from_the_cause_the_node_nests():
    """The node names a zero vector in the caused_by of its error, not in its reason: the advice was the record's."""
    from evalctl.indexers.index_loader import refusal_cause

    error = {"type": "mapper_parsing_exception", "reason": "failed to parse field [vec_TA] of type [knn_vector]",
             "caused_by": {"type": "illegal_argument_exception",
                           "reason": "zero vector is not supported when space type is [cosinesimil]"}}
    assert refusal_cause(error, b"").startswith("a vector of norm 0, which its space cannot score")
    assert refusal_cause({"type": "x", "reason": "immense term"}, b"") is None


def test_a_long_setting_is_named_without_printing_all_of_it(home):
    """A 200,000-character URL setting was printed whole (twice: the value and the parser's words)."""
    value = "a" * 200_000 + f" https://user:{SECRET}@127.0.0.1:9200"
    out = invoke("index", "status", env={"EVALCTL_OPENSEARCH_URL": value})
    assert out.exit_code == 2 and "EVALCTL_OPENSEARCH_URL=" in out.output and "characters left out" in out.output
    assert len(out.output) < 2000 and SECRET not in out.output, out.output[:3000]
