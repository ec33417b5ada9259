"""A busy, broken, slow or lost node, and bad connection settings (issue 25, items 4-7): each case goes
through the real CLI, against the real node behind tests/fault_proxy.py, with the OpenSearch URL carrying
a password. Every case asserts: no traceback, the exit code, the same result as without the fault where
retries should absorb it, a message naming the URL (or the setting) where they cannot, and the password in
no output and no file written."""

from __future__ import annotations

import base64
import re
import time
import uuid
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from dashboards_server import dashboards_server  # noqa: F401 - a fixture: the recording import endpoint
from evalctl.cli.main import cli
from evalctl.opensearch import retries
from fault_proxy import FaultProxy
from real_data import ESPACENET_SAMPLE

PIZZA = ESPACENET_SAMPLE  # 12 records, 3 citation queries (test split)
SECRET = "Pa55-" + uuid.uuid4().hex[:8]
PREFIX = f"hf{uuid.uuid4().hex[:6]}"  # the module's own index prefix


def invoke(*args) -> tuple[int, str, str]:
    """Exit code, stdout and stderr interleaved, and stdout alone."""
    out = CliRunner().invoke(cli, [str(a) for a in args])
    assert "Traceback" not in out.output, out.output
    assert out.exception is None or isinstance(out.exception, SystemExit), repr(out.exception)
    assert SECRET not in out.output, out.output
    return out.exit_code, out.output, out.stdout


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """A private cache, config, index prefix and ~/.netrc for the module; no connection setting set."""
    root = tmp_path_factory.mktemp("faults")
    with pytest.MonkeyPatch.context() as mp:
        for var, value in (("EVALCTL_CACHE", root / "cache"), ("EVALCTL_CONFIG", root / "config.yaml"),
                           ("EVALCTL_INDEX_PREFIX", PREFIX), ("HF_HUB_OFFLINE", "1"), ("NETRC", root / "netrc")):
            mp.setenv(var, str(value))
        for var in ("EVALCTL_OPENSEARCH_URL", "EVALCTL_OPENSEARCH_USER", "EVALCTL_OPENSEARCH_PASSWORD",
                    "EVALCTL_OPENSEARCH_TIMEOUT", "EVALCTL_DASHBOARDS_URL", "EVALCTL_DASHBOARDS_USER",
                    "EVALCTL_DASHBOARDS_PASSWORD", "EVALCTL_RESULTS"):
            mp.delenv(var, raising=False)
        yield root


@pytest.fixture(scope="module")
def world(home, os_client):
    """The 12 pizza patents imported, qrels built and a BM25 index loaded straight from the node; the
    outputs of the commands the faults replay, without faults. The prefix's indexes are deleted after."""
    from evalctl.opensearch.connection import load_settings, resolve_url

    try:
        assert invoke("corpus", "import", "--format", "espacenet", "--name", "pz", PIZZA)[0] == 0
        assert invoke("corpus", "qrels", "pz")[0] == 0
        assert invoke("index", "--corpus", "pz")[0] == 0
        baseline = {"status": invoke("index", "status"), "retrieve": ndcg(invoke(*RETRIEVE, "--rerun"))}
        yield {"root": home, "node": resolve_url(load_settings()), "prefix": PREFIX, "baseline": baseline}
    finally:
        os_client.indices.delete(index=f"{PREFIX}-*", ignore_unavailable=True)


CAT = f"GET /_cat/indices/{PREFIX}-*"  # what `index status` asks first
RETRIEVE = ("retrieve", "--method", "bm25", "--corpus", "pz", "--view", "T")


def ndcg(result: tuple[int, str, str]) -> str:
    code, output, stdout = result
    assert code == 0, output
    (line,) = [line for line in stdout.splitlines() if "ndcg@10" in line.lower()]
    return line


@pytest.fixture
def proxy(world, monkeypatch):
    """The fault proxy in front of the node, as the configured cluster, with a password in its URL."""
    with FaultProxy(world["node"], lifetime=90) as p:
        monkeypatch.setenv("EVALCTL_OPENSEARCH_URL", p.url.replace("http://", f"http://admin:{SECRET}@"))
        yield p


def no_secret_in_files(root: Path) -> None:
    for f in root.rglob("*"):
        if f.is_file():
            assert SECRET.encode() not in f.read_bytes(), f


# --------------------------------------------------------------------------- settings (item 7)


@pytest.mark.parametrize("var, value, named", [
    ("EVALCTL_OPENSEARCH_URL", "ftp://127.0.0.1:9200", "use an http:// or https:// URL"),
    ("EVALCTL_OPENSEARCH_URL", "http://127.0.0.1:99999", "Port out of range"),
    ("EVALCTL_OPENSEARCH_URL", f"http://admin:{SECRET}@[::1:9200", "Invalid IPv6 URL"),
    ("EVALCTL_OPENSEARCH_URL", "http://127.0.0.1:92a0", "not a valid URL"),
    ("EVALCTL_OPENSEARCH_TIMEOUT", "-5", "must be a positive number of seconds"),
    ("EVALCTL_OPENSEARCH_TIMEOUT", "nan", "must be a positive number of seconds"),
    ("EVALCTL_DASHBOARDS_URL", "ftp://127.0.0.1:5601", "use an http:// or https:// URL"),
])
def test_bad_connection_setting_is_named(home, monkeypatch, var, value, named):
    monkeypatch.setenv(var, value)
    command = ("dashboards", "install") if "DASHBOARDS" in var else ("index", "status")
    code, output, _ = invoke(*command)
    assert code == 2 and f"Error: {var}=" in output and named in output, output


@pytest.mark.parametrize("config, named", [
    ({"opensearch": [1, 2]}, "`opensearch:` must be a mapping of settings"),
    ([1, 2], "expected a mapping of sections"),
    ({"opensearch": {"url": "ftp://127.0.0.1:9200"}}, "opensearch.url='ftp://127.0.0.1:9200': use an http://"),
    ({"opensearch": {"timeout": -5}}, "opensearch.timeout='-5': must be a positive number"),
    ({"dashboards": {"url": "http://[::1"}}, "dashboards.url='http://[::1': not a valid URL"),
])
def test_bad_config_section_is_named(home, config, named):
    cfg = home / "config.yaml"
    cfg.write_text(yaml.safe_dump(config))
    try:
        code, output, _ = invoke(*(("dashboards", "install") if "dashboards" in str(config) else ("index", "status")))
    finally:
        cfg.unlink()
    assert code == 2 and str(cfg) in output and named in output, output


# --------------------------------------------------------------------------- busy node (item 5)


@pytest.mark.parametrize("kind", ["429", "502", "503", "504", "reset"])
def test_transient_refusals_are_retried_to_the_same_result(world, proxy, kind):
    proxy.fail(kind, times=2, only="_cat/indices")
    t0 = time.monotonic()
    code, output, stdout = invoke("index", "status")
    assert code == 0 and _status(stdout) == _status(world["baseline"]["status"][2]), output
    assert time.monotonic() - t0 >= retries.BACKOFF_S * 3  # waited 0.5 s, then 1 s: a back-off, not a burst
    assert len([i for i in proxy.injected if i.startswith(kind)]) == 2
    proxy.fail(kind, times=2, only="_msearch")
    assert ndcg(invoke(*RETRIEVE, "--rerun")) == world["baseline"]["retrieve"]
    assert len(proxy.injected) == 4
    no_secret_in_files(world["root"])


def test_bulk_load_through_refusals_loads_everything(world, proxy, os_client):
    index = f"{world['prefix']}-pz--bm25"
    os_client.indices.delete(index=index)
    try:
        proxy.fail("429", times=1, only="_bulk").fail("reset", times=1, only="_bulk")
        code, output, _ = invoke("index", "--corpus", "pz", "--chunk-docs", "4")
        assert code == 0, output
        assert [i.split()[0] for i in proxy.injected] == ["429", "reset"]
    finally:
        proxy.clear()
        invoke("index", "--corpus", "pz")  # whatever happened, the module's index is whole again
    os_client.indices.refresh(index=index)
    assert os_client.count(index=index)["count"] == 12


def test_refusals_past_the_retries_are_one_failure(world, proxy, monkeypatch):
    monkeypatch.setattr(retries, "BACKOFF_S", 0.05)  # the schedule is the same, only shorter
    monkeypatch.setattr(retries, "BACKOFF_MAX_S", 0.2)
    proxy.fail("503", times=100, only="_cat/indices")
    code, output, _ = invoke("index", "status")
    assert code == 1 and f"OpenSearch at {proxy.url} answered {CAT} with HTTP 503" in output, output
    assert f"{retries.MAX_RETRIES + 1} times" in output and "rerun the same command" in output
    assert len(proxy.injected) == retries.MAX_RETRIES + 1


@pytest.mark.parametrize("status", ["500", "400"])
def test_an_error_answer_not_retried_is_one_message(world, proxy, status):
    """A 500 or 400 is not a transient refusal: not retried, and reported with the node's own words."""
    proxy.fail(status, only="_cat/indices")
    code, output, _ = invoke("index", "status")
    assert code == 1 and "Traceback" not in output, output
    assert f"OpenSearch at {proxy.url} refused a request ({status} fault_proxy_injected" in output, output
    assert len(proxy.injected) == 1


def test_unparseable_answer_is_one_failure_naming_the_url(world, proxy):
    proxy.fail("garbage", only="_cat/indices")
    code, output, _ = invoke("index", "status")
    assert code == 1 and f"OpenSearch at {proxy.url} sent an answer to {CAT} that cannot be parsed" in output, output


def test_cbor_search_is_retried_and_garbage_is_named(world, proxy, os_client):
    from evalctl.opensearch.connection import make_client, search_cbor

    index = f"{world['prefix']}-pz--bm25"
    body = {"size": 20, "sort": [{"doc_id": "asc"}], "_source": ["doc_id"], "query": {"match_all": {}}}
    want = [h["_id"] for h in os_client.search(index=index, body=body)["hits"]["hits"]]
    client = make_client()
    proxy.fail("503", times=1, only="_search").fail("reset", times=1, only="_search")
    assert [h["_id"] for h in search_cbor(client, body, index=index)["hits"]["hits"]] == want
    proxy.fail("garbage", only="_search")
    with pytest.raises(retries.UnparseableAnswer, match=f"OpenSearch at {proxy.url} sent an answer to POST "):
        search_cbor(client, body, index=index)


def _status(stdout: str) -> str:
    """`index status` less its cost lines: when a load measured the index is a fact of that load, not of the node."""
    return "\n".join(line for line in stdout.splitlines() if not line.lstrip().startswith("cost ("))


# --------------------------------------------------------------------------- slow and stalled node (item 5)


def test_slow_node_is_announced_and_waited_for(world, proxy, monkeypatch):
    monkeypatch.setattr(retries, "NOTICE_AFTER_S", 1.0)  # 15 s in use: the same path, sooner
    proxy.fail("slow", times=100, delay=2.0, only="_cat/indices")
    code, output, stdout = invoke("index", "status")
    assert code == 0 and _status(stdout) == _status(world["baseline"]["status"][2]), output
    assert f"waiting for OpenSearch at {proxy.url}: {CAT} unanswered for" in output
    assert "EVALCTL_OPENSEARCH_TIMEOUT" in output


def test_stalled_node_times_out_with_the_setting_named(world, proxy, monkeypatch):
    monkeypatch.setenv("EVALCTL_OPENSEARCH_TIMEOUT", "1")
    proxy.fail("slow", times=100, delay=4.0, only="_cat/indices")
    t0 = time.monotonic()
    code, output, _ = invoke("index", "status")
    assert code == 1 and f"OpenSearch at {proxy.url} did not answer {CAT} within 1 s" in output, output
    assert "EVALCTL_OPENSEARCH_TIMEOUT" in output
    assert time.monotonic() - t0 < 10  # one retry of the timeout, not five


# --------------------------------------------------------------------------- node lost mid-run (item 6)


def spec_file(world) -> Path:
    """8 steps: import and qrels of pz (done by `world`) and of pz2 (the same patents), their BM25 indexes of
    titles, a retrieval run on each."""
    spec = {"name": f"faults-{world['prefix']}",
            "corpora": [{"name": name, "format": "espacenet", "sources": [str(PIZZA)],
                         "qrels": {"name": "citations", "direction": "both"}} for name in ("pz", "pz2")],
            "retrieval": [{"corpus": name, "views": ["T"], "methods": ["bm25"]} for name in ("pz", "pz2")]}
    path = world["root"] / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def statuses(output: str) -> list[str]:
    """Each step's status as `evalctl run` prints it ("[3/8] import pz2: ok (0.0s) ..."); a progress bar
    may share the line."""
    return re.findall(r"\[\d+/8\] [^:(\n]+: (\w+)", output)


def test_node_lost_mid_run_stops_once_and_the_rerun_continues(world, proxy, monkeypatch):
    spec = spec_file(world)
    proxy.fail("down", only="_msearch")  # the node dies at the first retrieval step's search
    code, output, _ = invoke("run", spec)
    assert code == 1 and set(statuses(output)) == {"done", "ok"} and len(statuses(output)) == 6, output
    assert f"OpenSearch at {proxy.url} stopped answering at step [7/8] retrieve pz bm25 T bm25" in output, output
    assert "1 later step(s) not run" in output and "evalctl opensearch start" not in output  # a configured cluster
    assert "rerun the same `evalctl run` command" in output
    assert output.split("6 finished step(s):\n", 1)[1].splitlines() == [
        "  import pz", "  qrels pz citations", "  import pz2", "  qrels pz2 citations", "  index pz bm25 [T]",
        "  index pz2 bm25 [T]"], output
    assert "FAILED" not in output and "[8/8]" not in output and "ConnectionError(" not in output
    monkeypatch.setenv("EVALCTL_OPENSEARCH_URL", world["node"])  # the node is back (it never left)
    code, output, _ = invoke("run", spec)
    assert code == 0 and statuses(output) == ["done"] * 6 + ["ok"] * 2, output
    no_secret_in_files(world["root"])


def test_node_gone_before_the_run_stops_at_the_first_node_step(world, proxy):
    spec = spec_file(world)
    proxy.go_down()
    code, output, _ = invoke("run", spec)
    assert code == 1 and f"OpenSearch at {proxy.url} does not answer at step [5/8] index pz bm25 [T]" in output, output
    assert "FAILED" not in output and "[6/8]" not in output


# --------------------------------------------------------------------------- Dashboards credentials (item 4)


@pytest.fixture
def dashboards(world, dashboards_server, monkeypatch):
    """A recording Dashboards import endpoint, and a ~/.netrc entry for its host, which evalctl must not
    send (requests would, by default)."""
    url, recorder = dashboards_server
    recorder.answer = {"success": True, "successCount": 3}
    (world["root"] / "netrc").write_text(f"machine 127.0.0.1 login netrc-user password {SECRET}\n")
    return url, recorder


def authorization(recorder) -> list[str | None]:
    return [{k.lower(): v for k, v in r["headers"].items()}.get("authorization") for r in recorder.requests]


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_dashboards_without_credentials_sends_none(world, dashboards, monkeypatch):
    url, recorder = dashboards
    monkeypatch.setenv("EVALCTL_DASHBOARDS_URL", url)
    code, output, _ = invoke("dashboards", "install")
    assert code == 0 and f"into {url}\n" in output, output
    assert authorization(recorder) == [None]


def test_dashboards_url_credentials_are_taken_out_and_never_printed(world, dashboards, monkeypatch):
    url, recorder = dashboards
    monkeypatch.setenv("EVALCTL_DASHBOARDS_URL", url.replace("http://", f"http://kib:{SECRET}@"))
    code, output, _ = invoke("dashboards", "install")
    assert code == 0 and f"into {url} as kib (password set)" in output, output
    assert authorization(recorder) == [basic("kib", SECRET)] and SECRET not in recorder.requests[0]["path"]


def test_dashboards_explicit_credentials_win_and_a_refusal_says_what_to_set(world, dashboards, monkeypatch):
    url, recorder = dashboards
    cfg = world["root"] / "config.yaml"
    cfg.write_text(yaml.safe_dump({"dashboards": {"url": url.replace("http://", "http://url-user:x@"),
                                                  "username": "cfg-user", "password": SECRET}}))
    cfg.chmod(0o600)
    try:
        code, output, _ = invoke("dashboards", "install")
        assert code == 0 and f"into {url} as cfg-user" in output, output
        monkeypatch.setenv("EVALCTL_DASHBOARDS_USER", "env-user")
        monkeypatch.setenv("EVALCTL_DASHBOARDS_PASSWORD", SECRET[::-1])
        monkeypatch.setattr(recorder, "status", 401)
        code, output, _ = invoke("dashboards", "install")
    finally:
        cfg.unlink()
    assert code == 2 and f"OpenSearch Dashboards at {url} refused the import (HTTP 401" in output, output
    assert "EVALCTL_DASHBOARDS_USER and EVALCTL_DASHBOARDS_PASSWORD" in output and SECRET[::-1] not in output
    assert authorization(recorder) == [basic("cfg-user", SECRET), basic("env-user", SECRET[::-1])]
