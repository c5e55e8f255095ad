"""Shape helpers: log2 shape buckets, exact shape signatures, deterministic shape choice."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from kz_common.ops.exceptions import ShapeRangeError


def _pair(dim: str, value: object) -> tuple[int, int]:
    if not isinstance(value, Sequence) or len(value) != 2:
        raise ShapeRangeError(f"shape_range[{dim!r}] must be a (min, max) pair, got {value!r}")
    lo, hi = value
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (lo, hi)) or not 1 <= lo <= hi:
        raise ShapeRangeError(f"shape_range[{dim!r}] must be ints with 1 <= min <= max, got {value!r}")
    return lo, hi


def _ordered(mapping: Mapping[str, object], op: str | None) -> list[str]:
    if op is None:
        return list(mapping)
    from kz_common.ops.exceptions import UnknownOpError
    from kz_common.ops.registry import get_op

    try:
        dims = get_op(op).dims
    except UnknownOpError:  # an op outside the catalogue keeps the dict's order
        return list(mapping)
    return [d for d in dims if d in mapping] + [d for d in mapping if d not in dims]


def shape_bucket(shape_range: Mapping[str, Sequence[int]], op: str | None = None) -> str:
    """Quantised log2 bucket of a shape range, e.g. "rows:10-12|cols:10-12".

    Each dim maps to floor(log2(min))-ceil(log2(max)), so the bucket covers the range.
    Dims appear in the dict's order, or in the op's dim order when `op` is given.
    """
    if not shape_range:
        raise ShapeRangeError("shape_range is empty")
    parts = []
    for d in _ordered(shape_range, op):
        lo, hi = _pair(d, shape_range[d])
        parts.append(f"{d}:{math.floor(math.log2(lo))}-{math.ceil(math.log2(hi))}")
    return "|".join(parts)


def shape_signature(shape: Mapping[str, object], op: str | None = None) -> str:
    """Exact text key of a concrete shape ("rows=4096|cols=17") or a range ("rows=1..64|cols=1..300")."""
    if not shape:
        raise ShapeRangeError("shape is empty")
    parts = []
    for d in _ordered(shape, op):
        v = shape[d]
        if isinstance(v, int) and not isinstance(v, bool):
            parts.append(f"{d}={v}")
        else:
            lo, hi = _pair(d, v)
            parts.append(f"{d}={lo}..{hi}")
    return "|".join(parts)


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def awkward_middle(lo: int, hi: int) -> int:
    """A size near the geometric middle of [lo, hi], odd and not a power of two when possible."""
    if lo == hi:
        return lo
    m = min(max(round(math.sqrt(lo * hi)), lo), hi)
    candidates = sorted(range(lo, hi + 1) if hi - lo < 64 else range(max(lo, m - 32), min(hi, m + 32) + 1),
                        key=lambda v: (abs(v - m), v))
    inner = [v for v in candidates if v not in (lo, hi)]
    for pool in ([v for v in inner if v % 2 == 1 and not _is_pow2(v)], inner):
        if pool:
            return pool[0]
    return m


def choose_shapes(shape_range: Mapping[str, tuple[int, int]]) -> list[dict[str, int]]:
    """Deterministic shapes spanning a (validated) range: [min corner, awkward middle, max corner].

    Duplicates (from degenerate ranges) are dropped, so fewer than 3 come back only when
    the range holds fewer distinct shapes.
    """
    lo = {d: r[0] for d, r in shape_range.items()}
    mid = {d: awkward_middle(*r) for d, r in shape_range.items()}
    hi = {d: r[1] for d, r in shape_range.items()}
    out: list[dict[str, int]] = []
    for s in (lo, mid, hi):
        if s not in out:
            out.append(s)
    return out
