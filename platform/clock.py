"""The one clock for times evalctl records (manifests, reports): UTC, so two machines' records compare."""

from __future__ import annotations

import time

ISO = "%Y-%m-%dT%H:%M:%SZ"


def utc_now(fmt: str = ISO) -> str:
    """The current UTC time, ISO 8601 to the second by default."""
    return time.strftime(fmt, time.gmtime())
