"""Which OpenSearch cluster evalctl talks to, and the client for it.

Settings come from environment variables, else the user config file's `opensearch:` section, else the
managed local node. Secrets are never printed: a user:password in the URL is moved into the
credentials, `ConnectionSettings` hides them from repr and `describe()`, and `redact` scrubs any
message that could quote them.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from dataclasses import dataclass, field
from urllib.parse import unquote, urlparse, urlunparse

from evalctl import paths
from evalctl.specs import SpecError, build, load_yaml

ENV = {
    "url": "EVALCTL_OPENSEARCH_URL",
    "username": "EVALCTL_OPENSEARCH_USER",
    "password": "EVALCTL_OPENSEARCH_PASSWORD",
    "ca_certs": "EVALCTL_OPENSEARCH_CA_CERTS",
    "verify_certs": "EVALCTL_OPENSEARCH_VERIFY_CERTS",
    "timeout": "EVALCTL_OPENSEARCH_TIMEOUT",
    "index_prefix": "EVALCTL_INDEX_PREFIX",
}
DEFAULT_INDEX_PREFIX = "evalctl"


@dataclass(frozen=True)
class ConnectionSettings:
    url: str | None = None  # None: the managed local node
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_certs: str | None = None
    verify_certs: bool = True
    timeout: float = 120.0
    # Start of every index name: give each cache or user sharing a cluster its own (e.g. evalctl-alice).
    index_prefix: str = DEFAULT_INDEX_PREFIX

    def __post_init__(self):
        if not _INDEX_PREFIX.fullmatch(self.index_prefix) or "--" in self.index_prefix:
            raise ValueError(f"index_prefix {self.index_prefix!r}: use 1-40 lowercase letters, digits, '.', '_' or "
                             "single '-', starting with a letter (OpenSearch index names are lowercase)")

    @property
    def external(self) -> bool:
        return self.url is not None

    def describe(self) -> str:
        auth = f" as {self.username} (password set)" if self.username else ""
        return f"{self.url or 'managed local node'}{auth}"


_INDEX_PREFIX = re.compile(r"[a-z][a-z0-9._-]{0,39}")
_USERINFO = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)[^/@\s]*@", re.IGNORECASE)


def redact(text: str, *secrets: object) -> str:
    """`text` without URL userinfo and without any of `secrets` (as written or as repr)."""
    text = _USERINFO.sub(r"\g<scheme>***@", str(text))
    for s in secrets:
        if s not in (None, ""):
            for form in {str(s), repr(s)}:
                text = text.replace(form, "***")
    return text


def _split_userinfo(data: dict) -> None:
    """Move user:password out of the URL into the credentials, so the URL itself can be shown."""
    url = data.get("url")
    if not isinstance(url, str) or "@" not in url:
        return
    u = urlparse(url)
    if u.username is None:
        return
    data.setdefault("username", unquote(u.username))
    if u.password is not None:
        data.setdefault("password", unquote(u.password))
    data["url"] = urlunparse(u._replace(netloc=u.netloc.rsplit("@", 1)[1]))


_warned: set[str] = set()


def _warn_if_readable(cfg_path, section: dict) -> None:
    if str(cfg_path) in _warned:
        return
    if section.get("password") and cfg_path.stat().st_mode & (stat.S_IRGRP | stat.S_IROTH):
        _warned.add(str(cfg_path))
        print(f"warning: {cfg_path} holds an OpenSearch password and is readable by other users; "
              f"restrict it with `chmod 600 {cfg_path}`", file=sys.stderr)


def load_settings() -> ConnectionSettings:
    cfg_path = paths.config_file()
    data: dict = {}
    if cfg_path.exists():
        doc = load_yaml(cfg_path) or {}
        data = dict(doc.get("opensearch") or {}) if isinstance(doc, dict) else {}
        _warn_if_readable(cfg_path, data)
    for key, var in ENV.items():
        if os.environ.get(var):
            raw = os.environ[var]
            if key == "verify_certs":
                data[key] = raw.strip().lower() not in ("0", "false", "no")
            elif key == "timeout":
                try:
                    data[key] = float(raw)
                except ValueError:
                    raise SpecError(f"{var}={raw!r} is not a number of seconds") from None
            else:
                data[key] = raw
    _split_userinfo(data)
    try:
        return build(ConnectionSettings, data, f"{cfg_path} (opensearch:) / EVALCTL_OPENSEARCH_*")
    except SpecError as e:  # the message may quote the offending value: never a secret
        raise SpecError(redact(str(e), data.get("password"))) from None


def resolve_url(settings: ConnectionSettings) -> str:
    if settings.url:
        return settings.url.rstrip("/")
    from evalctl.opensearch.node import ManagedNode  # the managed node decides its own port

    node = ManagedNode()
    st = node.read_state()
    return st.url if st else node.url


def _serializer():
    import orjson
    from opensearchpy.serializer import JSONSerializer

    class OrjsonSerializer(JSONSerializer):
        """orjson writes numpy vectors directly, ~14x faster than json on bulk bodies; float32 values
        come out in their shortest exact form, so vectors read back bit-identical."""

        def dumps(self, data):
            if isinstance(data, str):
                return data
            try:
                return orjson.dumps(data, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS).decode()
            except TypeError:
                return super().dumps(data)

        def loads(self, s):
            return orjson.loads(s)

    return OrjsonSerializer()


_answered: list[bool] = []  # set once the cluster answered a request in this process


def node_answered() -> bool:
    """Whether the cluster answered earlier in this command (so it was lost mid-command, not never reached)."""
    return bool(_answered)


def forget_answers() -> None:
    _answered.clear()


def _tracked_connection():
    from opensearchpy import Urllib3HttpConnection

    class TrackedConnection(Urllib3HttpConnection):
        def perform_request(self, *args, **kwargs):
            out = super().perform_request(*args, **kwargs)
            _answered[:] = [True]
            return out

    return TrackedConnection


def make_client(settings: ConnectionSettings | None = None):
    """An opensearch-py client with retries on 429/502/503/504 and timeouts sized for vector payloads."""
    from opensearchpy import OpenSearch

    s = settings or load_settings()
    url = resolve_url(s)
    kwargs = dict(
        hosts=[url],
        timeout=s.timeout,
        max_retries=5,
        retry_on_timeout=True,
        retry_on_status=(429, 502, 503, 504),
        serializer=_serializer(),
        connection_class=_tracked_connection(),
        # gzip pays off over a network; on loopback it only burns client CPU on every bulk body.
        http_compress=urlparse(url).hostname not in ("127.0.0.1", "localhost", "::1"),
    )
    if s.username:
        kwargs["http_auth"] = (s.username, s.password or "")
    if s.url and s.url.startswith("https"):
        kwargs.update(use_ssl=True, verify_certs=s.verify_certs, ca_certs=s.ca_certs,
                      ssl_show_warn=s.verify_certs)
    return OpenSearch(**kwargs)


def search_cbor(client, body: dict, index: str | None = None) -> dict:
    """`POST /_search` with the response in CBOR: floats travel as 4 binary bytes instead of about 12
    characters of JSON, which the node renders and the client parses about twice as fast (read-back of
    2,650 384-d vectors: 0.23 s -> 0.15 s for the page). opensearch-py decodes every response as UTF-8
    text, so this one request goes through its connection pool directly (same host, auth, TLS, timeout);
    errors are raised as opensearch-py's own exceptions."""
    import cbor2
    import orjson
    import urllib3
    from opensearchpy.exceptions import HTTP_EXCEPTIONS, ConnectionError as OSConnectionError, TransportError

    conn = client.transport.get_connection()
    path = conn.url_prefix + (f"/{index}" if index else "") + "/_search"
    headers = {**conn.headers, "content-type": "application/json", "accept": "application/cbor"}
    try:
        resp = conn.pool.urlopen("POST", path, orjson.dumps(body), retries=False, timeout=conn.timeout,
                                 headers=headers)
    except urllib3.exceptions.HTTPError as e:
        raise OSConnectionError("N/A", str(e), e) from e
    _answered[:] = [True]
    data = cbor2.loads(resp.data) if resp.data else {}
    if resp.status >= 400:
        error = data.get("error") if isinstance(data, dict) else None
        kind = error.get("type", str(error)) if isinstance(error, dict) else str(error or resp.status)
        raise HTTP_EXCEPTIONS.get(resp.status, TransportError)(resp.status, kind, data)
    return data
