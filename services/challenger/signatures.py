"""Challenge signatures, near-duplicate detection and the compressed history summary.

A signature is (op, dtype, target, shape range). Two challenges are near
duplicates when op, dtype and target agree and every bound of every dim is
within `tolerance` octaves (log2 units) of the other's: the boundary-free form
of "same quantised log-shape bucket", so (1024, 4096) and (1024, 4095) collide
even where a fixed bucket grid would split them.
"""

from __future__ import annotations

import math
from collections import Counter, OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

from kz_common.ops import shape_bucket
from schemas.events import ChallengeCreated, Target


@dataclass(frozen=True)
class ChallengeSignature:
    op: str
    dtype: str
    target: Target
    shape_range: tuple[tuple[str, int, int], ...]  # (dim, min, max) in dim order

    @classmethod
    def of(cls, op: str, dtype: str, target: Target,
           shape_range: Mapping[str, tuple[int, int]]) -> ChallengeSignature:
        return cls(op, dtype, target, tuple((d, int(lo), int(hi)) for d, (lo, hi) in shape_range.items()))

    @classmethod
    def of_challenge(cls, c: ChallengeCreated) -> ChallengeSignature:
        return cls.of(c.op, c.dtype, c.target, c.shape_range)

    @property
    def group(self) -> tuple[str, str, str, float]:
        """What must match exactly for two signatures to be near duplicates."""
        return (self.op, self.dtype, self.target.kind, round(self.target.value, 6))

    @property
    def bucket(self) -> str:
        return shape_bucket({d: (lo, hi) for d, lo, hi in self.shape_range})

    def key(self) -> str:
        return f"{self.op}|{self.dtype}|{self.target.kind}:{self.target.value:g}|{self.bucket}"


def log_distance(a: ChallengeSignature, b: ChallengeSignature) -> float:
    """Largest log2 gap between corresponding bounds; inf when the dims differ."""
    if [d for d, _, _ in a.shape_range] != [d for d, _, _ in b.shape_range]:
        return math.inf
    gaps = [max(abs(math.log2(lo1) - math.log2(lo2)), abs(math.log2(hi1) - math.log2(hi2)))
            for (_, lo1, hi1), (_, lo2, hi2) in zip(a.shape_range, b.shape_range)]
    return max(gaps, default=0.0)


def is_near_duplicate(a: ChallengeSignature, b: ChallengeSignature, tolerance: float = 0.5) -> bool:
    return a.group == b.group and log_distance(a, b) <= tolerance


class SignatureHistory:
    """The last `capacity` challenge signatures, oldest evicted first."""

    def __init__(self, capacity: int = 512, tolerance: float = 0.5) -> None:
        if capacity < 1 or tolerance < 0:
            raise ValueError(f"need capacity >= 1 and tolerance >= 0, got {capacity}, {tolerance}")
        self.capacity = capacity
        self.tolerance = tolerance
        self._items: OrderedDict[str, ChallengeSignature] = OrderedDict()  # challenge id -> sig

    def __len__(self) -> int:
        return len(self._items)

    def add(self, challenge_id: str, sig: ChallengeSignature) -> None:
        self._items[challenge_id] = sig
        self._items.move_to_end(challenge_id)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def near_duplicate_of(self, sig: ChallengeSignature) -> ChallengeSignature | None:
        """A remembered signature `sig` nearly duplicates, or None."""
        for other in reversed(self._items.values()):  # recent first: the likeliest clash
            if is_near_duplicate(sig, other, self.tolerance):
                return other
        return None

    def summary(self, max_ops: int = 16, max_buckets: int = 3) -> str:
        """Counts per op, dtype and top shape buckets: a prompt-sized digest of the history."""
        if not self._items:
            return "none yet"
        per_op = Counter(s.op for s in self._items.values())
        lines = [f"{len(self._items)} recent challenges:"]
        for op, count in per_op.most_common(max_ops):
            sigs = [s for s in self._items.values() if s.op == op]
            dtypes = Counter(s.dtype for s in sigs)
            buckets = Counter(s.bucket for s in sigs).most_common(max_buckets)
            lines.append(
                f"- {op} x{count} (" + ", ".join(f"{d} x{n}" for d, n in dtypes.most_common()) + "); "
                + "busiest shape buckets: " + ", ".join(f"{b} x{n}" for b, n in buckets)
            )
        if len(per_op) > max_ops:
            lines.append(f"- ... {len(per_op) - max_ops} more ops")
        return "\n".join(lines)
