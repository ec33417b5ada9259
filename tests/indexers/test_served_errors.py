"""What a served model's errors show, against a real HTTP server on the loopback answering as a misbehaving
OpenAI-compatible endpoint would: never any part of the API key, wherever it stands in the answer."""

from __future__ import annotations

import dataclasses
import threading
import uuid
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

KEY = "sk-test-0123456789abcdefghijklmnopqrstu"  # 38 characters
SLASHED_KEY = "sk-test/0123456789/abcdefghijklmnopqrst"  # a JSON echo may write it with every '/' escaped


class _Endpoint(BaseHTTPRequestHandler):
    """A loopback endpoint's handler: quiet, reading the request body, answering with `answer`."""

    def log_message(self, *args):
        pass

    def body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length", 0)))

    def answer(self, status: int, body: bytes, **headers: str) -> None:
        self.send_response(status)
        for name, value in {**headers, "Content-Length": str(len(body))}.items():
            self.send_header(name.replace("_", "-"), value)
        self.end_headers()
        self.wfile.write(body)


@contextmanager
def _serving(handler):
    """`handler` answering on a loopback port; the endpoint's base URL."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def echoing_server():
    """Answers every request 401 with a body that quotes the key (as some gateways do) at the offset asked."""
    offsets = []

    class Handler(_Endpoint):
        def do_POST(self):
            self.body()
            at, form = offsets.pop(0)
            key = self.headers.get("Authorization", "").removeprefix("Bearer ")
            if form == "json":  # as PHP's json_encode writes it: every '/' escaped
                key = key.replace("/", "\\/")
            self.answer(401, ("x" * at + f"invalid key {key} " + "y" * 200).encode())

    with _serving(Handler) as url:
        yield url, offsets


@pytest.mark.parametrize("at, form", [(0, "plain"), (270, "plain"), (279, "plain"), (290, "plain"), (299, "plain"),
                                      (4096 - 30, "plain"), (0, "json"), (290, "json"), (4096 - 30, "json")])
def test_an_error_answer_never_shows_part_of_the_key(echoing_server, monkeypatch, at, form):
    from evalctl.indexers.served_encoder import EndpointError, ServedEncoder
    from evalctl.models import Endpoint, get_model

    url, offsets = echoing_server
    offsets.append((at, form))
    key = KEY if form == "plain" else SLASHED_KEY
    monkeypatch.setenv("EVALCTL_TEST_KEY", key)
    spec = dataclasses.replace(get_model("all-minilm-l6-v2"), path=None, offline=None, endpoint=Endpoint(
        url=url, model="m", revision="r", api_key_env="EVALCTL_TEST_KEY", retries=0))
    with pytest.raises(EndpointError) as e:
        ServedEncoder(spec).check_dim()
    shown = str(e.value)
    assert "HTTP 401" in shown and "EVALCTL_TEST_KEY" in shown
    fragments = {key[:n] for n in range(6, len(key) + 1)} | {key.replace("/", "\\/")[:n] for n in range(6, len(key) + 1)}
    assert not any(f in shown for f in fragments), shown  # "sk-tes..." never


USER_SPEC = """\
models:
  - id: zero-served
    hf_id: sentence-transformers/all-MiniLM-L6-v2
    revision: 8b3219a92973c328a8e22fadcfa821b5dc75636a
    family: sbert-all
    params_m: 22.7
    dim: 4
    max_seq_length: 256
    pooling: mean
    normalize: true
    similarity: cosine
    dtype: float32
    named_by_study: false
    source: a test server
    endpoint: {{url: "{url}", model: m, revision: r, retries: 0, max_texts: 8}}
"""


@pytest.fixture
def embedding_server():
    """An embeddings endpoint answering 4-d vectors: a zero one for a text holding ZERO while `zero` is set, float32's
    near-largest values for HUGE, NaN for NAN; its usage a string where a text holds USAGE."""
    import json

    state = {"zero": True, "asked": []}

    class Handler(_Endpoint):
        def do_POST(self):
            texts = json.loads(self.body())["input"]
            state["asked"] += texts
            data = [{"index": i, "embedding": [0.0] * 4 if "ZERO" in t and state["zero"] else
                     [3e38] * 4 if "HUGE" in t else [float("nan")] * 4 if "NAN" in t else [1.0, i + 1.0, 0.5, 0.0]}
                    for i, t in enumerate(texts)]
            usage = "n/a" if any("USAGE" in t for t in texts) else {"prompt_tokens": 7}
            self.answer(200, json.dumps({"data": data, "usage": usage}).encode())  # NaN written as NaN: no JSON

    with _serving(Handler) as url:
        yield url, state


def test_a_zero_vector_is_refused_on_arrival_and_never_cached(embedding_server, tmp_path, monkeypatch):
    import json

    from click.testing import CliRunner

    from evalctl.cli.main import cli

    url, state = embedding_server
    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("EVALCTL_MODELS_DIR", str(tmp_path / "models"))
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "mine.yaml").write_text(USER_SPEC.format(url=url))
    records = [{"id": f"P{i}", "title": f"A folding pizza box, variant {i}" + (" ZERO" if i == 2 else "")}
               for i in range(4)]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    run = CliRunner()
    assert run.invoke(cli, ["corpus", "import", "--format", "native", "--name", "z", str(tmp_path / "c.jsonl")]).exit_code == 0
    out = run.invoke(cli, ["encode", "--corpus", "z", "--model", "zero-served", "--view", "T"])
    assert out.exit_code == 1 and "vector(s) of norm 0" in out.output and "ZERO" in out.output, out.output
    assert "Traceback" not in out.output
    state.update(zero=False, asked=[])
    again = run.invoke(cli, ["encode", "--corpus", "z", "--model", "zero-served", "--view", "T"])
    assert again.exit_code == 0, again.output
    assert any("ZERO" in t for t in state["asked"])  # asked again: the refused answer was not cached


def test_timeout_s_bounds_a_whole_request_against_a_server_sending_a_byte_at_a_time(monkeypatch):
    """A server that answers at once but sends its answer a byte every 0.1 s: each try ends at timeout_s (1 s), not
    when the last byte comes (urllib3's read timeout counts between bytes)."""
    import time

    from evalctl.indexers.served_encoder import EndpointError, ServedEncoder
    from evalctl.models import Endpoint, get_model

    class Handler(_Endpoint):
        def do_POST(self):
            self.body()
            body = b'{"data": [{"index": 0, "embedding": [0.5, 0.5, 0.5, 0.5]}]}' + b" " * 100
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                for i in range(len(body)):
                    self.wfile.write(body[i:i + 1])
                    self.wfile.flush()
                    time.sleep(0.1)
            except (BrokenPipeError, ConnectionResetError):
                pass

    with _serving(Handler) as url:
        spec = dataclasses.replace(get_model("all-minilm-l6-v2"), path=None, offline=None, dim=4, endpoint=Endpoint(
            url=url, model="m", revision="r", timeout_s=1.0, retries=1, backoff_s=0.1))
        t0 = time.monotonic()
        with pytest.raises(EndpointError, match="failed 2 tries .*no whole answer within timeout_s 1 s"):
            ServedEncoder(spec, announce=lambda message: None).check_dim()
        assert time.monotonic() - t0 < 4  # two tries of 1 s and a back-off; the answer alone takes 16 s


@pytest.mark.opensearch
def test_a_load_that_fails_before_its_first_document_leaves_no_index(embedding_server, tmp_path, monkeypatch,
                                                                     os_client):
    """The server's zero vector comes after the index was created: the failed load removes the index it made empty,
    and the next load (the server mended) makes it and loads every record."""
    import json

    from click.testing import CliRunner

    from evalctl.cli.main import cli

    url, state = embedding_server
    prefix = f"zi{uuid.uuid4().hex[:8]}"
    for var, value in (("EVALCTL_CACHE", tmp_path / "cache"), ("EVALCTL_MODELS_DIR", tmp_path / "models"),
                       ("EVALCTL_INDEX_PREFIX", prefix)):
        monkeypatch.setenv(var, str(value))
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "mine.yaml").write_text(USER_SPEC.format(url=url))
    (tmp_path / "c.jsonl").write_text("".join(json.dumps({"id": f"P{i}", "title": f"A pizza box {i}" + (
        " ZERO" if i == 2 else "")}) + "\n" for i in range(4)))
    run = CliRunner()
    assert run.invoke(cli, ["corpus", "import", "--format", "native", "--name", "z", str(tmp_path / "c.jsonl")]).exit_code == 0
    try:
        out = run.invoke(cli, ["index", "--corpus", "z", "--model", "zero-served", "--view", "T"])
        assert out.exit_code == 1 and "vector(s) of norm 0" in out.output, out.output
        assert not os_client.indices.get(index=f"{prefix}-*", ignore_unavailable=True)
        state["zero"] = False
        again = run.invoke(cli, ["index", "--corpus", "z", "--model", "zero-served", "--view", "T"])
        assert again.exit_code == 0 and "loaded 4" in again.output.replace(",", ""), again.output
    finally:
        os_client.indices.delete(index=f"{prefix}-*", ignore_unavailable=True)


def _served(url: str, **endpoint):
    """A 4-d served model at `url` (no retries unless asked)."""
    from evalctl.indexers.served_encoder import ServedEncoder
    from evalctl.models import Endpoint, get_model

    ep = Endpoint(url=url, model="m", revision="r", **{"retries": 0, **endpoint})
    return ServedEncoder(dataclasses.replace(get_model("all-minilm-l6-v2"), path=None, offline=None, dim=4,
                                             endpoint=ep), announce=lambda message: None)


def test_huge_values_are_normalised_not_turned_into_a_zero_vector(embedding_server):
    """3e38 is a float32, but the float32 norm of four of them overflows: divided by it, the vector became 0."""
    import numpy as np

    url, _ = embedding_server
    got = _served(url).encode(["a HUGE text", "a plain one"], "").vectors
    assert np.allclose(got[0], [0.5] * 4) and np.allclose(np.linalg.norm(got, axis=1), 1.0)


def test_nan_in_an_answer_is_named(embedding_server):
    from evalctl.indexers.encode_options import PartlyEncoded

    url, _ = embedding_server
    with pytest.raises(PartlyEncoded, match="answered NaN where a number belongs"):
        _served(url).encode(["a NAN text"], "")


def test_an_answer_whose_usage_is_no_object_still_gives_its_vectors(embedding_server):
    url, _ = embedding_server
    enc = _served(url)
    assert enc.encode(["USAGE unknown"], "").vectors.shape == (1, 4) and enc.tokens == 0


def test_a_retry_after_that_is_no_number_is_ignored():
    """Retry-After '²' passed str.isdigit and failed float(): the message was "could not convert string to float"."""
    asked = []

    class Handler(_Endpoint):
        def do_POST(self):
            self.body()
            asked.append(1)
            self.answer(503 if len(asked) == 1 else 200, b'{"data": [{"index": 0, "embedding": [0.5, 0.5, 0.5, 0.5]}]}',
                        Retry_After="\u00b2".encode().decode("latin-1"))

    with _serving(Handler) as url:
        assert _served(url, retries=1, backoff_s=0.1).encode(["retried"], "").vectors.shape == (1, 4)
        assert len(asked) == 2
