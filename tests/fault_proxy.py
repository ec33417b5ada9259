"""A fault-injecting HTTP proxy on 127.0.0.1 in front of a real OpenSearch node (a test fixture).

It forwards every request to the node unchanged, except that on command (`fail`) it answers the next
`times` requests (those whose "METHOD /path" holds `only`, after letting `after` of them through) with a
fault instead:

- "400", "429", "500", "502", "503", "504": that HTTP status with an OpenSearch-like JSON error body
- "garbage": 200 with `content-type: application/json` and a body that is not JSON (nor CBOR)
- "slow":    forwards the request after `delay` seconds
- "reset":   closes the connection with a TCP reset instead of answering
- "down":    from then on resets every open connection and refuses new ones (the node is gone)

With `keep_bodies`, it keeps each forwarded request's body and the status it was answered with (`answered`):
what a server really served, e.g. the texts an embedding server encoded.

Bounded: each fault is for a counted number of requests, and the proxy stops by itself after `lifetime`
seconds (or at `close()`, or leaving the `with` block), so a failed test never leaves it running.
"""

from __future__ import annotations

import http.client
import json
import socket
import struct
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

KINDS = ("400", "429", "500", "502", "503", "504", "garbage", "slow", "reset", "down")
# Per-connection headers (RFC 9110 7.6.1): each hop sets its own.
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade",
              "content-length"}


@dataclass
class Fault:
    kind: str
    times: int
    only: str
    after: int
    delay: float


class FaultProxy:
    def __init__(self, target: str = "http://127.0.0.1:9200", lifetime: float = 120.0, keep_bodies: bool = False):
        t = urlparse(target)
        self.target = (t.hostname, t.port or 9200)
        self.lock = threading.Lock()
        self.faults: list[Fault] = []
        self.seen: list[str] = []  # "METHOD /path" of every request received, faulted or not
        self.injected: list[str] = []  # "kind METHOD /path" of every fault applied
        self.keep_bodies = keep_bodies
        self.answered: list[tuple[str, bytes, int]] = []  # ("METHOD /path", body, status) forwarded and answered
        self.is_down = False
        self.sockets: set[socket.socket] = set()
        proxy = self

        class Handler(_Handler):
            owner = proxy

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        self._stopper = threading.Timer(lifetime, self.close)
        self._stopper.daemon = True
        self._stopper.start()

    def fail(self, kind: str, times: int = 1, *, only: str = "", after: int = 0, delay: float = 0.0) -> "FaultProxy":
        """Answer the next `times` matching requests (after `after` of them pass) with `kind`."""
        if kind not in KINDS:
            raise ValueError(f"fault {kind!r}: one of {', '.join(KINDS)}")
        with self.lock:
            self.faults.append(Fault(kind, times, only, after, delay))
        return self

    def clear(self) -> None:
        with self.lock:
            self.faults.clear()

    def _fault_for(self, request_line: str) -> Fault | None:
        with self.lock:
            self.seen.append(request_line)
            for f in self.faults:
                if f.only not in request_line:
                    continue
                if f.after > 0:
                    f.after -= 1
                    return None
                f.times -= 1
                if f.times <= 0 and f.kind != "down":
                    self.faults.remove(f)
                self.injected.append(f"{f.kind} {request_line}")
                return f
        return None

    def go_down(self) -> None:
        """Reset every open connection and refuse new ones, as a node that died."""
        self.is_down = True
        self.server.shutdown()  # stop accepting, then close the socket: new connections are refused
        self.server.socket.close()
        with self.lock:
            for s in list(self.sockets):
                reset(s)

    def close(self) -> None:
        self._stopper.cancel()
        if not self.is_down:
            self.go_down()
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> "FaultProxy":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def reset(sock: socket.socket) -> None:
    """Close with RST instead of FIN (SO_LINGER 0): the peer reads ECONNRESET."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    except OSError:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # a client that gave up (timed out) mid-answer: a broken pipe is expected here


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the node itself
    owner: FaultProxy

    def setup(self):
        super().setup()
        with self.owner.lock:
            self.owner.sockets.add(self.connection)
        self.upstream: http.client.HTTPConnection | None = None

    def finish(self):
        with self.owner.lock:
            self.owner.sockets.discard(self.connection)
        if self.upstream is not None:
            self.upstream.close()
        try:
            super().finish()
        except OSError:
            pass

    def log_message(self, *args):
        pass

    def _serve(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        line = f"{self.command} {self.path.split('?', 1)[0]}"
        fault = None if self.owner.is_down else self.owner._fault_for(line)
        if self.owner.is_down or (fault and fault.kind in ("reset", "down")):
            if fault and fault.kind == "down":
                self.owner.go_down()
            reset(self.connection)
            self.close_connection = True
            return
        if fault and fault.kind == "slow":
            time.sleep(fault.delay)
        if fault and fault.kind == "garbage":
            return self._answer(200, b'{"took": 3, "hits": {"total"', "application/json")
        if fault and fault.kind.isdigit():
            status = int(fault.kind)
            error = {"type": "fault_proxy_injected", "reason": f"HTTP {status} injected by the test's fault proxy"}
            return self._answer(status, json.dumps({"error": error, "status": status}).encode(), "application/json")
        self._forward(body)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _serve

    def _answer(self, status: int, payload: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def _forward(self, body: bytes) -> None:
        if self.upstream is None:
            self.upstream = http.client.HTTPConnection(*self.owner.target, timeout=300)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        self.upstream.request(self.command, self.path, body=body or None, headers=headers)
        resp = self.upstream.getresponse()
        payload = resp.read()
        self.send_response(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in HOP_BY_HOP:
                self.send_header(k, v)
        # HEAD answers carry the length the GET would have: keep the node's
        length = resp.getheader("Content-Length") if self.command == "HEAD" else str(len(payload))
        self.send_header("Content-Length", length or "0")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)
        if self.owner.keep_bodies:
            with self.owner.lock:
                self.owner.answered.append((f"{self.command} {self.path.split('?', 1)[0]}", body, resp.status))
