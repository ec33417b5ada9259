"""A step key, a run label, a system name and a comparison's system strings are built from data (study/spec/step_ids.py,
evaluators/scoring/runs.py, ComparisonReport's letters and labels) and never read back: no source file splits
or partitions one of them into its parts again. Nor one of the names evalctl joins with a separator no input uses:
"+" (a fine-tuned model's id, base+recipe@corpora; a class of queries by their pairs' domains, IN+OUT) and "→" (a
view pair, T→TA): no source splits on them or tests a name for them; the parts travel as typed values."""

from __future__ import annotations

import re

import pytest

from conftest import REPO

SOURCES = ("platform", "indexers", "evaluators")
_SPLIT = r"\.(?:r?split|r?partition)\("
READ_BACK = {
    "a step key": re.compile(rf"\bkey{_SPLIT}"),
    "a run label": re.compile(rf"\blabel{_SPLIT}"),
    "a system name": re.compile(rf"\bsystem(?:_name)?{_SPLIT}"),
    "a comparison's system strings": re.compile(rf"\bsystems\b.*{_SPLIT}|{_SPLIT}.*\bsystems\b"),
    "a name joined with '+' or '→'": re.compile(
        rf"{_SPLIT}\s*['\"](?:\+|→)['\"]|['\"](?:\+|→)['\"]\s+(?:not\s+)?in\b"),
}


def read_backs(text: str) -> list[str]:
    return [f"{line_no}: {what}: {line.strip()}" for line_no, line in enumerate(text.splitlines(), 1)
            for what, pattern in READ_BACK.items() if pattern.search(line)]


@pytest.mark.parametrize("line, what", [
    ('_, corpus, label, views = step.key.split(" ", 3)', "a step key"),
    ('return label.rsplit(":", 1)[0]', "a run label"),
    ('name_of = {s.split(" ")[0]: r for s, r in zip(rep.systems, runs)}', "a comparison's system strings"),
    ('labels = [s.split(" ", 1)[1] for s in rep.systems]', "a comparison's system strings"),
    ('return get_model(model_id.split("+", 1)[0])', "a name joined with '+' or '→'"),
    ('if e.model not in model_ids and "+" not in e.model:', "a name joined with '+' or '→'"),
    ('names = dict.fromkeys(v for pair in views for v in pair.split("→"))', "a name joined with '+' or '→'"),
])
def test_the_rule_sees_a_read_back(line, what):
    assert read_backs(line) == [f"1: {what}: {line}"]


def test_no_source_reads_a_key_or_a_name_back():
    found = [f"{path.relative_to(REPO)}:{hit}" for folder in SOURCES for path in sorted((REPO / folder).rglob("*.py"))
             for hit in read_backs(path.read_text())]
    assert not found, "\n".join(found)
