"""A managed local OpenSearch node: provisioned from Maven Central, cached, run on 127.0.0.1.

Layout under opensearch_home():
  m2/                      Maven's local repository: the downloads (a second start needs no network)
  dist/opensearch-<v>/     the assembled distribution (core zip + plugins), created atomically
  run/                     data/, logs/, opensearch.pid, node.json (what was started, and where)
"""

from __future__ import annotations

import fcntl
import graphlib
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from evalctl import paths
from evalctl.atomic import replace_dir, write_text
from evalctl.opensearch.artifacts import FetchedPlugin, NodeError, PluginSource, fetch, maven_fetch, sources_from_env
from evalctl.config_files import build, load_yaml


@dataclass(frozen=True)
class PluginSpec:
    name: str
    # LOCATION[#sha256] as in artifacts.py, `{version}` filled in; None: not on Maven Central (a zip must be given)
    source: str | None = None
    sha256: str | None = None
    required: bool = True

    def plugin_source(self) -> PluginSource | None:
        if self.source is None:
            return None
        src = PluginSource.parse(self.source)
        return PluginSource(src.location, self.sha256 or src.sha256)


@dataclass(frozen=True)
class NodeSettings:
    host: str = "127.0.0.1"
    http_port: int = 9200
    transport_port: int = 9300
    heap: str = "1g"
    cluster_name: str = "evalctl"
    service_user: str = "evalctl-os"
    simd_vectors: bool = False  # Lucene's SIMD vector code: faster, but a rebuild's k-NN hits can differ (see below)


@dataclass(frozen=True)
class Membership:
    """A node's place in a local cluster of several (local_cluster.py): its name and how it finds the others."""

    name: str
    seed_hosts: tuple[str, ...]  # host:transport_port of every member
    cluster_managers: tuple[str, ...]  # the members that may be elected cluster manager when it first forms


@dataclass(frozen=True)
class OpenSearchSpec:
    version: str
    min_java: int
    distribution: str
    required_modules: tuple[str, ...] = ()
    plugins: tuple[PluginSpec, ...] = ()
    node: NodeSettings = field(default_factory=NodeSettings)


def load_spec(path: str = "opensearch.yaml") -> OpenSearchSpec:
    return build(OpenSearchSpec, load_yaml(path), f"configs/{path}")


# --------------------------------------------------------------------------- Java

# Lucene computes vector similarities with the JDK's incubating Vector API (SIMD) when the JVM may read this
# module, else with plain Java loops. The SIMD code's sums are rounded differently by the interpreter and by
# the JIT-compiled code, so the first HNSW build after a start (cold code) differs from the next; the plain
# loops give the same floats every time (measured: docs/index-layout.md, bench/ann_reproducible.py).
VECTOR_MODULE = "jdk.incubator.vector"
_OFF = "# off (evalctl: simd_vectors false) "


def set_simd_vectors(jvm_options: Path, on: bool) -> None:
    """Let a distribution's JVM read the Vector API module (on) or not: its line in config/jvm.options is
    commented out, or restored; a JVM option cannot take back an --add-modules that jvm.options gives."""
    text = jvm_options.read_text()
    lines = []
    for line in text.splitlines(keepends=True):
        bare = line.removeprefix(_OFF)
        if VECTOR_MODULE in bare and not bare.lstrip().startswith("#"):
            line = bare if on else _OFF + bare
        lines.append(line)
    if "".join(lines) != text:
        write_text(jvm_options, "".join(lines))



def java_major(java_home: Path) -> int | None:
    java = java_home / "bin" / "java"
    if not java.exists():
        return None
    out = subprocess.run([str(java), "-version"], capture_output=True, text=True).stderr
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2)) if major == 1 else major


def find_java(min_major: int) -> Path:
    """EVALCTL_JAVA_HOME if set (must be new enough), else the newest suitable JDK found."""
    explicit = os.environ.get("EVALCTL_JAVA_HOME")
    if explicit:
        v = java_major(Path(explicit))
        if v is None or v < min_major:
            raise NodeError(f"EVALCTL_JAVA_HOME={explicit} is not a Java {min_major}+ home (found {v})")
        return Path(explicit)
    candidates = [os.environ.get(k) for k in ("OPENSEARCH_JAVA_HOME", "JAVA_HOME")]
    candidates += [str(p) for p in Path("/usr/lib/jvm").glob("*")] if Path("/usr/lib/jvm").is_dir() else []
    found = [(java_major(Path(c)), Path(c)) for c in candidates if c]
    ok = sorted(((v, p) for v, p in found if v and v >= min_major), key=lambda t: t[0], reverse=True)
    if not ok:
        raise NodeError(
            f"OpenSearch needs Java {min_major}+; none found in OPENSEARCH_JAVA_HOME, JAVA_HOME or "
            f"/usr/lib/jvm. Install a JDK {min_major}+ and set EVALCTL_JAVA_HOME."
        )
    return ok[0][1]


# --------------------------------------------------------------------------- the node


@dataclass
class NodeState:
    """What `start` launched; written to run/node.json so status/stop find exactly that process."""

    pid: int
    url: str
    version: str
    distribution: str
    plugins: list[str]
    missing_plugins: dict[str, str]
    started_at: float
    start_seconds: float


class ManagedNode:
    def __init__(self, spec: OpenSearchSpec | None = None, home: Path | None = None,
                 heap: str | None = None, http_port: int | None = None,
                 plugin_sources: tuple[str | Path | PluginSource, ...] = (), member: Membership | None = None,
                 jvm_options: str = ""):
        self.spec = spec or load_spec()
        self.member = member
        self.jvm_options = jvm_options  # added to OPENSEARCH_JAVA_OPTS after the heap
        self.home = home or paths.opensearch_home()
        s = self.spec.node
        self.heap = heap or s.heap
        self.http_port = http_port or s.http_port
        # The transport port follows the HTTP port so two nodes on one machine do not collide.
        self.transport_port = s.transport_port + (self.http_port - s.http_port)
        given = [p if isinstance(p, PluginSource) else PluginSource.parse(str(p)) for p in plugin_sources]
        self.plugin_sources = tuple(given) + tuple(sources_from_env(os.environ.get("EVALCTL_OPENSEARCH_PLUGIN_ZIPS", "")))

    # paths
    @property
    def dist(self) -> Path:
        return self.home / "dist" / f"opensearch-{self.spec.version}"

    @property
    def run_dir(self) -> Path:
        # the members of a local cluster share the distribution, each with its own data, logs and state
        return self.home / "run" if self.member is None else self.home / "run" / self.member.name

    @property
    def state_file(self) -> Path:
        return self.run_dir / "node.json"

    @property
    def log_file(self) -> Path:
        return self.run_dir / "logs" / f"{self.spec.node.cluster_name}.log"

    @property
    def url(self) -> str:
        return f"http://{self.spec.node.host}:{self.http_port}"

    @property
    def knn_plugin(self) -> Path:
        return self.dist / "plugins" / "opensearch-knn"

    def native_knn(self) -> bool | None:
        """Whether the k-NN plugin here has its native libraries (faiss needs them; the plugin from Maven
        Central has none); None when no k-NN plugin is installed here."""
        return (self.knn_plugin / "lib").is_dir() if self.knn_plugin.is_dir() else None

    # provisioning ---------------------------------------------------------
    def wanted_plugins(self) -> tuple[dict[str, FetchedPlugin], dict[str, str]]:
        """Each plugin with a source, fetched and hash-checked (given sources win over the config's), and
        why each configured plugin without one is missing."""
        fetch_one = lambda src: fetch(src, downloads=self.home / "downloads", m2=self.home / "m2",  # noqa: E731
                                      version=self.spec.version)
        wanted = {f.name: f for f in map(fetch_one, self.plugin_sources)}
        missing: dict[str, str] = {}
        for p in self.spec.plugins:
            if p.name in wanted:
                continue
            src = p.plugin_source()
            if src is None:
                if p.required:
                    raise NodeError(f"plugin {p.name} is required but configs/opensearch.yaml gives no source")
                missing[p.name] = ("not on Maven Central; native hybrid/RRF then come from an OpenSearch distribution "
                                   "that includes it (the official bundle or container image), or from a zip you hold: "
                                   "--plugin-zip PATH|URL[#sha256=HEX] or EVALCTL_OPENSEARCH_PLUGIN_ZIPS. Without "
                                   "it, hybrid and RRF are fused client-side and labelled so")
                continue
            wanted[p.name] = fetch_one(src)
        return wanted, missing

    def installed_plugins(self) -> dict[str, dict]:
        """What the assembled distribution holds: name -> version, source, sha256 (empty when not assembled)."""
        try:
            plugins = self.dist_manifest()["plugins"]
        except FileNotFoundError:
            return {}
        # distributions assembled before sources were recorded name only the zip file
        return {n: v if isinstance(v, dict) else {"zip": v} for n, v in plugins.items()}

    def pending_plugins(self) -> tuple[dict[str, FetchedPlugin], dict[str, str]]:
        """Plugins to install (absent, or installed from a zip with another hash), and the missing ones."""
        wanted, missing = self.wanted_plugins()
        installed = self.installed_plugins()
        pending = {n: f for n, f in wanted.items()
                   if n not in installed or installed[n].get("sha256") not in (None, f.sha256)}
        return pending, {n: why for n, why in missing.items() if n not in installed}

    def provision(self, echo=print) -> Path:
        """Download (once) and assemble the distribution, then install any plugin not yet in it."""
        staged = self.stage(echo)
        if staged is not None:
            replace_dir(staged, self.dist)  # atomic: a half-assembled distribution is never used
            shutil.rmtree(staged.parent, ignore_errors=True)
        return self.dist

    def stage(self, echo=print) -> Path | None:
        """The distribution with every pending plugin installed, assembled in a staging folder (None when
        nothing is pending). The distribution in use is never modified, so a running node stays up while
        this runs, and a failed install leaves it exactly as it was."""
        pending, missing = self.pending_plugins()
        if self.assembled() and not pending:
            return None
        java = find_java(self.spec.min_java)
        if self.assembled():
            target, record = self._copy_dist(), self.dist_manifest()
        else:
            target, record = self._unpack_core(echo), {"version": self.spec.version, "plugins": {}}
        try:
            modules = {m.name for m in (target / "modules").iterdir()}
            order = install_order(pending, present=set(record["plugins"]) | modules)
            env = dict(os.environ, OPENSEARCH_JAVA_HOME=str(java))
            tool = str(target / "bin" / "opensearch-plugin")
            for plugin in order:
                if plugin.name in record["plugins"]:
                    echo(f"Replacing plugin {plugin.name} (installed zip differs from {plugin.source})")
                    self._plugin_tool([tool, "remove", plugin.name], env, f"removing {plugin.name}")
                echo(f"Installing plugin {plugin.name} {plugin.version} from {plugin.source}")
                self._plugin_tool([tool, "install", "--batch", plugin.path.resolve().as_uri()], env,
                                  f"installing {plugin.name}")
                record["plugins"][plugin.name] = {"version": plugin.version, "source": str(plugin.source),
                                                  "sha256": plugin.sha256}
            record.update(missing_plugins=missing, java_home=str(java))
            write_text(target / "evalctl-dist.json", json.dumps(record, indent=2))
        except BaseException:
            shutil.rmtree(target.parent, ignore_errors=True)
            raise
        return target

    def assembled(self) -> bool:
        return (self.dist / "evalctl-dist.json").exists()

    def _staging(self) -> Path:
        staging = self.dist.with_name(self.dist.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        return staging

    def _copy_dist(self) -> Path:
        target = self._staging() / self.dist.name
        shutil.copytree(self.dist, target, symlinks=True)
        return target

    def _unpack_core(self, echo) -> Path:
        m2 = self.home / "m2"
        version = self.spec.version
        echo(f"Downloading OpenSearch {version} from Maven Central (cached in {m2}) ...")
        core_zip = maven_fetch(self.spec.distribution.format(version=version), m2)
        staging = self._staging()
        with zipfile.ZipFile(core_zip) as z:
            z.extractall(staging)
        inner = staging / f"opensearch-{version}"
        for sub in ("bin", "jdk/bin"):
            for f in (inner / sub).glob("*") if (inner / sub).is_dir() else []:
                f.chmod(0o755)
        absent = [m for m in self.spec.required_modules if not (inner / "modules" / m).is_dir()]
        if absent:
            shutil.rmtree(staging, ignore_errors=True)
            raise NodeError(f"{core_zip.name} lacks module(s) {', '.join(absent)}; this version is not supported")
        return inner

    @staticmethod
    def _plugin_tool(cmd: list[str], env: dict, what: str) -> None:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise NodeError(f"{what} failed:\n{proc.stdout[-1500:]}{proc.stderr[-1500:]}")

    def dist_manifest(self) -> dict:
        return json.loads((self.dist / "evalctl-dist.json").read_text())

    # running ---------------------------------------------------------------
    def read_state(self) -> NodeState | None:
        try:
            return NodeState(**json.loads(self.state_file.read_text()))
        except (FileNotFoundError, json.JSONDecodeError, TypeError):
            return None

    def is_ours(self, pid: int) -> bool:
        """True when pid is alive and is an OpenSearch JVM running from our distribution."""
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            return False
        return "org.opensearch.bootstrap.OpenSearch" in cmdline and str(self.dist) in cmdline

    def running_state(self) -> NodeState | None:
        st = self.read_state()
        return st if st and self.is_ours(st.pid) else None

    def start(self, timeout: float = 180.0, echo=print) -> NodeState:
        """Start the node (provisioning it first), or return the running one. Concurrent starts of one
        home (two test sessions, two shells) take turns: the second finds the first's node running
        instead of launching a JVM that fails on the data folder's lock."""
        self.home.mkdir(parents=True, exist_ok=True)
        with open(self.home / ".start.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            return self._start_locked(timeout, echo)

    def _start_locked(self, timeout: float, echo) -> NodeState:
        st = self.running_state()
        if st:
            pending, _ = self.pending_plugins()
            if not pending:
                echo(f"OpenSearch already running (pid {st.pid}) at {st.url}")
                return st
            return self._restart_with(self.stage(echo), sorted(pending), st, timeout, echo)
        if _port_open(self.spec.node.host, self.http_port):
            raise NodeError(
                f"port {self.http_port} on {self.spec.node.host} is taken by a process evalctl did not "
                "start; use --port, or point EVALCTL_OPENSEARCH_URL at that cluster"
            )
        self.provision(echo=echo)
        return self._launch(timeout, echo)

    def _restart_with(self, staged: Path, plugins: list[str], st: NodeState, timeout: float, echo) -> NodeState:
        """Swap in a staged distribution under a running node: stop, swap, start; when the new one does
        not come up, the previous distribution is put back and the node started again as it was."""
        echo(f"Restarting OpenSearch (pid {st.pid}) to install {', '.join(plugins)}")
        self.stop()
        previous = self.dist.with_name(self.dist.name + ".previous")
        shutil.rmtree(previous, ignore_errors=True)
        os.rename(self.dist, previous)
        os.rename(staged, self.dist)
        shutil.rmtree(staged.parent, ignore_errors=True)
        try:
            new = self._launch(timeout, echo)
        except NodeError as e:
            shutil.rmtree(self.dist, ignore_errors=True)
            os.rename(previous, self.dist)
            echo("The node did not start with the new plugins; restoring the previous distribution")
            back = self._launch(timeout, echo)
            raise NodeError(f"{e}\nThe node was restored without the new plugins and runs again "
                            f"(pid {back.pid}) at {back.url}.") from None
        shutil.rmtree(previous, ignore_errors=True)
        return new

    def _launch(self, timeout: float, echo) -> NodeState:
        t0 = time.monotonic()
        return self.await_up(self.spawn(timeout, echo), t0, timeout)

    def _discovery(self) -> list[str]:
        m = self.member
        if m is None:
            return ["-Ediscovery.type=single-node", "-Enode.name=evalctl-node"]
        return [f"-Enode.name={m.name}", f"-Ediscovery.seed_hosts={','.join(m.seed_hosts)}",
                f"-Ecluster.initial_cluster_manager_nodes={','.join(m.cluster_managers)}"]

    def spawn(self, timeout: float, echo) -> int:
        """Launch the JVM (daemonised) and return its pid once it wrote it; see await_up."""
        java = find_java(self.spec.min_java)
        for sub in ("data", "logs"):
            (self.run_dir / sub).mkdir(parents=True, exist_ok=True)
        pid_file = self.run_dir / "opensearch.pid"
        pid_file.unlink(missing_ok=True)
        set_simd_vectors(self.dist / "config" / "jvm.options", self.spec.node.simd_vectors)
        prefix = self._as_service_user()
        cmd = prefix + [
            "env", f"OPENSEARCH_JAVA_HOME={java}", f"OPENSEARCH_JAVA_OPTS=-Xms{self.heap} -Xmx{self.heap} {self.jvm_options}".strip(),
            str(self.dist / "bin" / "opensearch"), "-d", "-p", str(pid_file),
            *self._discovery(),
            f"-Enetwork.host={self.spec.node.host}",
            f"-Ehttp.port={self.http_port}",
            f"-Etransport.port={self.transport_port}",
            f"-Ecluster.name={self.spec.node.cluster_name}",
            f"-Epath.data={self.run_dir / 'data'}",
            f"-Epath.logs={self.run_dir / 'logs'}",
            # Build machines can be short of disk; a watermark would turn indices read-only.
            "-Ecluster.routing.allocation.disk.threshold_enabled=false",
        ]
        echo(f"Starting OpenSearch {self.spec.version} on {self.url} (heap {self.heap}) ...")
        # The daemonised JVM inherits our stdout/stderr: a pipe would never reach EOF, so use a file.
        console = self.run_dir / "logs" / "console.out"
        with open(console, "w") as out:
            # its own session: a signal to the caller's process group (Ctrl-C, `timeout`, a job killed by
            # its group) must not reach the node, which outlives the command that started it
            code = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True).returncode
        if code != 0:
            raise NodeError(
                f"OpenSearch failed to start (exit {code}).\n{console.read_text(errors='replace')[-3000:]}\n"
                f"Logs: {self.log_file}"
            )
        return self._wait_for_pid(pid_file, timeout)

    def await_up(self, pid: int, t0: float, timeout: float) -> NodeState:
        """Wait until the node launched as `pid` answers healthy, then record it (run/node.json)."""
        manifest = self.dist_manifest()
        try:
            wait_healthy(self.url, deadline=t0 + timeout, alive=lambda: self.is_ours(pid))
        except NodeError as e:
            self._end(pid)  # a node that did not come up is not left running unrecorded
            raise NodeError(f"{e}\nLogs: {self.log_file}\n{self.tail_log(30)}") from None
        st = NodeState(
            pid=pid, url=self.url, version=self.spec.version, distribution=str(self.dist),
            plugins=sorted(manifest["plugins"]), missing_plugins=manifest.get("missing_plugins", {}),
            started_at=time.time(), start_seconds=round(time.monotonic() - t0, 1),
        )
        self.state_file.write_text(json.dumps(asdict(st), indent=2))
        return st

    def _wait_for_pid(self, pid_file: Path, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pid_file.exists() and pid_file.read_text().strip():
                return int(pid_file.read_text().strip())
            time.sleep(0.2)
        raise NodeError(f"OpenSearch wrote no pid file within {timeout:.0f}s. Logs: {self.log_file}")

    def _as_service_user(self) -> list[str]:
        """As root, run as the unprivileged service user (created if needed) that owns the home."""
        if os.geteuid() != 0:
            return []
        user = self.spec.node.service_user
        try:
            pw = pwd.getpwnam(user)
        except KeyError:
            subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", user],
                           check=True, capture_output=True)
            pw = pwd.getpwnam(user)
        blocked = [p for p in self.home.parents if p.exists() and not p.stat().st_mode & 0o001]
        if blocked:
            raise NodeError(
                f"{blocked[0]} is not traversable by user {user}; set EVALCTL_OPENSEARCH_HOME to a "
                "directory outside it (as root the default is /var/cache/evalctl/opensearch)"
            )
        for root, dirs, files in os.walk(self.home):
            for name in dirs + files:
                p = os.path.join(root, name)
                if os.lstat(p).st_uid != pw.pw_uid:
                    os.lchown(p, pw.pw_uid, pw.pw_gid)
        os.chown(self.home, pw.pw_uid, pw.pw_gid)
        return ["runuser", "-u", user, "--"]

    def stop(self, timeout: float = 60.0) -> int | None:
        """Stop the process `start` launched; returns its pid, or None when none was running."""
        st = self.read_state()
        if st is None or not self.is_ours(st.pid):
            self.state_file.unlink(missing_ok=True)
            return None
        self._end(st.pid, timeout)
        self.state_file.unlink(missing_ok=True)
        return st.pid

    def _end(self, pid: int, timeout: float = 60.0) -> None:
        """SIGTERM, then SIGKILL after `timeout`; returns once the process is gone."""
        if not self.is_ours(pid):
            return
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.is_ours(pid):
            time.sleep(0.2)
        if self.is_ours(pid):
            os.kill(pid, signal.SIGKILL)
            while self.is_ours(pid):
                time.sleep(0.1)

    def tail_log(self, lines: int = 50) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return f"(no log yet at {self.log_file})"


def install_order(pending: dict[str, FetchedPlugin], present: set[str]) -> list[FetchedPlugin]:
    """The pending plugins, each after the plugins it extends (its descriptor's `extended.plugins`): the
    plugin tool refuses a plugin whose dependency is not installed yet. A required dependency that is
    neither pending nor present (installed plugin or module) is refused before anything is installed."""
    graph = {}
    for name, p in pending.items():
        absent = [d for d in p.extends if d not in pending and d not in present]
        if absent:
            raise NodeError(f"plugin {name} ({p.source}) extends {', '.join(absent)}, which is neither "
                            "installed nor given; add it to plugins: in configs/opensearch.yaml or give its "
                            "zip with --plugin-zip")
        graph[name] = [d for d in (*p.extends, *p.optional_extends) if d in pending]
    try:
        return [pending[n] for n in graphlib.TopologicalSorter(graph).static_order()]
    except graphlib.CycleError as e:
        raise NodeError(f"plugins extend each other in a cycle: {' -> '.join(e.args[1])}") from None


def _port_open(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def wait_healthy(url: str, deadline: float, alive=lambda: True) -> dict:
    """Poll cluster health until yellow/green; fail early if the process died."""
    last = "no answer"
    while time.monotonic() < deadline:
        if not alive():
            raise NodeError(f"OpenSearch exited during startup (last health check: {last})")
        try:
            with urllib.request.urlopen(f"{url}/_cluster/health?wait_for_status=yellow&timeout=5s", timeout=10) as r:
                health = json.loads(r.read())
            if health.get("status") in ("yellow", "green"):
                return health
            last = health.get("status", "?")
        except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError) as e:
            last = str(e)
            time.sleep(1)
    raise NodeError(f"OpenSearch at {url} not healthy in time (last: {last})")
