"""Reading a report's Markdown back in tests: a section's tables as rows of {column: cell}."""

from __future__ import annotations


def section_tables(markdown: str, heading: str) -> list[list[dict]]:
    """The tables of the `## heading` section, in order, each as its rows."""
    section = markdown.split(f"## {heading}")[1].split("\n## ")[0]
    return [rows(t) for t in section.split("\n\n") if t.startswith("|")]


def rows(table: str) -> list[dict]:
    header, *body = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()
                     if line.startswith("|") and not line.startswith(("|--", "|:"))]
    return [dict(zip(header, row)) for row in body]
