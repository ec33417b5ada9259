"""Encoding through an OpenAI-compatible embeddings API: the encoder of a model spec with `endpoint:`.

`POST {url}/embeddings` with {"model", "input": [texts], "encoding_format": "float", "dimensions"?}, as TEI, vLLM,
Infinity and hosted APIs answer it. Prompts are put before the texts here, exactly as for a local model
(encode_texts does it for both), and the vectors go to the same embedding cache, so an interrupted encode
resumes and no text is sent twice. Requests hold at most `max_texts` texts and about `max_tokens` tokens
(estimated from characters, calibrated on each answer's `usage`); `concurrency` of them are in flight, started
no faster than `requests_per_minute`; a 429, a 5xx, a reset or refused connection and a timeout are retried with
exponential back-off, each retry announced. The key (the environment variable `api_key_env` names) goes in the
Authorization header and nowhere else: every message is scrubbed of it.
"""

from __future__ import annotations

import random
import re
import sys
import threading
import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

import numpy as np
import orjson
from tqdm import tqdm

from evalctl.errors import BadInput, Failure
from evalctl.indexers.encode_options import Encoded, PartlyEncoded
from evalctl.indexers.endpoints import api_key, shown_url
from evalctl.models import ModelSpec
from evalctl.opensearch.connection import redact, secret_forms

RETRIED_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_MAX_WAIT_S = 60.0  # the longest back-off (or Retry-After) between two tries


class EndpointError(Failure, RuntimeError):
    """The endpoint did not answer with vectors (after its retries); names the endpoint, never the key."""


def request_batches(tokens: list[int], max_tokens: int, max_texts: int) -> list[list[int]]:
    """Positions grouped in order into requests of at most max_texts texts and max_tokens tokens in all (a text
    over max_tokens goes alone: the server truncates it)."""
    batches: list[list[int]] = []
    total = 0
    for i, n in enumerate(tokens):
        if batches and len(batches[-1]) < max_texts and total + n <= max_tokens:
            batches[-1].append(i)
            total += n
        else:
            batches.append([i])
            total = n
    return batches


class _Pace:
    """At most `per_minute` request starts a minute, evenly spaced (None: no limit)."""

    def __init__(self, per_minute: int | None):
        self.gap = 60.0 / per_minute if per_minute else 0.0
        self.next = 0.0
        self.lock = threading.Lock()

    def wait(self) -> None:
        if not self.gap:
            return
        with self.lock:
            now = time.monotonic()
            start = max(now, self.next)
            self.next = start + self.gap
        time.sleep(start - now)


_SECONDS = re.compile(r"[0-9]+(\.[0-9]+)?", re.ASCII)
_NON_JSON_NUMBER = re.compile(rb"\b(NaN|-?Infinity)\b")
_NEAR_ZERO = 1e-6  # a norm at or below which a cosine model's vector has no direction
_READ_ERROR_BYTES = 4096  # of an error answer, for its message (the scrubber is quadratic in a long word)


def _without_key_prefix(text: str, key: str) -> str:
    """`text` less a tail that is the start of `key`, in any form a message may quote it (a key cut in two by a
    read)."""
    for form in secret_forms(key):
        for n in range(min(len(form), len(text)), 0, -1):
            if text.endswith(form[:n]):
                text = text[:-n]
                break
    return text


class ServedEncoder:
    """The TextEncoder of a served model. `precision` is the spec's dtype (what the server is said to run at)."""

    def __init__(self, spec: ModelSpec, *, batch_size: int | None = None, announce=None):
        import urllib3  # deferred: urllib3

        if spec.endpoint is None:
            raise ValueError(f"model {spec.id} has no endpoint")
        self.spec, self.endpoint, self.dim = spec, spec.endpoint, spec.dim
        self.precision = spec.dtype
        self.max_texts = min(batch_size or self.endpoint.max_texts, self.endpoint.max_texts)
        self.max_batch_tokens = self.endpoint.max_tokens
        self.oom_halvings = 0
        self.devices: list[str] = []
        self.url = self.endpoint.url.rstrip("/") + "/embeddings"
        self.shown = shown_url(spec)
        self._key = api_key(spec)
        self._headers = {"Content-Type": "application/json", "Accept": "application/json",
                         **({"Authorization": f"Bearer {self._key}"} if self._key else {})}
        self._http = urllib3.PoolManager(maxsize=self.endpoint.concurrency, retries=False,
                                         timeout=urllib3.Timeout(connect=min(10.0, self.endpoint.timeout_s),
                                                                 read=self.endpoint.timeout_s))
        self._pace = _Pace(self.endpoint.requests_per_minute)
        self._announce = announce or (lambda message: tqdm.write(message, file=sys.stderr))
        self._chars_per_token = 3.0  # conservative start (English BPE: ~4); calibrated on each answer's usage
        self._lock = threading.Lock()
        self.requests = self.retries = self.tokens = 0

    def close(self) -> None:
        self._http.clear()

    def usage(self) -> dict:
        """What the encoder's run record holds besides encode_texts' own counts."""
        return {"endpoint": self.shown, "served_model": self.endpoint.model, "requests": self.requests,
                "retries": self.retries, "tokens": self.tokens}

    def _scrub(self, text: str) -> str:
        return redact(text, self._key)

    def _excerpt(self, body: bytes, limit: int = 300) -> str:
        """The start of an error answer for a message: scrubbed whole before it is cut, so no part of the key
        survives the cut (a body past what is read is cut first: a key it cut in two leaves no prefix at the end)."""
        read = body[:_READ_ERROR_BYTES].decode("utf-8", "replace")
        text = self._scrub(read)
        if len(body) > _READ_ERROR_BYTES and self._key:
            text = _without_key_prefix(text, self._key)
        return text[:limit]

    def _estimate(self, text: str) -> int:
        """Tokens of a text as the server counts them: at most the spec's max_seq_length, where it cuts."""
        return min(self.spec.max_seq_length, int(len(text) / self._chars_per_token) + 2)

    def check_dim(self) -> None:
        """One short request: an unreachable server, or a spec whose dim is not the served vectors' width, fails
        here, before an index is made for the vectors."""
        self._request(["dimension check"], threading.Event())

    def encode(self, texts: list[str], prompt: str) -> Encoded:
        """Vectors of prompt + text for each text; a request that fails for good raises PartlyEncoded, holding
        the vectors of every request answered before."""
        estimated = [self._estimate(prompt + t) for t in texts]
        batches = request_batches(estimated, self.max_batch_tokens, self.max_texts)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        done: list[int] = []
        stop = threading.Event()
        pool = ThreadPoolExecutor(self.endpoint.concurrency, thread_name_prefix="endpoint")
        try:
            futures = {pool.submit(self._request, [prompt + texts[i] for i in b], stop): b for b in batches}
            pending = set(futures)
            while pending:
                finished, pending = wait(pending, return_when=FIRST_EXCEPTION)
                for f in finished:
                    if f.exception() is None:
                        out[futures[f]] = f.result()
                        done.extend(futures[f])
                failed = [f.exception() for f in finished if f.exception() is not None]
                if failed:
                    stop.set()  # no new request starts; those in flight finish (or stop retrying) and are kept
                    for f in pending:
                        f.cancel()
                    for f in wait(pending).done:
                        if not f.cancelled() and f.exception() is None:
                            out[futures[f]] = f.result()
                            done.extend(futures[f])
                    raise failed[0]
        except BaseException as e:
            stop.set()
            pool.shutdown(wait=True, cancel_futures=True)
            raise PartlyEncoded(done, out[done], e) from None
        pool.shutdown()
        return Encoded(out, 0)  # the server truncates long texts without saying so: not counted

    def _request(self, inputs: list[str], stop: threading.Event) -> np.ndarray:
        import urllib3  # deferred: urllib3

        ep = self.endpoint
        body = {"model": ep.model, "input": inputs, "encoding_format": "float",
                **({"dimensions": ep.dimensions} if ep.dimensions else {})}
        payload = orjson.dumps(body)
        for attempt in range(ep.retries + 1):
            if stop.is_set():
                raise EndpointError(f"model {self.spec.id}: stopped (another request to {self.shown} failed)")
            self._pace.wait()
            wait_s = None
            try:
                answer = self._post(payload)
                with self._lock:
                    self.requests += 1
                if answer.status == 200:
                    return self._vectors(answer.data, inputs)
                problem = f"HTTP {answer.status}"
                retry_after = answer.headers.get("Retry-After", "")
                wait_s = float(retry_after) if _SECONDS.fullmatch(retry_after.strip()) else None  # or an HTTP date
                if answer.status not in RETRIED_STATUS:
                    detail = self._excerpt(answer.data)
                    hint = f"; check the key in {ep.api_key_env}" if answer.status in (401, 403) and ep.api_key_env else ""
                    raise EndpointError(f"model {self.spec.id}: {self.shown} answered {problem} ({detail}){hint}")
            except urllib3.exceptions.HTTPError as e:  # reset, refused, timed out, broken answer
                problem = self._scrub(f"{e.__class__.__name__}: {e}")[:200]
            if attempt == ep.retries:
                raise EndpointError(f"model {self.spec.id}: {self.shown} failed {ep.retries + 1} tries (last: {problem}); "
                                    "the vectors answered before are in the cache: run again to go on")
            delay = min(_MAX_WAIT_S, wait_s if wait_s is not None else ep.backoff_s * 2 ** attempt * random.uniform(1, 1.25))
            with self._lock:
                self.retries += 1
            self._announce(f"endpoint {self.shown}: {problem}; retry {attempt + 1}/{ep.retries} in {delay:.1f} s")
            if stop.wait(delay):
                raise EndpointError(f"model {self.spec.id}: stopped (another request to {self.shown} failed)")
        raise AssertionError("unreachable")

    def _post(self, payload: bytes):
        """The answer to one POST, whole within timeout_s from connecting to its last byte: urllib3's read timeout
        counts between bytes, so a server sending a byte at a time would hold a try for as long as it likes. The
        request runs on a daemon thread; one past the limit is left to end on its own and counts as a timed-out
        try."""
        import urllib3  # deferred: urllib3

        box: dict = {}

        def send() -> None:
            try:
                box["answer"] = self._http.request("POST", self.url, body=payload, headers=self._headers)
            except BaseException as e:  # noqa: BLE001 - handed to the caller's thread as it is
                box["error"] = e

        worker = threading.Thread(target=send, daemon=True)
        worker.start()
        worker.join(self.endpoint.timeout_s)
        if worker.is_alive():
            raise urllib3.exceptions.TimeoutError(f"no whole answer within timeout_s {self.endpoint.timeout_s:g} s")
        if "error" in box:
            raise box["error"]
        return box["answer"]

    def _vectors(self, data: bytes, inputs: list[str]) -> np.ndarray:
        """The answer's vectors in input order (by `index`), checked; its usage counted and calibrating the
        characters per token."""
        try:
            answer = orjson.loads(data)
            items = answer["data"]
            order = [int(item["index"]) for item in items]
            vectors = np.asarray([item["embedding"] for item in items], dtype=np.float32)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            if m := _NON_JSON_NUMBER.search(data):
                raise EndpointError(f"model {self.spec.id}: {self.shown} answered {m.group().decode()} where a "
                                    "number belongs (JSON has no NaN or Infinity): the server failed to embed these "
                                    "texts (check its logs); nothing of this answer was kept") from None
            raise EndpointError(f"model {self.spec.id}: {self.shown} answered no embeddings list "
                                f"({e.__class__.__name__}: {self._scrub(str(e))[:200]})") from None
        if sorted(order) != list(range(len(inputs))):
            raise EndpointError(f"model {self.spec.id}: {self.shown} answered {len(order)} embeddings with indexes "
                                f"{sorted(order)[:5]}... for {len(inputs)} texts")
        if vectors.ndim != 2 or vectors.shape[1] != self.dim:
            raise BadInput(f"model {self.spec.id}: {self.shown} answered vectors of shape {vectors.shape}, its spec says "
                           f"dim {self.dim}; correct `dim` (or endpoint.dimensions) in the spec")
        vectors[order] = vectors.copy()
        if not np.isfinite(vectors).all():
            raise EndpointError(f"model {self.spec.id}: {self.shown} answered non-finite vectors")
        # a zero vector has no direction: under cosine it can be neither scored nor indexed, and dot-product scores
        # it 0 against everything. Norms in float64: float32 values near its largest overflow a float32 norm to
        # infinity, and dividing by it gives the zero vector
        wide = vectors.astype(np.float64)
        norms = np.linalg.norm(wide, axis=1)
        floor = _NEAR_ZERO if self.spec.similarity == "cosine" else 0.0
        if (bad := np.flatnonzero(norms <= floor)).size:
            i = int(bad[0])
            raise EndpointError(f"model {self.spec.id}: {self.shown} answered {bad.size} vector(s) of norm "
                                f"{norms[i]:.3g} (zero, or too close to it to have a direction), first for the text "
                                f"{inputs[i][:60]!r}; nothing of this answer was kept or cached: the server failed to "
                                "embed it (check its logs), and a rerun asks again")
        if self.spec.normalize:  # as the local encoder does: the spec's rule, whatever the server did
            vectors = (wide / norms[:, None]).astype(np.float32)
        elif not np.isfinite(np.linalg.norm(vectors, axis=1)).all():
            raise EndpointError(f"model {self.spec.id}: {self.shown} answered vectors too long for float32 scores "
                                "(their norm overflows it); nothing of this answer was kept")
        usage = answer.get("usage")  # optional, and only informative: an answer without a usable one counts no tokens
        usage = usage if isinstance(usage, dict) else {}
        tokens = usage.get("prompt_tokens") or usage.get("total_tokens")
        if isinstance(tokens, int) and tokens > 0:
            with self._lock:
                self.tokens += tokens
                # only a request none of whose texts may have been cut tells how many characters a token takes
                if all(self._estimate(t) < self.spec.max_seq_length for t in inputs):
                    self._chars_per_token = max(1.0, 0.9 * sum(map(len, inputs)) / tokens)
        return vectors

