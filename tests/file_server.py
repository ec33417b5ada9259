"""A real HTTP file server on the loopback for the download tests: serves a folder, answers Range requests (206),
can send slowly, and can misbehave on purpose, one fault per request in the order given ("503": a server error;
"cut": the headers and half the body, then the connection closes). Every request is recorded (path, Range)."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote


@dataclass
class Server:
    url: str
    requests: list[dict] = field(default_factory=list)


@contextmanager
def serving(root: Path, bytes_per_second: int | None = None, faults: list[str] | None = None):
    faults = list(faults or [])
    server = Server("")

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def do_GET(self):
            rng = self.headers.get("Range")
            server.requests.append({"path": self.path, "range": rng})
            fault = faults.pop(0) if faults else None
            if fault == "503":
                self.send_error(503, "busy")
                return
            path = root / unquote(self.path.split("?")[0]).lstrip("/")
            if not path.is_file():
                self.send_error(404, "not here")
                return
            data = path.read_bytes()
            start = int(rng.removeprefix("bytes=").split("-")[0]) if rng else 0
            if start >= len(data) and data:
                self.send_error(416, "range not satisfiable")
                return
            self.send_response(206 if rng else 200)
            if rng:
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            self.send_header("Content-Length", str(len(data) - start))
            self.end_headers()
            body = data[start:]
            if fault == "cut":
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
                self.close_connection = True
                return
            step = max(1, (bytes_per_second or len(body) or 1) // 20)
            for i in range(0, len(body), step):
                try:
                    self.wfile.write(body[i:i + step])
                except (BrokenPipeError, ConnectionResetError):
                    return
                if bytes_per_second:
                    time.sleep(step / bytes_per_second)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    server.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        httpd.shutdown()
        httpd.server_close()
