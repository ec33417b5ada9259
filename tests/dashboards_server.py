"""A stand-in for Dashboards' saved-objects import endpoint that records what it was sent (the `dashboards_server`
fixture: its URL and the Recorder), shared by the Dashboards tests and the connection-fault tests."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest


class Recorder(BaseHTTPRequestHandler):
    """Answers like Dashboards' import endpoint (`answer`, with HTTP `status`) and keeps what it was sent."""

    answer: dict = {}
    status = 200
    requests: list = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.requests.append({"method": self.command, "path": self.path, "headers": dict(self.headers), "body": body})
        payload = json.dumps(self.answer).encode()
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def dashboards_server():
    Recorder.requests = []
    server = HTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", Recorder
    server.shutdown()
    server.server_close()
