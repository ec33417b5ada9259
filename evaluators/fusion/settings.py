"""How a fused method combines its BM25 and dense sub-queries: one value type for the native pipelines, client-side
fusion, the fusion sweep and the run identity."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Normalization = Literal["min_max", "l2", "z_score"]
Combination = Literal["arithmetic_mean", "geometric_mean", "harmonic_mean"]


@dataclass(frozen=True)
class FusionSpec:
    """How two sub-queries [BM25, dense] are fused. `dense_weight` is the dense share; BM25 gets the rest."""

    technique: Literal["linear", "rrf"] = "linear"
    normalization: Normalization = "min_max"
    combination: Combination = "arithmetic_mean"
    dense_weight: float = 0.5
    rank_constant: int = 60

    def __post_init__(self):
        if not 0.0 <= self.dense_weight <= 1.0:
            raise ValueError(f"dense weight {self.dense_weight} is outside [0, 1]")
        if self.normalization == "z_score" and self.combination != "arithmetic_mean":
            raise ValueError("z_score normalization works with arithmetic_mean only (neural-search 3.x)")
        if self.rank_constant < 1:
            raise ValueError("the RRF rank constant must be >= 1")

    @property
    def weights(self) -> list[float]:
        return [round(1.0 - self.dense_weight, 6), round(self.dense_weight, 6)]
