"""The machine evalctl runs on, as a measurement's record names it."""

from __future__ import annotations

import platform
from functools import lru_cache


@lru_cache(maxsize=None)
def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), else what the platform module knows of it."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
