"""Byte vectors (`data_type: byte` in configs/index.yaml): evalctl's own int8 quantisation of the float vectors
it has (embedding cache), applied alike to the documents it loads and to every query vector it sends.

The rule, recorded in the index manifest (`byte_quantisation`): one symmetric scale per index,
`scale = 127 / max|x|` over every component of the vectors loaded when the index is made (all its views and
task fields), `q = clip(round(x * scale), -127, 127)`, read back as `q / scale`.

Why one scale and no offset: the dot product and cosine of two vectors quantised with the same scale are
scale^2 times and exactly those of the float vectors, up to rounding, so queries quantised by the same rule
rank as float queries do (up to rounding) under every space type. A per-dimension scale or a min/max offset
(as some libraries' 8-bit quantisers use) would weight dimensions unequally or add a per-document term that
the engine's byte similarity never subtracts. Why the corpus's maximum, not the +-1 bound of a unit vector:
MiniLM's components stay well under 0.5, so the bound would leave most of the 255 levels unused.
A read-back component is within half a step (0.5 / scale) of the float one; a view added later to the index
keeps its scale, and a component beyond max|x| is clipped (`index verify` then reports the difference).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from evalctl.errors import BadInput

LEVELS = 127  # symmetric: -128 is never used, so q and -q are both representable
RULE = (f"symmetric per index: q = clip(round(x * scale), -{LEVELS}, {LEVELS}), scale = {LEVELS} / max|x| over the "
        f"vectors loaded when the index was made; read back as q / scale")


def is_byte(manifest: dict) -> bool:
    return manifest.get("data_type") == "byte"


def quantisation(max_abs: float) -> dict:
    """The manifest entry of an index whose first load's vectors have this largest |component|."""
    if not np.isfinite(max_abs) or max_abs <= 0:
        raise BadInput(f"data_type byte: the vectors to load have largest |component| {max_abs}; a scale needs a "
                       f"finite, positive one (index these vectors with data_type float)")
    return {"rule": RULE, "scale": LEVELS / float(max_abs)}


def max_abs(arrays: Iterable[np.ndarray]) -> float:
    return max((float(np.abs(a).max()) for a in arrays if len(a)), default=0.0)


def quantise(vectors, scale: float) -> np.ndarray:
    """int8 vectors (rows) by the rule; the serializer writes them as JSON integers, as byte fields require."""
    q = np.rint(np.asarray(vectors, dtype=np.float64) * scale)
    return np.clip(q, -LEVELS, LEVELS).astype(np.int8)


def dequantise(values, scale: float) -> np.ndarray:
    return (np.asarray(values, dtype=np.float64) / scale).astype(np.float32)


def tolerance(manifest: dict) -> float:
    """How far a dequantised component may be from the float one: half a quantisation step."""
    return 0.5 / manifest["byte_quantisation"]["scale"]


def stored(vectors, manifest: dict) -> np.ndarray:
    """What an index of `manifest` stores for these float vectors (int8 for a byte index, float32 otherwise)."""
    if is_byte(manifest):
        return quantise(vectors, manifest["byte_quantisation"]["scale"])
    return np.asarray(vectors, dtype=np.float32)


def read_back(values, manifest: dict) -> np.ndarray:
    """The float32 vectors of values read from an index of `manifest` (a byte index's dequantised)."""
    if is_byte(manifest):
        return dequantise(values, manifest["byte_quantisation"]["scale"])
    return np.asarray(values, dtype=np.float32)
