"""The error type every command turns bad input into: one clear message, no traceback."""

import click


class UserError(click.ClickException):
    """Bad input or environment; the message names the record, file, field or setting."""
