"""The code's shape, for the rooms issue's before/after note: modules and lines per room, functions taking more
than six parameters, and in-function imports (of the project's own modules, and of everything else).

    python bench/code_shape.py [--list]

A room is a sub-package of evalctl (platform/cli, platform/study, ...; indexers/ and each evaluators/
sub-package); top-level modules of platform/ are the "core" room. `--list` names every long signature and
every in-function import of the project's own modules.
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = {"platform": "", "indexers": "indexers", "evaluators": "evaluators"}  # folder -> room prefix
MAX_PARAMS = 6


def room_of(path: Path) -> str:
    rel = path.relative_to(ROOT)
    top, rest = rel.parts[0], rel.parts[1:]
    if top == "platform":
        return rest[0] if len(rest) > 1 else "core"
    if top == "evaluators" and len(rest) > 1:
        return f"evaluators/{rest[0]}"
    return top


def params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = fn.args
    names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    return len([n for n in names if n not in ("self", "cls")]) + bool(a.vararg) + bool(a.kwarg)


def main() -> None:
    listing = "--list" in sys.argv
    modules, lines = Counter(), Counter()
    long_sigs, own, other = [], [], []
    for folder in SOURCES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            room = room_of(path)
            text = path.read_text()
            modules[room] += 1
            lines[room] += len(text.splitlines())
            tree = ast.parse(text)
            for fn in ast.walk(tree):
                if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                if params(fn) > MAX_PARAMS:
                    long_sigs.append(f"{path.relative_to(ROOT)}:{fn.lineno} {fn.name} ({params(fn)})")
                for node in ast.walk(fn):
                    if isinstance(node, ast.ImportFrom) and node.level == 0 or isinstance(node, ast.Import):
                        name = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
                        where = f"{path.relative_to(ROOT)}:{node.lineno} {name}"
                        (own if name.split(".")[0] == "evalctl" else other).append(where)
    print(f"{'room':<22} {'modules':>8} {'lines':>8}")
    for room in sorted(modules):
        print(f"{room:<22} {modules[room]:>8} {lines[room]:>8}")
    print(f"{'total':<22} {sum(modules.values()):>8} {sum(lines.values()):>8}")
    print(f"functions with more than {MAX_PARAMS} parameters: {len(long_sigs)}")
    print(f"in-function imports: {len(own) + len(other)} ({len(own)} of evalctl's own modules, {len(other)} of others)")
    if listing:
        print("\n".join(["", "long signatures:", *long_sigs, "", "in-function imports of own modules:", *own]))


if __name__ == "__main__":
    main()
