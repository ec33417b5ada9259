"""The code's shape, for the rooms issue's before/after note: modules and lines per room, functions taking more
than six parameters (and the calls that pass one of them more than four arguments by position), functions longer
than sixty lines, and in-function imports (of the project's own modules, and of everything else).

    python bench/code_shape.py [--list]

A room is a sub-package of evalctl (platform/cli, platform/study, ...; indexers/ and each evaluators/
sub-package); top-level modules of platform/ are the "core" room. `--list` names every long signature, long
positional call and long function, and every in-function import of the project's own modules.
tests/project/test_code_shape.py holds the code to these bounds.
"""

from __future__ import annotations

import ast
import functools
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = {"platform": "", "indexers": "indexers", "evaluators": "evaluators"}  # folder -> room prefix
MAX_PARAMS = 6
MAX_POSITIONAL = 4  # arguments a call passes by position to a function taking more than MAX_PARAMS
MAX_LINES = 60


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


def sources() -> list[Path]:
    return [path for folder in SOURCES for path in sorted((ROOT / folder).rglob("*.py"))]


@functools.cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def functions(path: Path):
    """(name, node) of each function of a module, nested ones too; a class's __init__ under the class's name (how
    it is called)."""
    tree = _tree(path)
    inits = {id(fn): c.name for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for fn in c.body
             if isinstance(fn, ast.FunctionDef) and fn.name == "__init__"}
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield inits.get(id(fn), fn.name), fn


def long_signatures() -> list[tuple[str, str, int]]:
    """(where, name, parameters) of each function taking more than MAX_PARAMS."""
    return [(f"{path.relative_to(ROOT)}:{fn.lineno}", name, params(fn)) for path in sources()
            for name, fn in functions(path) if params(fn) > MAX_PARAMS]


def long_positional_calls(names: set[str]) -> list[str]:
    """Each call of a function named in `names` passing more than MAX_POSITIONAL arguments by position (a name that
    also names a short function is left out: the call may be that one's)."""
    short = {name for path in sources() for name, fn in functions(path) if params(fn) <= MAX_PARAMS}
    names = names - short
    out = []
    for path in sources():
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
                if name in names and len(node.args) > MAX_POSITIONAL:
                    out.append(f"{path.relative_to(ROOT)}:{node.lineno} {name} ({len(node.args)} by position)")
    return out


def long_functions() -> list[str]:
    """Each function longer than MAX_LINES lines (its decorators, signature and body)."""
    return [f"{path.relative_to(ROOT)}:{fn.lineno} {name} ({n} lines)" for path in sources()
            for name, fn in functions(path)
            if (n := fn.end_lineno - min([fn.lineno, *(d.lineno for d in fn.decorator_list)]) + 1) > MAX_LINES]


def main() -> None:
    listing = "--list" in sys.argv
    modules, lines = Counter(), Counter()
    own, other = [], []
    for path in sources():
        room = room_of(path)
        text = path.read_text()
        modules[room] += 1
        lines[room] += len(text.splitlines())
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for inner in ast.walk(node):
                    if isinstance(inner, ast.ImportFrom) and inner.level == 0 or isinstance(inner, ast.Import):
                        name = inner.module if isinstance(inner, ast.ImportFrom) else inner.names[0].name
                        where = f"{path.relative_to(ROOT)}:{inner.lineno} {name}"
                        (own if name.split(".")[0] == "evalctl" else other).append(where)
    long_sigs = long_signatures()
    calls = long_positional_calls({name for _, name, _ in long_sigs})
    longest = long_functions()
    print(f"{'room':<22} {'modules':>8} {'lines':>8}")
    for room in sorted(modules):
        print(f"{room:<22} {modules[room]:>8} {lines[room]:>8}")
    print(f"{'total':<22} {sum(modules.values()):>8} {sum(lines.values()):>8}")
    print(f"functions with more than {MAX_PARAMS} parameters: {len(long_sigs)}")
    print(f"calls passing one of them more than {MAX_POSITIONAL} arguments by position: {len(calls)}")
    print(f"functions longer than {MAX_LINES} lines: {len(longest)}")
    print(f"in-function imports: {len(own) + len(other)} ({len(own)} of evalctl's own modules, {len(other)} of others)")
    if listing:
        print("\n".join(["", "long signatures:", *(f"{w} {n} ({p})" for w, n, p in long_sigs), "",
                         "long positional calls:", *calls, "", "long functions:", *longest, "",
                         "in-function imports of own modules:", *own]))


if __name__ == "__main__":
    main()
