"""Which OpenSearch cluster evalctl talks to, and the client for it.

Settings come from environment variables, else the user config file's `opensearch:` section, else the
managed local node. Secrets are never printed: a user:password in the URL is moved into the
credentials, `ConnectionSettings` hides them from repr and `describe()`, and `redact` scrubs any
message that could quote them. Every request goes through evalctl.opensearch.retries (back-off on
transient refusals, a line when the node is slow to answer).
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import sys
import threading
from dataclasses import dataclass, field
from urllib.parse import quote, unquote, urlparse, urlunparse

import cbor2
import orjson

from evalctl import hf_cache, paths
from evalctl.config_files import SpecError, build, load_yaml
from evalctl.errors import shortened
from evalctl.opensearch.node import ManagedNode
from evalctl.opensearch.retries import forget_answers, node_answered  # noqa: F401 - cli.main imports them from here
from evalctl.opensearch.retries import send_with_retries, unparseable

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
    # None: the managed local node; several nodes of a cluster: comma-separated (a YAML list in the config file)
    url: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_certs: str | None = None
    verify_certs: bool = True
    timeout: float = 120.0
    # Start of every index name: give each cache or user sharing a cluster its own (e.g. evalctl-alice).
    index_prefix: str = DEFAULT_INDEX_PREFIX

    def __post_init__(self):
        for key in HOST_CHECKS:
            problem = check(key, getattr(self, key), HOST_CHECKS)
            if problem:
                raise ValueError(f"{key} {redact(repr(getattr(self, key)))}: {problem}")

    @property
    def urls(self) -> list[str]:
        return host_list(self.url) if self.url else []

    @property
    def external(self) -> bool:
        return self.url is not None

    def describe(self) -> str:
        auth = f" as {self.username} (password set)" if self.username else ""
        return f"{self.url or 'managed local node'}{auth}"


_INDEX_PREFIX = re.compile(r"[a-z][a-z0-9._-]{0,39}")


def url_problem(url: str) -> str | None:
    """What makes `url` unusable as a server address (http or https, a host, a port in range), or None."""
    import urllib3  # deferred: urllib3

    try:
        u = urlparse(url)
        port = u.port
        urllib3.util.parse_url(url)  # what the client will parse: also refuses e.g. a space in the host
    except ValueError as e:  # LocationParseError is a ValueError
        return (f"not a valid URL ({shortened(redact(str(e)))}); write it as http(s)://HOST:PORT, an IPv6 host in "
                "brackets (http://[::1]:9200)")
    if u.scheme not in ("http", "https"):
        return "use an http:// or https:// URL"
    if not u.hostname:
        return "the URL names no host"
    if port == 0:
        return "port 0 is not a port to connect to"
    return None


def _index_prefix_problem(prefix: str) -> str | None:
    if _INDEX_PREFIX.fullmatch(prefix) and "--" not in prefix:
        return None
    return ("use 1-40 lowercase letters, digits, '.', '_' or single '-', starting with a letter "
            "(OpenSearch index names are lowercase)")


def _timeout_problem(seconds: float) -> str | None:
    return None if math.isfinite(seconds) and seconds > 0 else "must be a positive number of seconds"


# Value checks that the field types cannot express, per setting: (the type checked, the check). A value of
# another type is left to build(), which names the type expected.
CHECKS = {"url": (str, url_problem), "timeout": ((int, float), _timeout_problem),
          "index_prefix": (str, _index_prefix_problem)}


def host_list(url: str) -> list[str]:
    """The URLs of an OpenSearch `url` setting: one, or a cluster's nodes separated by commas."""
    return [u.strip().rstrip("/") for u in url.split(",")]


def hosts_problem(url: str) -> str | None:
    """url_problem for one URL, or for each URL of a host list (naming the one at fault)."""
    urls = host_list(url)
    if len(urls) == 1:
        return url_problem(url)
    for u in urls:
        if not u:
            return "an empty entry in the host list (separate the URLs with single commas)"
        if problem := url_problem(u):
            return f"{redact(u)}: {problem}"
    if len({urlparse(u).scheme for u in urls}) > 1:  # TLS and credentials are set once for every host
        return "the hosts of a list use one scheme (all http:// or all https://)"
    return None


HOST_CHECKS = {**CHECKS, "url": (str, hosts_problem)}  # the OpenSearch settings (Dashboards has one URL)


def check(key: str, value, checks: dict = CHECKS) -> str | None:
    if key not in checks or isinstance(value, bool) or not isinstance(value, checks[key][0]):
        return None
    return checks[key][1](value)


# Userinfo is whatever a word holds before its last '@', in any URL shape a user may write (no scheme,
# "https//", "http:/", a password holding '/' or '@'): a word ends at white space, quotes, brackets, commas
# (host lists) or '=' (VAR=value). A word without ':' or '/' is no URL's (a metric, ndcg@10) and stays.
# Only a leading scheme and its slashes are kept, to show where the URL went wrong. A model reference
# hf:ORG/NAME@REVISION is no URL: it stays.
# A match starts only where a word starts: unanchored, every position of a long word without '@' would rescan the
# rest of it (a 40 kB word took 24 s).
_USERINFO = re.compile(r"""(?<![^\s'"`<>()\[\]{},=])(?P<word>[^\s'"`<>()\[\]{},=]*)@""")
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*:?/+|/+", re.IGNORECASE)


def _scrub(m: re.Match) -> str:
    word = m["word"]
    # userinfo stands after a scheme's // (RFC 3986) or, written without one, as user:password: a word with neither
    # is a mail address or a path (refs/v1@x), and a model reference is no URL
    if (":" not in word and "//" not in word) or hf_cache.REFERENCE.fullmatch(word):
        return m.group()
    scheme = _SCHEME.match(word)
    return f"{scheme.group() if scheme else ''}***@"


def redact(text: str, *secrets: object) -> str:
    """`text` without URL userinfo, however malformed the URL, and without any of `secrets` (as written, as repr,
    as a JSON string writes it, with or without '/' escaped, or percent-encoded): the one scrubber of every message,
    log line and stored value that may quote a URL or a server's echo of a key."""
    text = _USERINFO.sub(_scrub, str(text))
    for s in secrets:
        if s not in (None, ""):
            for form in secret_forms(str(s)):
                text = text.replace(form, "***")
    return text


def secret_forms(secret: str) -> list[str]:
    """The ways a message may quote `secret`, longest first: as written, as repr, as a JSON string writes it (with
    '/' escaped or not), percent-encoded."""
    json_form = json.dumps(secret)[1:-1]
    return sorted({secret, repr(secret), json_form, json_form.replace("/", "\\/"), quote(secret, safe="")},
                  key=len, reverse=True)


def _split_userinfo(data: dict) -> None:
    """Move user:password out of the URL into the credentials, so the URL itself can be shown."""
    url = data.get("url")
    if not isinstance(url, str) or "@" not in url:
        return
    parts = []
    for part in url.split(","):  # each URL of a host list (the first credentials found are kept)
        try:
            u = urlparse(part)
        except ValueError:  # a broken URL: url_problem names it (its userinfo redacted)
            return
        if u.username is not None:
            data.setdefault("username", unquote(u.username))
            if u.password is not None:
                data.setdefault("password", unquote(u.password))
            part = urlunparse(u._replace(netloc=u.netloc.rsplit("@", 1)[1]))
        parts.append(part)
    data["url"] = ",".join(parts)


_warned: set[tuple[str, str]] = set()


def _warn_if_readable(cfg_path, section: str, settings: dict) -> None:
    if (str(cfg_path), section) in _warned:
        return
    if settings.get("password") and cfg_path.stat().st_mode & (stat.S_IRGRP | stat.S_IROTH):
        _warned.add((str(cfg_path), section))
        print(f"warning: {cfg_path} holds a password ({section}:) and is readable by other users; "
              f"restrict it with `chmod 600 {cfg_path}`", file=sys.stderr)


def read_section(section: str, env: dict[str, str], given: dict[str, tuple[str, str]] | None = None
                 ) -> tuple[dict, dict[str, str]]:
    """The config file's `section:` settings, overridden by the environment variables `env` ({key: var}),
    then by `given` ({key: (option, value)}, e.g. a command's --url), with a user:password@ moved out of
    the URL into username/password (unless those are given); and, per key, the setting it came from."""
    cfg_path = paths.config_file()
    data: dict = {}
    if cfg_path.exists():
        doc = load_yaml(cfg_path)
        if doc is not None and not isinstance(doc, dict):
            raise SpecError(f"{cfg_path}: expected a mapping of sections (opensearch:, dashboards:, ...), "
                            f"got {type(doc).__name__}")
        raw = (doc or {}).get(section)
        if raw is not None and not isinstance(raw, dict):
            raise SpecError(f"{cfg_path}: `{section}:` must be a mapping of settings ({', '.join(env)}), "
                            f"got {type(raw).__name__}")
        data = dict(raw or {})
        _warn_if_readable(cfg_path, section, data)
    origin = {k: f"{cfg_path} {section}.{k}" for k in data}
    for key, var in env.items():
        if os.environ.get(var):
            data[key], origin[key] = os.environ[var], var
    for key, (option, value) in (given or {}).items():
        data[key], origin[key] = value, option
    if isinstance(data.get("url"), list):  # a host list written as a YAML list
        data["url"] = ",".join(map(str, data["url"]))
    if "url" in data and "@" in str(data["url"]):  # the credentials now come from the URL's setting
        origin.setdefault("username", origin["url"])
        origin.setdefault("password", origin["url"])
    _split_userinfo(data)
    return data, origin


def load_settings() -> ConnectionSettings:
    data, origin = read_section("opensearch", ENV)
    for key, raw in list(data.items()):
        if origin[key] != ENV.get(key):
            continue  # the config file's values are typed by YAML
        if key == "verify_certs":
            data[key] = raw.strip().lower() not in ("0", "false", "no")
        elif key == "timeout":
            try:
                data[key] = float(raw)
            except ValueError:
                raise SpecError(f"{ENV[key]}={raw!r} is not a number of seconds") from None
    return build_settings(ConnectionSettings, data, origin, "opensearch", "EVALCTL_OPENSEARCH_*", HOST_CHECKS)


def build_settings(cls, data: dict, origin: dict[str, str], section: str, env: str, checks: dict = CHECKS):
    """`cls` from read_section's answer; a bad value is refused naming the setting it came from, and no
    message quotes the password."""
    for key, value in data.items():
        problem = check(key, value, checks)
        if problem:
            raise SpecError(f"{origin[key]}={shortened(repr(redact(str(value), data.get('password'))))}: {problem}")
    try:
        return build(cls, data, f"{paths.config_file()} ({section}:) / {env}")
    except SpecError as e:  # the message may quote the offending value: never a secret
        raise SpecError(redact(str(e), data.get("password"))) from None


def resolve_url(settings: ConnectionSettings) -> str:
    """Where requests go, as messages name it (a host list: its URLs joined by ", ")."""
    return ", ".join(resolve_urls(settings))


def resolve_urls(settings: ConnectionSettings) -> list[str]:
    if settings.url:
        return settings.urls
    node = ManagedNode()  # the managed node decides its own port
    st = node.read_state()
    return [st.url if st else node.url]


def _serializer():
    from opensearchpy.serializer import JSONSerializer  # deferred: opensearchpy

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


_request = threading.local()  # what this thread's last request was: its answer is parsed right after


def _connection_class(url: str):
    from opensearchpy import Urllib3HttpConnection  # deferred: opensearchpy

    class RetryingConnection(Urllib3HttpConnection):
        def perform_request(self, method, path, params=None, body=None, timeout=None, ignore=(), headers=None):
            _request.what = f"{method} {path}"
            return send_with_retries(
                lambda: super(RetryingConnection, self).perform_request(method, path, params, body, timeout=timeout,
                                                                        ignore=ignore, headers=headers),
                url, _request.what, timeout or self.timeout)

    return RetryingConnection


def _deserializer(transport, url: str):
    """The transport's deserializer, raising UnparseableAnswer (naming the URL) for a body it cannot read:
    invalid JSON in a 200, or a content type that is not OpenSearch's (an HTML page)."""
    from opensearchpy.exceptions import SerializationError  # deferred: opensearchpy
    from opensearchpy.serializer import Deserializer

    class Answers(Deserializer):
        def loads(self, s, mimetype=None):
            try:
                return super().loads(s, mimetype)
            except (SerializationError, ValueError) as e:
                raise unparseable(url, getattr(_request, "what", "a request"), e, s) from None

    return Answers(transport.deserializer.serializers)


def make_client(settings: ConnectionSettings | None = None, pool_size: int | None = None):
    """An opensearch-py client whose requests are retried with back-off (evalctl.opensearch.retries) and
    time out after settings.timeout (sized for vector payloads). `pool_size`: connections kept open per host
    (opensearch-py's default 10), for callers with more requests in flight, each of which would otherwise
    open and drop a connection of its own."""
    from opensearchpy import OpenSearch  # deferred: opensearchpy

    s = settings or load_settings()
    urls = resolve_urls(s)
    url = ", ".join(urls)
    kwargs = dict(
        hosts=urls,
        timeout=s.timeout,
        # the connection retries one host with back-off; the transport moves to the next host of a list (each
        # once) only when one cannot be reached: a status (429, 503) is the cluster's answer, not the host's
        max_retries=len(urls) - 1,
        retry_on_status=(),
        serializer=_serializer(),
        connection_class=_connection_class(url),
        # gzip pays off over a network; on loopback it only burns client CPU on every bulk body.
        http_compress=any(urlparse(u).hostname not in ("127.0.0.1", "localhost", "::1") for u in urls),
    )
    if pool_size:
        kwargs["pool_maxsize"] = pool_size
    if s.username:
        kwargs["http_auth"] = (s.username, s.password or "")
    if s.url and s.url.startswith("https"):
        kwargs.update(use_ssl=True, verify_certs=s.verify_certs, ca_certs=s.ca_certs,
                      ssl_show_warn=s.verify_certs)
    client = OpenSearch(**kwargs)
    client.transport.deserializer = _deserializer(client.transport, url)
    return client


def search_cbor(client, body: dict, index: str | None = None) -> dict:
    """`POST /_search` with the response in CBOR: floats travel as 4 binary bytes instead of about 12
    characters of JSON, which the node renders and the client parses about twice as fast (read-back of
    2,650 384-d vectors: 0.23 s -> 0.15 s for the page). opensearch-py decodes every response as UTF-8
    text, so this one request goes through its connection pool directly (same host, auth, TLS, timeout,
    retries); errors are raised as opensearch-py's own exceptions."""
    import urllib3  # deferred: urllib3, opensearchpy
    from opensearchpy.exceptions import HTTP_EXCEPTIONS, ConnectionError as OSConnectionError
    from opensearchpy.exceptions import ConnectionTimeout, TransportError

    conn = client.transport.get_connection()
    path = conn.url_prefix + (f"/{index}" if index else "") + "/_search"
    headers = {**conn.headers, "content-type": "application/json", "accept": "application/cbor"}
    payload = orjson.dumps(body)

    def send() -> bytes:
        try:
            resp = conn.pool.urlopen("POST", path, payload, retries=False, timeout=conn.timeout, headers=headers)
        except urllib3.exceptions.ReadTimeoutError as e:  # as opensearch-py maps them
            raise ConnectionTimeout("TIMEOUT", str(e), e) from e
        except urllib3.exceptions.HTTPError as e:
            raise OSConnectionError("N/A", str(e), e) from e
        if resp.status >= 400:
            try:
                data = cbor2.loads(resp.data)
            except (cbor2.CBORError, ValueError):  # not the node's own error (e.g. a proxy's page)
                data = resp.data[:500].decode("utf-8", "replace")
            error = data.get("error") if isinstance(data, dict) else None
            kind = error.get("type", str(error)) if isinstance(error, dict) else str(error or resp.status)
            raise HTTP_EXCEPTIONS.get(resp.status, TransportError)(resp.status, kind, data)
        return resp.data

    what = f"POST {path}"
    raw = send_with_retries(send, conn.host + conn.url_prefix, what, conn.timeout)
    try:
        return cbor2.loads(raw) if raw else {}
    except (cbor2.CBORError, ValueError) as e:
        raise unparseable(conn.host + conn.url_prefix, what, e, raw) from None
