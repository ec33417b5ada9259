"""Shared fixtures. Integration tests talk to a real OpenSearch node: the configured cluster when
one answers, else the managed local node, started here (and stopped at the end) if needed."""

from __future__ import annotations

import atexit
import csv
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from evalctl import paths

REPO = Path(__file__).resolve().parents[1]
# ranx's numba kernels compile once into the user's evalctl cache, not into every test's private cache
# (tests set EVALCTL_CACHE to a temporary folder; the first import of ranx would fix numba's folder there);
# ir_datasets, matplotlib and MTEB write there too, before collection imports them, never under $HOME.
paths.confine_libraries()
# The user's own model specs (~/.config/evalctl/models) are never read or written by the tests: an empty folder
# of the session's stands in for them (a test that adds specs points EVALCTL_MODELS_DIR at its own).
os.environ["EVALCTL_MODELS_DIR"] = tempfile.mkdtemp(prefix="evalctl-test-models-")
atexit.register(shutil.rmtree, os.environ["EVALCTL_MODELS_DIR"], True)
# Precision auto is bfloat16 on a CPU with native bf16: the suite's vectors and expected scores must not depend on
# its runner's CPU, so it runs as on one without (tests/indexers/test_precision.py forces both answers).
os.environ["EVALCTL_CPU_BF16"] = "0"
# Real public data, asked of evalctl's dataset catalogue (tests/real_data.py); the names are kept here for the
# modules that import them from conftest.
from real_data import ESPACENET, LENS, USPTO, running_unit_test  # noqa: E402,F401


def lens_head(dest: Path, n: int) -> Path:
    """The first n records of the Lens pizza export, written as a Lens CSV of their own at dest."""
    with open(LENS, newline="", encoding="utf-8", errors="replace") as f:
        rows = list(csv.reader(f))[: n + 1]
    with open(dest, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)
    return dest


def private_cache(root: Path) -> pytest.MonkeyPatch:
    """Cache and results store under root, the hub offline, for a module's fixtures (undo() when done)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("EVALCTL_CACHE", str(root / "cache"))
    mp.setenv("EVALCTL_RESULTS", str(root / "results"))
    mp.setenv("HF_HUB_OFFLINE", "1")
    return mp


# One embedding cache for the module fixtures that encode the same real texts with the same model (the OPS pizza
# titles, its 2011-2015 abstracts): each text encoded once per session. The cache is content-addressed (model,
# prompt, precision, text), so a module reading another's vectors gets what it would have encoded itself; tests
# of encoding and caching keep caches of their own.
SHARED_EMBEDDINGS = Path(tempfile.mkdtemp(prefix="evalctl-test-embeddings-"))
atexit.register(shutil.rmtree, SHARED_EMBEDDINGS, True)


def share_embeddings(cache: Path) -> None:
    """Make the cache folder `cache` read and write the session's shared embedding cache."""
    cache.mkdir(parents=True, exist_ok=True)
    (cache / "embeddings").symlink_to(SHARED_EMBEDDINGS)


_used_cluster: dict = {}

# What makes a test an integration test: it talks to the node (a fixture built on os_client) or loads a real
# model (marked `models`). What is neither integration nor marked `slow` (seconds of work) or `data` (it reads a real
# dataset, fetched through the catalogue) is a `unit` test: `make test-fast` (`pytest -m unit`) is the loop to run
# before each commit, and reads only records the tests write themselves.
NODE_FIXTURES = {"os_client"}
INTEGRATION_MARKS = {"opensearch", "models", "neural_search"}


# The 3-node cluster module (about 4-6 min here) runs in `make test` and CI; a plain `pytest` (the fast loop)
# skips it unless this is set.
CLUSTER_OPT_IN = "EVALCTL_CLUSTER_TESTS"


def pytest_collection_modifyitems(items):
    for item in items:
        if NODE_FIXTURES & set(getattr(item, "fixturenames", ())) or INTEGRATION_MARKS & {
                m.name for m in item.iter_markers()}:
            item.add_marker(pytest.mark.integration)
        elif not (item.get_closest_marker("slow") or item.get_closest_marker("data")):
            item.add_marker(pytest.mark.unit)
        if item.get_closest_marker("cluster") and not os.environ.get(CLUSTER_OPT_IN):
            item.add_marker(pytest.mark.skip(reason=f"3-node cluster tests run with {CLUSTER_OPT_IN}=1 (make test, make test-cluster)"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """A unit test that reads a dataset (its fixtures included) fails, naming it (tests/real_data.py)."""
    if item.get_closest_marker("unit"):
        running_unit_test.append(item.nodeid)
    try:
        return (yield)
    finally:
        running_unit_test.clear()


@pytest.fixture(scope="session")
def os_client():
    from evalctl.opensearch.cluster_info import installed_plugins
    from evalctl.opensearch.connection import load_settings, make_client, resolve_url
    from evalctl.opensearch.node import ManagedNode

    settings = load_settings()
    client = make_client(settings)
    started = None
    if not client.ping():
        if settings.external:
            pytest.fail(f"the configured cluster {settings.describe()} does not answer")
        node, asked = ManagedNode(), time.time()
        # stopped at the end only when this session launched it (not when another process did meanwhile)
        started = node if node.start().started_at >= asked else None
        client = make_client(settings)
    info = client.info()
    _used_cluster.update(url=resolve_url(settings), version=info["version"]["number"],
                         plugins=installed_plugins(client), started_here=started is not None)
    yield client
    if started is not None:
        started.stop()


def free_port_pair() -> int:
    """An HTTP port that is free with its transport port (+100, ManagedNode's rule), so test sessions
    running side by side on one machine never meet on a private node's ports."""
    import socket

    for port in range(9250, 9290):
        with socket.socket() as a, socket.socket() as b:
            try:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 100))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port pair in 9250-9289 (+100) for a private node")


@pytest.fixture(scope="session")
def private_node(os_client):
    """A managed node of the tests' own (own home, a free port, 512 MB heap) for tests that stop, kill or
    replace a node: the shared node keeps serving everything else on the machine. Its distribution is a
    copy of the shared node's (same plugins, nothing downloaded or assembled again). Skips when the
    tests run against a configured cluster (there is no managed node to copy)."""
    from evalctl.opensearch.node import ManagedNode

    shared = ManagedNode()
    if shared.running_state() is None:
        pytest.skip("tests run against a configured cluster, not the managed node")
    # under /tmp itself: as root the node runs as a service user who must be able to enter its home
    home = Path(tempfile.mkdtemp(prefix="evalctl-private-node-"))
    shutil.copytree(shared.dist, home / "dist" / shared.dist.name, symlinks=True)
    node = ManagedNode(home=home, http_port=free_port_pair(), heap="512m")
    node.start(echo=lambda *_: None)
    yield node
    node.stop()
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def on_private_node(private_node, monkeypatch):
    """The private node, made the one evalctl (CLI and library) talks to for this test; started again
    if an earlier test left it stopped."""
    monkeypatch.setenv("EVALCTL_OPENSEARCH_HOME", str(private_node.home))
    monkeypatch.delenv("EVALCTL_OPENSEARCH_URL", raising=False)
    if private_node.running_state() is None:
        private_node.start(echo=lambda *_: None)
    return private_node


# The one rule for the neural-search plugin (native hybrid/RRF): a test that needs it carries
# @pytest.mark.neural_search, and is skipped with the reason on a node without the plugin, or fails there when
# EVALCTL_REQUIRE_NEURAL_SEARCH=1 (CI and `make test` on a machine that has the plugin zip). A test that reaches
# the plugin (REQUIRED_EVENT: require_neural_search met, ensure_pipeline) without the marker fails, so a missing
# marker is found where the plugin is installed, not on a user's clone; except where evalctl asked first whether
# the node has it (ASKED_EVENT: fusion "auto" in a study, a fusion sweep), as such code adapts. A test that checks
# the refusal on a node without the plugin meets no requirement and needs no marker.
REQUIRE_NEURAL_SEARCH = "EVALCTL_REQUIRE_NEURAL_SEARCH"
_plugin_events: list[tuple[str, str]] = []


def pytest_configure(config):
    from evalctl.evaluators.fusion.search_pipelines import ASKED_EVENT, REQUIRED_EVENT

    def audit(event: str, args: tuple) -> None:  # runs on every audit event of the process: compare, nothing more
        if event in (REQUIRED_EVENT, ASKED_EVENT):
            _plugin_events.append((event, str(args[0])))

    sys.addaudithook(audit)  # hooks cannot be removed: one per process


def _unadapted_requirement() -> str | None:
    """What the first requirement of the plugin asked for, unless the node was asked about it before."""
    from evalctl.evaluators.fusion.search_pipelines import ASKED_EVENT

    for event, what in _plugin_events:
        if event == ASKED_EVENT:
            return None
        return what
    return None


@pytest.fixture(autouse=True)
def _neural_search_rule(request):
    marked = request.node.get_closest_marker("neural_search") is not None
    if marked:
        from evalctl.evaluators.fusion.search_pipelines import has_neural_search

        if not has_neural_search(request.getfixturevalue("os_client")):
            if os.environ.get(REQUIRE_NEURAL_SEARCH):
                pytest.fail(f"{REQUIRE_NEURAL_SEARCH} is set but the node has no opensearch-neural-search")
            pytest.skip("opensearch-neural-search is not installed on this node (Maven Central does not publish it: "
                        "a distribution that includes it, e.g. docker-compose's image, or `evalctl opensearch start "
                        "--plugin-zip` with a zip you hold)")
    del _plugin_events[:]
    yield
    if not marked and (what := _unadapted_requirement()):
        pytest.fail(f"this test reaches the neural-search plugin ({what}) but is not marked "
                    "@pytest.mark.neural_search: it would fail on a node without the plugin instead of skipping")


@pytest.fixture
def index_name(os_client):
    """A fresh index name, deleted after the test."""
    name = f"test-{uuid.uuid4().hex[:10]}"
    yield name
    os_client.indices.delete(index=name, ignore_unavailable=True)


@pytest.fixture(scope="session")
def infinity_server(tmp_path_factory):
    """One real embedding server for the session (tests/served_server.py: infinity-emb serving the bundled
    all-MiniLM-L6-v2 on the CPU, behind a key made for the session), stopped at the end; skipped with the reason
    where `make infinity` has not installed it. A test that kills it starts it again on the same port."""
    import secrets

    from served_server import InfinityServer, missing_reason

    from evalctl.indexers.model_loader import offline_model_dir
    from evalctl.models import get_model

    if reason := missing_reason():
        pytest.skip(reason)
    folder = offline_model_dir(get_model("all-minilm-l6-v2"))
    server = InfinityServer(folder, tmp_path_factory.mktemp("infinity"), api_key=secrets.token_urlsafe(24)).start()
    yield server
    server.stop()


def pytest_terminal_summary(terminalreporter):
    if _used_cluster:
        c = _used_cluster
        terminalreporter.write_line(
            f"OpenSearch used by the tests: {c['version']} at {c['url']} "
            f"(plugins: {', '.join(c['plugins']) or 'none'}; started by the test session: {c['started_here']})"
        )
