"""The one clock for times evalctl records (manifests, reports): UTC, so two machines' records compare."""

from __future__ import annotations

import time
from datetime import datetime, timezone

ISO = "%Y-%m-%dT%H:%M:%SZ"


def utc_now(fmt: str = ISO) -> str:
    """The current UTC time, ISO 8601 to the second by default."""
    return time.strftime(fmt, time.gmtime())


def utc_now_us() -> str:
    """The current UTC time, ISO 8601 to the microsecond: orders records made within one second."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
