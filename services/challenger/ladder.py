"""The difficulty ladder: what each curriculum rung asks for (target, breadth of shapes).

Target semantics (what the verifier enforces):
  naive_multiple v      candidate time <= v * naive reference time (v > 1 is lenient)
  optimized_fraction f  candidate speed >= f * optimised baseline speed
                        (i.e. candidate time <= optimised time / f)
Rung 0 is about correctness (1.5x the naive time is allowed); higher rungs close
in on the optimised baseline and cover a wider slice of the op's shape range,
so one kernel must handle more sizes well.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass

from schemas.events import Target


@dataclass(frozen=True)
class Rung:
    level: int
    target: Target
    span: float  # fraction of the op's base log2 shape span a challenge range covers


LADDER: tuple[Rung, ...] = (
    Rung(0, Target(kind="naive_multiple", value=1.5), 0.25),
    Rung(1, Target(kind="optimized_fraction", value=0.5), 0.45),
    Rung(2, Target(kind="optimized_fraction", value=0.8), 0.7),
    Rung(3, Target(kind="optimized_fraction", value=1.0), 1.0),
)
MAX_DIFFICULTY = len(LADDER) - 1


def rung(difficulty: int) -> Rung:
    """The rung for a difficulty; values above the top rung get the top rung."""
    if difficulty < 0:
        raise ValueError(f"difficulty must be >= 0, got {difficulty}")
    return LADDER[min(difficulty, MAX_DIFFICULTY)]


def sample_shape_range(
    base: Mapping[str, tuple[int, int]], span: float, rng: random.Random
) -> dict[str, tuple[int, int]]:
    """A sub-range of `base` covering `span` of each dim's log2 extent, at a random position.

    Sampling in log space spreads challenges evenly over orders of magnitude, which is
    how kernel behaviour changes (tile fit, occupancy), not linearly in size.
    """
    if not 0 < span <= 1:
        raise ValueError(f"span must be in (0, 1], got {span}")
    out: dict[str, tuple[int, int]] = {}
    for dim, (lo, hi) in base.items():
        a, b = math.log2(lo), math.log2(hi)
        width = span * (b - a)
        start = rng.uniform(a, b - width)
        small = min(max(round(2**start), lo), hi)
        large = min(max(round(2 ** (start + width)), small), hi)
        out[dim] = (small, large)
    return out
