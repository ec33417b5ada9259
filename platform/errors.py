"""The product's error types, turned into one clear message and an exit code at the CLI (cli.main).

`EvalctlError` is the base of every error evalctl raises on purpose. `BadInput` (exit 2) is the user's to
fix: a setting, a file, a record, a name; `Failure` (exit 1) is the environment's: a node that does not
answer, a cache file that is damaged. Existing error classes derive from one of the two, so the CLI
catches them all in one place; the traceback is shown only with `evalctl --debug`.
"""

import click


class EvalctlError(Exception):
    """Anything evalctl reports as a message rather than a traceback."""

    exit_code = 1


class BadInput(EvalctlError):
    """Bad input or settings; the message names the record, file, field or setting and what to do."""

    exit_code = 2


class Failure(EvalctlError):
    """The environment failed (node, disk, cache); the message says what was kept and what to do."""

    exit_code = 1


class UserError(BadInput, click.ClickException):
    """Raised by the CLI layer itself; click prints it as `Error: ...` with exit code 2."""

    exit_code = 2

    def __init__(self, message: str):
        click.ClickException.__init__(self, message)


def shortened(text: str, limit: int = 200) -> str:
    """`text` with its middle left out past `limit` characters: a message names a long value without printing all
    of it."""
    if len(text) <= limit:
        return text
    return f"{text[:limit // 2]}...({len(text) - limit:,} characters left out)...{text[-limit // 2:]}"
