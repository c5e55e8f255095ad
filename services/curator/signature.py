"""Task signatures: exact hash of (op, dtype, target, shape range) and shape-LSH keys.

The exact signature identifies a task; the LSH keys make *near* tasks collide:
every dim's (log2 min, log2 max) is quantised into cells `cell` log2-units wide,
on `grids` grids shifted by cell/grids each. Two ranges whose corners all lie
within cell/grids of each other in log2 share a cell on at least one grid when
they have one dim (and usually when they have more); ranges a factor of two or
more apart (cell=1) never collide. Keys carry op, dtype and target, so only
solutions of the same kind of task are ever compared.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping

from schemas import ChallengeContext


def _task_prefix(ctx: ChallengeContext) -> str:
    return f"{ctx.op}|{ctx.dtype}|{ctx.target.kind}:{ctx.target.value:g}"


def task_signature(ctx: ChallengeContext) -> str:
    """Exact task identity: op, dtype, target and the exact shape range, hashed."""
    dims = "|".join(f"{d}={lo}..{hi}" for d, (lo, hi) in sorted(ctx.shape_range.items()))
    return hashlib.blake2b(f"{_task_prefix(ctx)}|{dims}".encode(), digest_size=12).hexdigest()


def shape_lsh_keys(ctx: ChallengeContext, *, cell: float = 1.0, grids: int = 2) -> frozenset[str]:
    """LSH keys of a task: equal keys mean near-identical task (same op/dtype/target, near shapes)."""
    coords = _log_corners(ctx.shape_range)
    keys = set()
    for g in range(grids):
        offset = g * cell / grids
        cells = ",".join(str(math.floor((c + offset) / cell)) for c in coords)
        keys.add(f"{_task_prefix(ctx)}|g{g}|{cells}")
    return frozenset(keys)


def _log_corners(shape_range: Mapping[str, tuple[int, int]]) -> list[float]:
    out: list[float] = []
    for _, (lo, hi) in sorted(shape_range.items()):
        out += [math.log2(lo), math.log2(hi)]
    return out
