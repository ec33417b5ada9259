"""Downloads a user can trust, against a real HTTP server on the loopback (tests/file_server.py): datasets fetched
from a mirror served over HTTP, verified, converted and imported; a flipped byte refused with both hashes; a
download killed midway completed by the next run; a closed port refused at once; checksums recorded at a first
download and held against a later one."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import REPO
from file_server import serving
from real_data import OPS

MIRROR = Path(os.environ.get("EVALCTL_DATA_MIRROR") or REPO / "no-mirror")
QUICKSTART = "ops-pizza-1990-2015"
# What the 31 OPS pages the repository carried until the catalogue replaced them imported to (the quickstart's
# corpus, whose expected scores and result ids rest on it).
QUICKSTART_CONTENT_HASH = "sha256:c0685e36b197ac8001687d5a6245f915c5ec045ae11e8c6a4588761a104c44b4"


def _dataset(url: str, sha256: str | None, size: int | None, name: str = "toy"):
    from evalctl.datasets.catalogue import Dataset, DatasetFile

    return Dataset(name=name, description="d", licence="l", attribution="a", homepage="h", format="native",
                   files=(DatasetFile(url=url, sha256=sha256, bytes=size),))


def _mirror_copy(root: Path, files: list[str]) -> Path:
    """The mirror's files that `files` (URL paths) name, copied under root."""
    for rel in files:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(MIRROR / rel, root / rel)
    return root


def _quickstart_files() -> list[str]:
    from evalctl.datasets.catalogue import get_dataset

    return [f.url_path for f in get_dataset(QUICKSTART).files]


@pytest.fixture
def mirror_copy(tmp_path):
    if not MIRROR.is_dir():
        pytest.fail(f"the dataset {QUICKSTART} needs its files: set EVALCTL_DATA_MIRROR to a copy of the data mirror "
                    "(the Makefile and .ci/run set it from the data mirror beside the checkout) or run where the network reaches "
                    "its URLs")
    return _mirror_copy(tmp_path / "mirror", _quickstart_files())


@pytest.mark.data
def test_the_quickstart_dataset_is_fetched_verified_converted_and_imported(mirror_copy, tmp_path, monkeypatch):
    """Every file fetched over HTTP from a mirror, verified and imported. Converting the R data takes about 100 s
    (a pure-Python reader): the session's conversion (tests/real_data.py, the same code) is the one imported here,
    found by its stamp of the inputs' checksums, as a second cache of the same files would find it."""
    from evalctl.cli.main import cli
    from evalctl.corpus.store import load_corpus

    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    shutil.copytree(OPS, tmp_path / "cache" / "datasets" / QUICKSTART / "prepared")
    with serving(mirror_copy) as server:
        monkeypatch.setenv("EVALCTL_DATA_MIRROR", server.url)
        r = CliRunner().invoke(cli, ["corpus", "import", "--dataset", QUICKSTART])
        assert r.exit_code == 0, r.output
        assert len(server.requests) == 5  # the three R data files, LICENSE and DESCRIPTION, once each
    corpus = load_corpus(QUICKSTART)
    m = corpus.manifest
    assert m["record_count"] == 2973 and m["content_hash"] == QUICKSTART_CONTENT_HASH
    assert sum(1 for r in corpus.records() for _ in r.citations) > 2162  # cited documents, in the set and out
    assert m["source"]["format"] == "ops" and len(m["source"]["files"]) == 31  # one page per OPS response
    declared = {f.url: f.sha256 for f in _catalogue(QUICKSTART).files}
    assert {f["url"]: f["sha256"] for f in m["dataset"]["files"]} == declared
    assert m["dataset"]["licence"].startswith("R package MIT")
    # a second import reads the cache: nothing fetched, nothing converted again
    with serving(mirror_copy) as server:
        monkeypatch.setenv("EVALCTL_DATA_MIRROR", server.url)
        r = CliRunner().invoke(cli, ["corpus", "import", "--dataset", QUICKSTART])
        assert r.exit_code == 0 and "unchanged" in r.output and server.requests == []


def _catalogue(name):
    from evalctl.datasets.catalogue import get_dataset

    return get_dataset(name)


@pytest.mark.data
def test_a_flipped_byte_is_refused_with_both_hashes(mirror_copy, tmp_path, monkeypatch):
    from evalctl.cli.main import cli

    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    ds = _catalogue(QUICKSTART)
    victim = mirror_copy / ds.files[1].url_path
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x01
    victim.write_bytes(bytes(data))
    with serving(mirror_copy) as server:
        monkeypatch.setenv("EVALCTL_DATA_MIRROR", server.url)
        r = CliRunner().invoke(cli, ["data", "fetch", QUICKSTART])
    assert r.exit_code == 1
    assert ds.files[1].sha256 in r.output and hashlib.sha256(data).hexdigest() in r.output, r.output
    assert ds.files[1].url in r.output and "Traceback" not in r.output
    files = tmp_path / "cache" / "datasets" / QUICKSTART / "files"
    assert not (files / ds.files[1].name).exists()
    assert not any(p.name.endswith(".part") for p in files.iterdir())  # the bad bytes are not kept to resume from


def test_a_killed_download_is_completed_by_the_next_run(tmp_path):
    """`evalctl data fetch` killed halfway through a slow download leaves a partial file that counts as nothing; the
    next run asks only for the rest (a Range request) and verifies the whole."""
    body = os.urandom(3 << 20)
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "big.bin").write_bytes(body)
    digest = hashlib.sha256(body).hexdigest()
    configs = tmp_path / "configs"
    shutil.copytree(REPO / "configs", configs)
    cache = tmp_path / "cache"
    with serving(tmp_path / "site", bytes_per_second=1 << 20) as server:
        (configs / "datasets" / "big.yaml").write_text(
            f"name: big\ndescription: d\nlicence: l\nattribution: a\nhomepage: h\nformat: native\n"
            f"files:\n  - url: {server.url}/big.bin\n    sha256: {digest}\n    bytes: {len(body)}\n")
        env = {**os.environ, "EVALCTL_CONFIGS": str(configs), "EVALCTL_CACHE": str(cache)}
        env.pop("EVALCTL_DATA_MIRROR", None)
        cmd = [str(Path(sys.executable).with_name("evalctl")), "data", "fetch", "big"]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        part = cache / "datasets" / "big" / "files" / ".big.bin.part"
        deadline = time.monotonic() + 60
        while not (part.exists() and part.stat().st_size > len(body) // 4) and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kept = part.stat().st_size
        assert 0 < kept < len(body) and not (cache / "datasets" / "big" / "files" / "big.bin").exists()
        server.requests.clear()
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (cache / "datasets" / "big" / "files" / "big.bin").read_bytes() == body and not part.exists()
    assert [r["range"] for r in server.requests] == [f"bytes={kept}-"]


def test_a_closed_port_gives_the_offline_message_at_once(tmp_path, monkeypatch):
    import socket

    from evalctl.cli.main import cli

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("EVALCTL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("EVALCTL_DATA_MIRROR", f"http://127.0.0.1:{port}/mirror")
    t0 = time.monotonic()
    r = CliRunner().invoke(cli, ["data", "fetch", QUICKSTART])
    took = time.monotonic() - t0
    assert r.exit_code == 1 and took < 5, (took, r.output)
    first = _catalogue(QUICKSTART).files[0].url
    assert f"dataset {QUICKSTART}: cannot fetch {first}" in r.output
    assert f"EVALCTL_DATA_MIRROR=http://127.0.0.1:{port}/mirror" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "cache" / "datasets" / QUICKSTART / "files").exists() or not any(
        (tmp_path / "cache" / "datasets" / QUICKSTART / "files").iterdir())


def test_checksums_unknown_in_advance_are_recorded_and_held(tmp_path, monkeypatch):
    """A dataset whose checksums are not published (DAPFAM's at a hub revision): the first download records them;
    a later download of different bytes is refused naming both."""
    from evalctl.datasets.fetch import DatasetUnavailable, fetch

    monkeypatch.delenv("EVALCTL_DATA_MIRROR", raising=False)
    site = tmp_path / "site"
    site.mkdir()
    (site / "corpus.jsonl").write_bytes(b'{"id": "X1", "title": "first"}\n')
    root = tmp_path / "cache"
    with serving(site) as server:
        ds = _dataset(f"{server.url}/corpus.jsonl", None, None)
        got = fetch(ds, root=root)
        want = hashlib.sha256(got.files["corpus.jsonl"].read_bytes()).hexdigest()
        recorded = json.loads((root / "toy" / "checksums.json").read_text())
        assert recorded == {ds.files[0].url: {"sha256": want, "bytes": got.files["corpus.jsonl"].stat().st_size}}
        got.files["corpus.jsonl"].unlink()  # the cache lost it: fetched again, and the server now serves other bytes
        (site / "corpus.jsonl").write_bytes(b'{"id": "X1", "title": "changed"}\n')
        with pytest.raises(DatasetUnavailable) as e:
            fetch(ds, root=root)
    assert want in str(e.value) and hashlib.sha256(b'{"id": "X1", "title": "changed"}\n').hexdigest() in str(e.value)


def test_a_reset_and_a_5xx_are_retried(tmp_path, monkeypatch):
    from evalctl.datasets.fetch import fetch
    from evalctl.downloads import Policy

    monkeypatch.delenv("EVALCTL_DATA_MIRROR", raising=False)
    body = os.urandom(200_000)
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "f.bin").write_bytes(body)
    with serving(tmp_path / "site", faults=["503", "cut"]) as server:
        ds = _dataset(f"{server.url}/f.bin", hashlib.sha256(body).hexdigest(), len(body))
        got = fetch(ds, root=tmp_path / "cache", policy=Policy(backoff=0.01))
        assert got.files["f.bin"].read_bytes() == body
        assert len(server.requests) == 3 and server.requests[2]["range"] is not None  # the cut one resumed


def test_a_declared_dataset_is_checked_when_the_catalogue_loads():
    from evalctl.config_files import SpecError
    from evalctl.datasets.catalogue import DatasetFile, catalogue

    assert QUICKSTART in catalogue() and all(f.sha256 for f in catalogue()[QUICKSTART].files)
    for bad in ({"url": "ftp://x/y"}, {"url": "https://host/f.csv", "sha256": "abc"}):
        with pytest.raises((ValueError, SpecError)):
            DatasetFile(**bad)
