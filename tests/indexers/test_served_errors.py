"""What a served model's errors show, against a real HTTP server on the loopback answering as a misbehaving
OpenAI-compatible endpoint would: never any part of the API key, wherever it stands in the answer."""

from __future__ import annotations

import dataclasses
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import threading

import pytest

KEY = "sk-test-0123456789abcdefghijklmnopqrstu"  # 38 characters


@pytest.fixture
def echoing_server():
    """Answers every request 401 with a body that quotes the key (as some gateways do) at the offset asked."""
    offsets = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            at = offsets.pop(0)
            body = ("x" * at + f"invalid key {self.headers.get('Authorization', '').removeprefix('Bearer ')} " +
                    "y" * 200).encode()
            self.send_response(401)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", offsets
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.parametrize("at", [0, 270, 279, 290, 299, 4096 - 30])
def test_an_error_answer_never_shows_part_of_the_key(echoing_server, monkeypatch, at):
    from evalctl.indexers.served_encoder import EndpointError, ServedEncoder
    from evalctl.models import Endpoint, get_model

    url, offsets = echoing_server
    offsets.append(at)
    monkeypatch.setenv("EVALCTL_TEST_KEY", KEY)
    spec = dataclasses.replace(get_model("all-minilm-l6-v2"), path=None, offline=None, endpoint=Endpoint(
        url=url, model="m", revision="r", api_key_env="EVALCTL_TEST_KEY", retries=0))
    with pytest.raises(EndpointError) as e:
        ServedEncoder(spec).check_dim()
    shown = str(e.value)
    assert "HTTP 401" in shown and "EVALCTL_TEST_KEY" in shown
    assert not any(KEY[:n] in shown for n in range(6, len(KEY) + 1)), shown  # "sk-tes..." never
