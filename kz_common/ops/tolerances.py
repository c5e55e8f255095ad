"""The one tolerance table every numerical check uses.

Elementwise ops get the base tolerance of their dtype; ops that accumulate
(reductions, normalisations, matmul, attention) get one notch looser, because
a correct kernel may sum in a different order than the reference.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Tolerance:
    """allclose-style bounds plus a bound on ||out - ref|| / ||ref||."""

    atol: float
    rtol: float
    rel_norm: float  # relative error norm, scaled to the output's magnitude


# dtype -> (elementwise, accumulating)
_TABLE: dict[torch.dtype, tuple[Tolerance, Tolerance]] = {
    torch.float32: (Tolerance(1e-4, 1e-4, 1e-5), Tolerance(1e-3, 1e-3, 1e-4)),
    torch.float16: (Tolerance(1e-2, 1e-2, 2e-3), Tolerance(3e-2, 3e-2, 5e-3)),
    torch.bfloat16: (Tolerance(1e-2, 1e-2, 8e-3), Tolerance(3e-2, 3e-2, 2e-2)),
}

# Op families whose outputs accumulate over many inputs.
ACCUMULATING_FAMILIES = frozenset({"reduction", "normalization", "matmul", "attention", "softmax"})


def tolerance_for(dtype: torch.dtype, family: str | None) -> Tolerance:
    """Tolerance for outputs of `dtype` produced by an op of `family` (None = unknown: looser)."""
    if dtype not in _TABLE:
        raise ValueError(f"no tolerance defined for dtype {dtype}; supported: {sorted(map(str, _TABLE))}")
    elementwise, accumulating = _TABLE[dtype]
    if family is None or family in ACCUMULATING_FAMILIES:
        return accumulating
    return elementwise
