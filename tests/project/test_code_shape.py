"""The code's shape stays within the bounds bench/code_shape.py reports: few functions take more than six
parameters, and no call passes one of those more than four arguments by position (the rest go by name, so a call
says what each value is)."""

from __future__ import annotations

import importlib.util

from conftest import REPO

MAX_LONG_SIGNATURES = 20


def _code_shape():
    spec = importlib.util.spec_from_file_location("code_shape", REPO / "bench" / "code_shape.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_few_long_signatures_and_none_called_with_a_long_row_of_positions():
    shape = _code_shape()
    long_sigs = shape.long_signatures()
    assert len(long_sigs) <= MAX_LONG_SIGNATURES, "\n".join(f"{w} {n} ({p})" for w, n, p in long_sigs)
    calls = shape.long_positional_calls({name for _, name, _ in long_sigs})
    assert not calls, "pass these by name:\n" + "\n".join(calls)
