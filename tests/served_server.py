"""A real embedding server for the served-model tests and bench/served.py: infinity-emb (`make infinity` installs
it in .venv-infinity, its own virtual environment: it pins numpy<2 and sentence-transformers<4) serving the bundled
all-MiniLM-L6-v2 folder on the CPU, on 127.0.0.1 only, behind an API key, with an OpenAI-compatible
`POST /v1/embeddings`. It can be killed (SIGKILL, mid-request) and started again on the same port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
INFINITY = Path(os.environ.get("EVALCTL_INFINITY_VENV", REPO / ".venv-infinity")) / "bin" / "infinity_emb"
# written by `make infinity` once the install has finished (a half-built venv has the script but no stamp)
INSTALLED = INFINITY.parent.parent / ".installed"
SERVED_NAME = "minilm-on-infinity"


def missing_reason() -> str | None:
    """Why no server can be started here (None when it can)."""
    if not INSTALLED.is_file():
        return f"infinity-emb is not installed in {INFINITY.parent.parent} (`make infinity` builds it; `make test` does)"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class InfinityServer:
    """infinity_emb v2 serving `folder` as SERVED_NAME at http://127.0.0.1:{port}/v1; its home, log and
    telemetry kept to `home` (nothing written in the working directory, nothing sent out)."""

    def __init__(self, folder: Path, home: Path, api_key: str, port: int | None = None):
        self.folder, self.home, self.api_key = folder, home, api_key
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.log = home / "infinity.log"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 180.0) -> InfinityServer:
        self.home.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "INFINITY_HOME": str(self.home), "HF_HOME": str(self.home / "hf"), "HF_HUB_OFFLINE": "1",
               "DO_NOT_TRACK": "1", "INFINITY_ANONYMOUS_USAGE_STATS": "0", "INFINITY_API_KEY": self.api_key}
        cmd = [str(INFINITY), "v2", "--model-id", str(self.folder), "--served-model-name", SERVED_NAME,
               "--host", "127.0.0.1", "--port", str(self.port), "--url-prefix", "/v1", "--device", "cpu",
               "--engine", "torch", "--dtype", "float32", "--no-vector-disk-cache", "--lengths-via-tokenize",
               "--no-model-warmup", "--log-level", "warning"]
        with open(self.log, "ab") as log:  # the key is passed in the environment, never on the command line
            self.proc = subprocess.Popen(cmd, cwd=self.home, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"infinity_emb exited with {self.proc.returncode}; see {self.log}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as answer:
                    if answer.status == 200:
                        return self
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"infinity_emb did not answer on {self.url} within {timeout:.0f} s; see {self.log}")

    def kill(self) -> None:
        """SIGKILL, as a crashed server: requests in flight get a reset, new ones are refused."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None
