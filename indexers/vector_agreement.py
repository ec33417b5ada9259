"""One text, one vector under one key: the check `evalctl vectors merge` and `evalctl vectors import` make before
storing the vectors that several holders give for a text (source caches, rows of an import, the entry that
already holds it). The embedding cache keys vectors by text, so a second vector for a text would be dropped or
replace the first: one record would silently carry another's vector."""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass

import numpy as np

SAME_TOLERANCE = 1e-5  # a re-import may repeat vectors the entry holds (see index_contract.REENCODE_TOLERANCE)


@dataclass(frozen=True)
class Disagreement:
    text: bytes  # the text's hash
    first: Hashable  # who gave its first vector
    other: Hashable  # who gives a different one
    diff: float  # max |diff| between the two


class FirstVectors:
    """The first vector given for each text, and who gave it."""

    def __init__(self) -> None:
        self._first: dict[bytes, tuple[Hashable, np.ndarray]] = {}

    def __getitem__(self, text: bytes) -> np.ndarray:
        return self._first[text][1]

    def add(self, given: Iterable[tuple[bytes, Hashable, np.ndarray]]) -> Disagreement | None:
        """Take (text hash, holder, vector) in turn; the first vector that differs from its text's first one by
        more than SAME_TOLERANCE is returned, and what follows it is not taken."""
        for text, holder, vector in given:
            first_holder, base = self._first.setdefault(text, (holder, vector))
            if (diff := float(np.abs(np.asarray(vector, dtype=np.float32) - base).max())) > SAME_TOLERANCE:
                return Disagreement(text, first_holder, holder, diff)
        return None
