"""Passages (issue 41): a view's text cut into windows of the model's own tokens, so a long patent is encoded
whole, one vector per passage, instead of cut at the model's limit.

A passage setting is a window and a stride in tokens of the tokenizer that encodes the passages (the prompt and the
special tokens not counted: a window must fit the model's limit with them). Windows start every `stride` tokens;
the last one ends at the text's last token, so the tail is never dropped and never a short scrap. A passage is the
text between its first token's first character and its last token's last character: its character offsets are
kept, so a hit shows which passage matched. The setting is part of the vectors' identity (the cache entry's view,
`passage_unit`) and names its index field (`passage_path`): two windows are two fields and two identities.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from evalctl.errors import BadInput

_NAME = re.compile(r"w(\d+)s(\d+)")


class PassageError(BadInput, ValueError):
    """A passage setting that cannot be used: one message naming it."""


@dataclass(frozen=True, order=True)
class PassageSpec:
    window: int  # tokens per passage
    stride: int  # tokens from one passage's start to the next (window - stride tokens overlap)

    def __post_init__(self):
        if self.window < 1:
            raise PassageError(f"passage window {self.window}: must be 1 or more tokens")
        if not 1 <= self.stride <= self.window:
            raise PassageError(f"passage stride {self.stride}: must be between 1 and the window ({self.window}): "
                               "a longer stride would skip text")

    @property
    def name(self) -> str:
        """w<window>s<stride>: how the setting is written in field names, units and identities."""
        return f"w{self.window}s{self.stride}"

    @classmethod
    def parse(cls, value: str) -> PassageSpec:
        """WINDOW[:STRIDE] as a user writes it (default stride: a quarter of the window overlaps), or a name."""
        if m := _NAME.fullmatch(value):
            return cls(int(m[1]), int(m[2]))
        window, _, stride = value.partition(":")
        try:
            w, s = int(window), int(stride) if stride else None
        except ValueError:
            raise PassageError(f"passages {value!r}: expected WINDOW[:STRIDE] in tokens, e.g. 128 or 128:96") from None
        return cls(w, s if s is not None else max(1, w - w // 4))


def passage_unit(view: str, spec: PassageSpec) -> str:
    """A view's passages as a field unit (a document's `loaded_views`) and as the embedding cache's view."""
    return f"{view}@{spec.name}"


def passage_path(view: str, spec: PassageSpec) -> str:
    """The nested field holding a view's passages of this setting."""
    return f"psg_{view}_{spec.name}"


def passage_spans(text: str, tokenizer, spec: PassageSpec) -> list[tuple[int, int]]:
    """(start, end) character offsets of each passage of `text` (see the module docstring); none for a text
    without tokens."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, truncation=False, verbose=False)
    offsets = [(a, b) for a, b in enc["offset_mapping"] if b > a]
    n = len(offsets)
    if not n:
        return []
    starts = list(range(0, max(n - spec.window, 0) + 1, spec.stride))
    if starts[-1] + spec.window < n:
        starts.append(n - spec.window)
    return [(offsets[s][0], offsets[min(s + spec.window, n) - 1][1]) for s in starts]


def content_limit(max_seq_length: int, tokenizer, prompt: str) -> int:
    """The tokens of text a model takes in one input after its special tokens and `prompt`."""
    specials = len(tokenizer("", add_special_tokens=True)["input_ids"])
    prompted = len(tokenizer(prompt, add_special_tokens=False)["input_ids"]) if prompt else 0
    return max_seq_length - specials - prompted


def check_window(spec: PassageSpec, limit: int, model_id: str) -> None:
    if spec.window > limit:
        raise PassageError(f"passages {spec.name}: a window of {spec.window} tokens is longer than model "
                           f"{model_id} takes ({limit} tokens of text after its prompt and special tokens): the "
                           f"model would cut every passage; use a window of at most {limit}")
