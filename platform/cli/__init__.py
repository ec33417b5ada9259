"""The thin click CLI: `main.py` is the `evalctl` root group; each module adds the commands of one job."""

from __future__ import annotations

import itertools
import sys

from evalctl.quiet import quiet_libraries


def main() -> None:
    """The `evalctl` program. tqdm reads its TQDM_* settings once, when it is first imported, and the commands'
    modules import it: so the root's --verbose is looked for here, before they are (the root group decides again for
    callers in-process)."""
    if "--verbose" not in itertools.takewhile(lambda arg: arg.startswith("-"), sys.argv[1:]):
        quiet_libraries()
    from evalctl.cli.main import main as run  # after: quiet_libraries (the commands' modules import tqdm)

    run()
