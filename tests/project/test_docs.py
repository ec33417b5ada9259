"""The front door: the README and the documentation pages link only to files inside the repository that exist, and
the site (docs/, `make docs`) builds in Sphinx's strict mode with every command in its CLI reference."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import click

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
EXTERNAL = ("http://", "https://", "mailto:")
UPWARD = re.compile(r"(?<![\w./])((?:\.\./)+[\w.-]+)")


def _pages() -> list[Path]:
    return [REPO / "README.md", *sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)]


def test_links_stay_inside_the_repository_and_resolve():
    bad = []
    for page in _pages():
        text = page.read_text(encoding="utf-8")
        for named in UPWARD.findall(text):  # a path written out of the repository, linked or not
            if not (page.parent / named).resolve().is_relative_to(REPO):
                bad.append(f"{page.relative_to(REPO)}: names {named}, outside the repository (a user's clone has none)")
        for target in LINK.findall(text):
            if target.startswith(EXTERNAL) or target.startswith("#"):
                continue
            path = (page.parent / target.split("#")[0]).resolve()
            if not path.is_relative_to(REPO):
                bad.append(f"{page.relative_to(REPO)}: {target} is outside the repository")
            elif not path.exists():
                bad.append(f"{page.relative_to(REPO)}: {target} does not exist")
    assert not bad, "\n".join(bad)


def test_links_and_upward_paths_are_read_as_written():
    """The check above reads links as the pages write them (text, image, anchor), and paths that climb out."""
    assert LINK.findall("see [a](x.md#part), ![pic](images/p.png) and [b](https://e.org/y)") == [
        "x.md#part", "images/p.png", "https://e.org/y"]
    assert UPWARD.findall("in `../../data/x` or (../up) but not a/../b") == ["../../data", "../up"]


def _commands(group: click.Group, path: tuple[str, ...]) -> list[tuple[str, ...]]:
    out = []
    for name, cmd in group.commands.items():
        if cmd.hidden:
            continue
        out.append((*path, name))
        if isinstance(cmd, click.Group):
            out.extend(_commands(cmd, (*path, name)))
    return out


def test_the_site_builds_strictly_and_its_cli_reference_lists_every_command(tmp_path):
    from evalctl.cli.main import cli

    out = tmp_path / "html"
    build = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS), str(out)],
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    sections = set(re.findall(r'<section id="([^"]+)"', (out / "reference" / "cli.html").read_text()))
    commands = _commands(cli, ())
    assert len(commands) > 20
    missing = [" ".join(c) for c in commands if "-".join(("evalctl", *c)) not in sections]
    assert not missing, f"not in the CLI reference: {missing}"
