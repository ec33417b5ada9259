"""Names that become folder or index names (corpora, qrels sets, fine-tuned models): never a path.

One rule for all of them, so a name can never climb out of the cache (`..`, `/`), hide (a leading dot),
overflow a file-name limit, or turn into a different OpenSearch index than the one shown.
"""

from __future__ import annotations

import re

from evalctl.errors import BadInput

MAX_LENGTH = 100  # well under the 255-byte file-name and OpenSearch index-name limits, with room for suffixes
_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+=@-]*")


class BadName(BadInput, ValueError):
    pass


def check_name(value: object, what: str) -> str:
    """`value` unchanged when it is a safe name, else BadName naming `what` (e.g. "--name") and the rule."""
    if not isinstance(value, str) or not _SAFE.fullmatch(value) or ".." in value or len(value) > MAX_LENGTH:
        shown = value if isinstance(value, str) and len(value) <= 60 else f"{str(value)[:60]}... ({len(str(value))} chars)"
        raise BadName(f"{what} {shown!r} is not a valid name: use 1-{MAX_LENGTH} letters, digits and . _ + = @ -, "
                      "starting with a letter or digit, without '..' (a name is never a path)")
    return value


def safe_component(value: str, limit: int = 80) -> str:
    """`value` made safe as one folder name (unsafe characters to '_', cut to `limit`), for labels whose
    uniqueness comes from elsewhere (a result's identity hash)."""
    out = re.sub(r"[^A-Za-z0-9._+=@-]", "_", value).replace("..", "_")[:limit].lstrip(".")
    return out or "_"
