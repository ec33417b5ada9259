"""How one request to the node is sent: transient refusals retried with back-off, slow answers announced.

opensearch-py's Transport retries at once, with no wait between attempts, so a node answering 429
(queue full) would get its retries within milliseconds; here each request is sent through
`send_with_retries`, which waits BACKOFF_S, doubling up to BACKOFF_MAX_S, between at most MAX_RETRIES
retries of 429/502/503/504 and reset connections (a refused connection is not retried: nothing listens).
A request that has not been answered after NOTICE_AFTER_S prints a line (and again every NOTICE_EVERY_S),
so a stalled node is never a silent hang; a timeout is retried once, then reported with the setting.
"""

from __future__ import annotations

import itertools
import sys
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from evalctl.errors import Failure

T = TypeVar("T")

RETRY_STATUS = (429, 502, 503, 504)
MAX_RETRIES = 5
BACKOFF_S = 0.5
BACKOFF_MAX_S = 8.0  # 0.5 + 1 + 2 + 4 + 8: a node busy for 15 s is waited out
TIMEOUT_RETRIES = 1  # a request that timed out already waited the whole timeout
NOTICE_AFTER_S = 15.0
NOTICE_EVERY_S = 30.0
TIMEOUT_SETTING = "EVALCTL_OPENSEARCH_TIMEOUT"

_answered: list[bool] = []  # set once the cluster answered a request in this process


def node_answered() -> bool:
    """Whether the cluster answered earlier in this command (so it was lost mid-command, not never reached)."""
    return bool(_answered)


def forget_answers() -> None:
    _answered.clear()


class NodeUnavailable(Failure, RuntimeError):
    """The node kept failing one request after every retry (a refused connection is opensearch-py's
    ConnectionError, as before)."""


class NodeBusy(NodeUnavailable):
    """Every retry was answered with a transient status (429/502/503/504)."""


class NodeTimeout(NodeUnavailable):
    """The request timed out, and so did its retry."""


class UnparseableAnswer(Failure, ValueError):
    """The node (or whatever answers at its URL) sent a body that cannot be parsed."""


def unparseable(url: str, what: str, error: Exception, data: bytes | str) -> UnparseableAnswer:
    start = data[:80].decode("utf-8", "replace") if isinstance(data, bytes) else str(data)[:80]
    return UnparseableAnswer(
        f"OpenSearch at {url} sent an answer to {what} that cannot be parsed ({error.__class__.__name__}; it "
        f"begins {start!r}): check that this URL is an OpenSearch node, not another service or a proxy's error "
        "page, and rerun the same command (what was finished before is kept)")


def _reason(e: Exception, timeout: float) -> str | None:
    """Why `e` is worth a retry, or None."""
    import urllib3  # deferred: urllib3, opensearchpy
    from opensearchpy.exceptions import ConnectionError as OSConnectionError
    from opensearchpy.exceptions import ConnectionTimeout, TransportError

    if isinstance(e, ConnectionTimeout):
        return f"no answer within {timeout:g} s"
    if isinstance(e, OSConnectionError):
        # ProtocolError: the connection was reset or closed mid-request (a refused one is NewConnectionError)
        return "connection reset" if isinstance(e.info, urllib3.exceptions.ProtocolError) else None
    if isinstance(e, TransportError) and isinstance(e.status_code, int):
        _answered[:] = [True]  # an HTTP error is an answer
        return f"HTTP {e.status_code}" if e.status_code in RETRY_STATUS else None
    return None


def send_with_retries(send: Callable[[], T], url: str, what: str, timeout: float) -> T:
    """send() (one request, raising opensearch-py's exceptions), retried as the module says."""
    from opensearchpy.exceptions import ConnectionTimeout, TransportError  # deferred: opensearchpy

    t0, timeouts = time.monotonic(), 0
    for attempt in itertools.count():
        token = _watch.start(url, what, timeout)
        try:
            out = send()
            _answered[:] = [True]
            return out
        except TransportError as e:
            reason = _reason(e, timeout)
            if reason is None:
                raise
            timeouts += isinstance(e, ConnectionTimeout)
            if timeouts > TIMEOUT_RETRIES:
                raise NodeTimeout(
                    f"OpenSearch at {url} did not answer {what} within {timeout:g} s, {timeouts} times: the node is "
                    f"stalled or overloaded. What was finished before is kept; check the node (`evalctl opensearch "
                    f"status`, its log) or raise {TIMEOUT_SETTING}, then rerun the same command") from e
            if attempt == MAX_RETRIES:
                if isinstance(e.status_code, int):
                    raise NodeBusy(
                        f"OpenSearch at {url} answered {what} with {reason} ({e.error}) {attempt + 1} times in "
                        f"{time.monotonic() - t0:.0f} s: the node is overloaded or unavailable. What was finished "
                        "before is kept; rerun the same command when it has recovered") from e
                raise
        finally:
            _watch.stop(token)
        wait = min(BACKOFF_MAX_S, BACKOFF_S * 2 ** attempt)
        print(f"OpenSearch at {url}: {reason} on {what}; retry {attempt + 1} of at most {MAX_RETRIES} in {wait:g} s",
              file=sys.stderr)
        time.sleep(wait)


def node_gone(e: BaseException) -> bool:
    """Whether `e` (or what caused it) says the node cannot be reached or keeps failing."""
    from opensearchpy.exceptions import ConnectionError as OSConnectionError  # deferred: opensearchpy

    while e is not None:
        if isinstance(e, (OSConnectionError, NodeUnavailable)):
            return True
        e = e.__cause__ or (None if e.__suppress_context__ else e.__context__)
    return False


class _Watch:
    """One daemon thread that prints a line for each request unanswered for NOTICE_AFTER_S (cheaper than a
    timer per request: a bulk load sends hundreds)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.waiting_on: dict[int, list] = {}  # id -> [next notice at, started, url, what, timeout]
        self.thread: threading.Thread | None = None

    def start(self, url: str, what: str, timeout: float) -> object:
        token, now = object(), time.monotonic()
        with self.lock:
            self.waiting_on[id(token)] = [now + NOTICE_AFTER_S, now, url, what, timeout]
            if self.thread is None:
                self.thread = threading.Thread(target=self.run, name="evalctl-slow-node", daemon=True)
                self.thread.start()
        return token

    def stop(self, token: object) -> None:
        with self.lock:
            del self.waiting_on[id(token)]

    def run(self) -> None:
        while True:
            time.sleep(min(1.0, NOTICE_AFTER_S / 2))
            now = time.monotonic()
            with self.lock:
                due = [w for w in self.waiting_on.values() if w[0] <= now]
                for w in due:
                    w[0] = now + NOTICE_EVERY_S
            for _, started, url, what, timeout in due:
                print(f"waiting for OpenSearch at {url}: {what} unanswered for {now - started:.0f} s (gives up after "
                      f"{timeout:g} s, set by {TIMEOUT_SETTING})", file=sys.stderr)


_watch = _Watch()
