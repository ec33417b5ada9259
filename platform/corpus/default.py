"""Which corpus `index`, `retrieve`, `classify` and `cluster` work on when --corpus is not given.

The rule, in order: EVALCTL_DEFAULT_CORPUS; `default_corpus:` in the user config file
(~/.config/evalctl/config.yaml, EVALCTL_CONFIG); the only imported corpus. With several corpora and no
default the user is told which exist and how to choose.
"""

from __future__ import annotations

import os

import click

from evalctl import paths
from evalctl.corpus.store import CorpusNotFound, imported_corpora
from evalctl.errors import UserError
from evalctl.config_files import SpecError, load_yaml

ENV = "EVALCTL_DEFAULT_CORPUS"
CONFIG_KEY = "default_corpus"


def configured_default() -> tuple[str, str] | None:
    """(corpus name, where it is set), or None when no default is configured."""
    if os.environ.get(ENV):
        return os.environ[ENV], ENV
    path = paths.config_file()
    if not path.is_file():
        return None
    doc = load_yaml(path)
    value = doc.get(CONFIG_KEY) if isinstance(doc, dict) else None
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise SpecError(f"{path}: {CONFIG_KEY} must be a corpus name, got {value!r}")
    return value, f"{CONFIG_KEY} in {path}"


def choose_corpus(name: str | None) -> tuple[str, str]:
    """(corpus name, why this one). Raises CorpusNotFound with the choices when there is no single answer."""
    if name:
        return name, "--corpus"
    known = imported_corpora()
    how = f"name one with --corpus, or set {ENV}=NAME or `{CONFIG_KEY}: NAME` in {paths.config_file()}"
    default = configured_default()
    if default:
        if default[0] not in known:
            raise CorpusNotFound(f"the default corpus {default[0]!r} (set by {default[1]}) is not imported; "
                                 f"imported: {', '.join(known) or 'none'}")
        return default[0], f"the default, set by {default[1]}"
    if len(known) == 1:
        return known[0], "the only imported corpus"
    if not known:
        raise CorpusNotFound("no corpus is imported yet: import one with `evalctl corpus import`, "
                             "then name it with --corpus (or leave --corpus out while it is the only one)")
    raise CorpusNotFound(f"{len(known)} corpora are imported ({', '.join(known)}) and no default is set: {how}")


def corpus_for_command(name: str | None) -> str:
    """choose_corpus for a command: says on stderr which corpus was picked when none was named."""
    try:
        chosen, why = choose_corpus(name)
    except CorpusNotFound as e:
        raise UserError(str(e)) from None
    if not name:
        click.echo(f"corpus: {chosen} ({why})", err=True)
    return chosen
