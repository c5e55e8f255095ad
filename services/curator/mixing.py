"""Training-set mixing: new samples plus a replay sample of the history pool.

A set is `new_fraction` new samples and the rest replayed from earlier kept
samples: n_replay = round(n_new * (1 - f) / f), or the whole history when it is
shorter. Replay is stratified: (family, shape bucket) groups are visited
round-robin in a seeded order and each group is drawn in a seeded order, so the
replayed part is balanced and the same inputs always give the same set.
"""

from __future__ import annotations

import hashlib
import random
from collections import defaultdict
from dataclasses import dataclass


@dataclass(frozen=True)
class PoolItem:
    sample_id: str
    family: str
    shape_bucket: str
    code_hash: str


def replay_count(n_new: int, new_fraction: float) -> int:
    """Replayed samples that go with `n_new` new ones."""
    return round(n_new * (1 - new_fraction) / new_fraction)


def sample_replay(history: list[PoolItem], n: int, seed: int) -> list[PoolItem]:
    """`n` items (or all) of `history`, balanced over (family, shape bucket)."""
    if n >= len(history):
        return list(history)
    rng = random.Random(seed)
    groups: dict[tuple[str, str], list[PoolItem]] = defaultdict(list)
    for item in history:
        groups[(item.family, item.shape_bucket)].append(item)
    order = sorted(groups)
    rng.shuffle(order)
    for key in order:
        rng.shuffle(groups[key])
    out: list[PoolItem] = []
    while len(out) < n:
        for key in order:
            if groups[key] and len(out) < n:
                out.append(groups[key].pop())
    return out


def dataset_hash(items: list[PoolItem]) -> str:
    """Content hash of a training set: sample ids and code hashes, order-free."""
    lines = sorted(f"{i.sample_id}:{i.code_hash}" for i in items)
    return hashlib.blake2b("\n".join(lines).encode(), digest_size=16).hexdigest()
