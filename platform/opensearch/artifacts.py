"""What the managed node is assembled from: Maven Central artifacts, and plugin zips from Maven, a
local file or an http(s) URL, each optionally pinned by sha256, checked before anything is installed.

A source is written `LOCATION[#sha256=HEX]`, where LOCATION is `maven:group:artifact:version:zip`, a
path, a `file://` URI or an `http(s)://` URL (what `opensearch-plugin install` accepts). Downloads are
kept under the node home (`downloads/`), so a later start needs no network.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import urllib.parse
import zipfile
from dataclasses import dataclass
from pathlib import Path

from evalctl.downloads import DownloadError, Policy, download
from evalctl.errors import Failure
from evalctl.provenance import file_sha256


class NodeError(Failure, RuntimeError):
    """The managed node could not be provisioned, started or stopped; the message says why."""


class NotServed(NodeError):
    """Maven Central answered that the artifact does not exist."""


def maven_fetch(coordinate: str, m2: Path) -> Path:
    """Resolve one artifact (group:artifact:version:type) from Maven Central into the local repo m2."""
    group, artifact, version, kind = coordinate.split(":")
    target = m2.joinpath(*group.split("."), artifact, version, f"{artifact}-{version}.{kind}")
    if target.exists():
        return target
    if shutil.which("mvn") is None:
        raise NodeError("Maven (mvn) is needed to download OpenSearch; install it (e.g. apt-get install maven)")
    m2.mkdir(parents=True, exist_ok=True)
    cmd = [
        "mvn", "-B", "-U",
        "org.apache.maven.plugins:maven-dependency-plugin:3.6.1:get",
        f"-Dartifact={coordinate}", "-Dtransitive=false", f"-Dmaven.repo.local={m2}",
    ]
    # Maven needs a project-less working directory; run it inside its own repository folder.
    proc = subprocess.run(cmd, cwd=m2, capture_output=True, text=True)
    if proc.returncode != 0 or not target.exists():
        text = proc.stdout + proc.stderr
        if "Could not find artifact" in text or "was not found in" in text:
            raise NotServed(f"{coordinate} is not served by Maven Central")
        tail = "\n".join(l for l in text.splitlines() if "ERROR" in l)[-2000:]
        raise NodeError(f"Maven could not download {coordinate}:\n{tail}")
    return target

_SHA = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class PluginSource:
    location: str
    sha256: str | None = None

    def __post_init__(self):
        if self.sha256 is not None and not _SHA.match(self.sha256):
            raise NodeError(f"plugin source {self.location}: sha256 must be 64 hex digits, got {self.sha256!r}")

    @classmethod
    def parse(cls, text: str) -> "PluginSource":
        location, _, fragment = text.strip().partition("#")
        sha = None
        if fragment:
            key, _, value = fragment.partition("=")
            if key != "sha256":
                raise NodeError(f"plugin source {text!r}: the only fragment understood is #sha256=HEX")
            sha = value.lower()
        return cls(location, sha)

    @property
    def kind(self) -> str:
        if self.location.startswith("maven:"):
            return "maven"
        return "url" if urllib.parse.urlsplit(self.location).scheme in ("http", "https") else "file"

    def __str__(self) -> str:
        return self.location + (f"#sha256={self.sha256}" if self.sha256 else "")


def sources_from_env(value: str) -> list[PluginSource]:
    """EVALCTL_OPENSEARCH_PLUGIN_ZIPS: comma-separated sources (a URL holds colons, so not os.pathsep)."""
    return [PluginSource.parse(s) for s in value.split(",") if s.strip()]


@dataclass(frozen=True)
class FetchedPlugin:
    """A plugin zip on local disk whose hash was checked against its source."""

    name: str
    version: str
    path: Path
    sha256: str
    source: PluginSource
    # plugins or modules this one extends (`extended.plugins`): they must be installed before it
    extends: tuple[str, ...] = ()
    optional_extends: tuple[str, ...] = ()
    opensearch_version: str | None = None


def descriptor(zip_path: Path) -> dict:
    """The plugin's descriptor (name, version, opensearch.version, the plugins it extends), after checking
    the whole zip: readable, every entry's CRC right, no entry that would land outside the plugin folder.
    All of it is checked before a running node is touched, so a bad zip never takes the node down."""
    try:
        with zipfile.ZipFile(zip_path) as z:
            unsafe = [i.filename for i in z.infolist() if _unsafe_entry(i)]
            if unsafe:
                raise NodeError(f"{zip_path}: refusing a plugin zip with entries outside its folder "
                                f"({', '.join(unsafe[:3])})")
            broken = z.testzip()
            if broken is not None:
                raise NodeError(f"{zip_path}: entry {broken} is damaged (CRC mismatch); download the zip again")
            props = z.read("plugin-descriptor.properties").decode()
    except (zipfile.BadZipFile, KeyError, EOFError, UnicodeDecodeError) as e:
        raise NodeError(f"{zip_path} is not an OpenSearch plugin zip ({e})") from None
    fields = {k.strip(): v.strip() for k, v in
              (line.split("=", 1) for line in props.splitlines() if "=" in line and not line.startswith("#"))}
    if not fields.get("name"):
        raise NodeError(f"{zip_path}: plugin-descriptor.properties has no name")
    # `extended.plugins=a,b;optional=true`: an optional one need not be there
    required, optional = [], []
    for item in filter(None, (x.strip() for x in fields.get("extended.plugins", "").split(","))):
        name, _, flag = item.partition(";")
        (optional if flag.replace(" ", "") == "optional=true" else required).append(name.strip())
    return {"name": fields["name"], "version": fields.get("version", "?"),
            "opensearch_version": fields.get("opensearch.version"),
            "extends": tuple(required), "optional_extends": tuple(optional)}


def _unsafe_entry(info: zipfile.ZipInfo) -> bool:
    """An absolute path, a `..` component or a symlink: opensearch-plugin refuses these, but only after
    the node was stopped for the install."""
    name = info.filename.replace("\\", "/")
    is_link = (info.external_attr >> 16) & 0o170000 == 0o120000
    return name.startswith("/") or ".." in name.split("/") or is_link


def _download(url: str, downloads: Path, timeout: float) -> Path:
    name = Path(urllib.parse.urlsplit(url).path).name or "plugin.zip"
    target = downloads / hashlib.sha256(url.encode()).hexdigest()[:16] / name
    if target.exists():
        return target
    try:
        download(url, target, policy=Policy(timeout=timeout))
    except DownloadError as e:
        raise NodeError(f"could not download plugin {url}: {e}") from None
    return target


def fetch(source: PluginSource, *, downloads: Path, m2: Path, version: str, timeout: float = 60.0) -> FetchedPlugin:
    """The source's zip on local disk, its sha256 checked (a mismatch is refused naming both hashes)."""
    location = source.location.format(version=version)
    if source.kind == "maven":
        path = maven_fetch(location.removeprefix("maven:"), m2)
    elif source.kind == "url":
        path = _download(location, downloads, timeout)
    else:
        path = Path(urllib.parse.urlsplit(location).path if location.startswith("file:") else location)
        if not path.is_file():
            raise NodeError(f"plugin zip {path} does not exist")
    digest = file_sha256(path).removeprefix("sha256:")
    if source.sha256 and digest != source.sha256:
        if source.kind == "url":
            path.unlink()  # a bad download must not be reused by the next start
        raise NodeError(f"plugin {location}: sha256 mismatch, refusing to install it\n"
                        f"  expected {source.sha256}\n  got      {digest}")
    d = descriptor(path)
    if d["opensearch_version"] not in (None, version):
        raise NodeError(f"plugin {d['name']} {d['version']} from {location} is built for OpenSearch "
                        f"{d['opensearch_version']}, not {version}; use the plugin release for {version}")
    return FetchedPlugin(d["name"], d["version"], path, digest, source, extends=d["extends"],
                         optional_extends=d["optional_extends"], opensearch_version=d["opensearch_version"])
