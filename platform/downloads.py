"""Downloads a user can trust: streamed to a partial file beside the destination with a progress bar, resumed
(an HTTP Range request) after a reset or a killed process, retried with back-off on resets, timeouts and 5xx, and
renamed onto the destination only once its size and sha256 are right. Only the destination counts as done: a
partial file is never read as data. A connection that cannot be made (refused, no route, no name) fails at once as
`Offline`: the caller names what it was fetching and where else it may come from."""

from __future__ import annotations

import errno
import http.client
import os
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from evalctl.errors import Failure
from evalctl.provenance import file_sha256

CHUNK = 1 << 20
RETRY_STATUS = {408, 429, 500, 502, 503, 504}
# failures of the network path itself: the origin is not reachable from here, so waiting would not help
_OFFLINE_ERRNO = {errno.ECONNREFUSED, errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EADDRNOTAVAIL}


class DownloadError(Failure):
    """A download that did not complete; the message names the URL and what to do."""


class Offline(DownloadError):
    """The URL's host could not be reached at all."""


class NotThere(DownloadError):
    """The server (or folder) answered that it has no such file."""


class ChecksumMismatch(DownloadError):
    """The bytes received are not the ones declared; nothing was kept."""

    def __init__(self, url: str, what: str, expected: str | int, got: str | int):
        super().__init__(f"{url}: {what} mismatch, refusing the download (nothing was kept)\n"
                         f"  expected {expected}\n  got      {got}")


@dataclass(frozen=True)
class Policy:
    """How hard to try: seconds a connection or a read may stall, tries in all, the first back-off (doubled each
    try)."""

    timeout: float = 30.0
    tries: int = 5
    backoff: float = 0.5


DEFAULT_POLICY = Policy()


def partial_path(dest: Path) -> Path:
    """Where the bytes of an unfinished download of `dest` wait (hidden, beside it)."""
    return dest.with_name(f".{dest.name}.part")


def download(url: str, dest: Path, *, sha256: str | None = None, size: int | None = None,
             policy: Policy = DEFAULT_POLICY, progress: Callable[[int, int | None], object] | None = None) -> str:
    """Fetch `url` (http, https or file) onto `dest` and return the sha256 hex of its bytes. `size` and `sha256`,
    where given, are checked before `dest` is written; a mismatch removes the partial file and raises
    ChecksumMismatch naming both values. `progress(done, total)` is called as bytes arrive."""
    part = partial_path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(1, policy.tries + 1):
        try:
            _transfer(url, part, policy.timeout, progress)
            break
        except _Retry as e:
            if attempt == policy.tries:
                raise DownloadError(f"{url}: {e.why} after {policy.tries} tries; the {part.stat().st_size if part.exists() else 0:,} "
                                    "bytes received are kept and the next run continues from them") from None
            time.sleep(policy.backoff * 2 ** (attempt - 1))
    got_size, digest = part.stat().st_size, sha256_of(part)
    if sha256 is not None and digest != sha256.lower():
        part.unlink()
        raise ChecksumMismatch(url, "sha256", sha256.lower() + (f" ({size:,} bytes)" if size is not None else ""),
                               f"{digest} ({got_size:,} bytes)")
    if size is not None and got_size != size:
        part.unlink()
        raise ChecksumMismatch(url, "size", f"{size:,} bytes", f"{got_size:,} bytes")
    with open(part, "rb") as f:
        os.fsync(f.fileno())
    os.replace(part, dest)
    return digest


def sha256_of(path: Path) -> str:
    """The hex sha256 of a file's bytes, as catalogues and checksum files write it."""
    return file_sha256(path).removeprefix("sha256:")


class _Retry(Exception):
    def __init__(self, why: str):
        self.why = why


def _transfer(url: str, part: Path, timeout: float, progress) -> None:
    """Append what is missing of `url` to `part` (resuming where it stops), or raise _Retry/DownloadError."""
    have = part.stat().st_size if part.exists() else 0
    try:
        response, total, resumed = _open(url, have, timeout)
    except urllib.error.HTTPError as e:
        if e.code == 416 and have:  # the partial file is not a prefix of this resource any more: start again
            part.unlink()
            raise _Retry("the server refused to resume (416)") from None
        if e.code in RETRY_STATUS:
            raise _Retry(f"HTTP {e.code} {e.reason}") from None
        raise (NotThere if e.code in (404, 410) else DownloadError)(f"{url}: HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        if _offline(reason):
            raise Offline(f"{url}: cannot connect ({reason})") from None
        if isinstance(reason, FileNotFoundError):
            raise NotThere(f"{url}: no such file") from None
        raise _Retry(f"{type(reason).__name__}: {reason}") from None
    have = have if resumed else 0
    try:
        with response, open(part, "ab" if resumed else "wb") as out:
            done = have
            if progress:
                progress(done, total)
            while block := response.read(CHUNK):
                out.write(block)
                done += len(block)
                if progress:
                    progress(done, total)
    except (http.client.HTTPException, OSError) as e:  # a reset, a stall, a cut: keep what came, go on from there
        raise _Retry(f"{type(e).__name__}: {e}") from None
    if total is not None and done < total:
        raise _Retry(f"the connection closed at {done:,} of {total:,} bytes")


def _open(url: str, offset: int, timeout: float):
    """(readable response, total bytes or None, whether it starts at `offset`)."""
    scheme = urllib.parse.urlsplit(url).scheme
    if scheme == "file":
        path = Path(urllib.request.url2pathname(urllib.parse.urlsplit(url).path))
        f = open(path, "rb")
        total = os.fstat(f.fileno()).st_size
        f.seek(min(offset, total))
        return f, total, True
    if scheme not in ("http", "https"):
        raise DownloadError(f"{url}: only http(s) and file URLs are fetched")
    request = urllib.request.Request(url, headers={"User-Agent": "evalctl", **(
        {"Range": f"bytes={offset}-"} if offset else {})})
    r = urllib.request.urlopen(request, timeout=timeout)
    length = r.headers.get("Content-Length")
    if r.status == 206:
        span = r.headers.get("Content-Range", "")  # bytes START-END/TOTAL
        total = int(span.rsplit("/", 1)[1]) if span.rsplit("/", 1)[-1].isdigit() else None
        if not span.startswith(f"bytes {offset}-"):
            r.close()
            raise urllib.error.HTTPError(url, 416, "an unasked range", r.headers, None)
        return r, total, True
    return r, int(length) if length and length.isdigit() else None, False


def _offline(reason: object) -> bool:
    if isinstance(reason, (socket.gaierror, ConnectionRefusedError)):
        return True
    return isinstance(reason, OSError) and reason.errno in _OFFLINE_ERRNO
