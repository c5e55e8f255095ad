"""Window selection: best answer per challenge, near-dup removal, top fraction with diversity.

Order of the steps, each on the survivors of the previous one:
1. best per challenge: the highest-scoring passing solution of a challenge is its
   answer; each other solution (worse passing ones, and failed / rule-hit ones
   when configured) becomes a preference pair (chosen = answer, rejected = other).
2. near-dup removal against the kept history and within the window, best first.
3. top fraction: keep max(min_keep, floor(keep_fraction * n)) of the rest, picked
   greedily from the (family, shape bucket) group with the fewest picks so far
   (ties: the group whose best remaining score is highest), so one easy family
   cannot fill the window.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from datasketch import MinHash

from schemas import SolutionVerified
from services.curator.neardup import NearDupIndex


@dataclass
class Candidate:
    """One verified solution in the current window."""

    sample_id: str
    verdict: SolutionVerified
    code: str
    shape_bucket: str
    task_keys: frozenset[str]
    minhash: MinHash | None = None
    score: float | None = None  # None: not a passing, clean solution (kept only for pairs)
    loss_reason: str = ""  # why a non-candidate lost: 'failed:<stage>' or 'rule:<names>'
    group: tuple[str, str] = field(default=("", ""))

    @property
    def eligible(self) -> bool:
        return self.score is not None


@dataclass(frozen=True)
class Pair:
    chosen: Candidate
    rejected: Candidate
    reason: str


def _rank(c: Candidate) -> tuple[float, str]:
    return (-(c.score if c.score is not None else -math.inf), c.sample_id)


def best_per_challenge(
    window: list[Candidate], *, with_failed: bool, max_pairs: int
) -> tuple[list[Candidate], list[Candidate], list[Pair]]:
    """(answers, passing losers, preference pairs)."""
    by_challenge: dict[str, list[Candidate]] = defaultdict(list)
    for c in window:
        by_challenge[c.verdict.challenge_id].append(c)
    answers: list[Candidate] = []
    losers: list[Candidate] = []
    pairs: list[Pair] = []
    for cid in sorted(by_challenge):
        group = sorted(by_challenge[cid], key=_rank)
        best = group[0]
        if not best.eligible:
            continue
        answers.append(best)
        for other in group[1:]:
            if other.eligible:
                losers.append(other)
            if (other.eligible or with_failed) and sum(p.chosen is best for p in pairs) < max_pairs:
                pairs.append(Pair(best, other, other.loss_reason or "lower_score"))
    return answers, losers, pairs


def remove_near_dups(
    answers: list[Candidate], history: NearDupIndex, *, threshold: float, num_perm: int
) -> tuple[list[Candidate], list[tuple[Candidate, str]]]:
    """(unique answers, (duplicate, id of the sample it duplicates)); best answers win."""
    local = NearDupIndex(threshold=threshold, num_perm=num_perm)
    unique, dups = [], []
    for c in sorted(answers, key=_rank):
        assert c.minhash is not None  # eligible candidates always carry one
        original = history.find(c.minhash, c.task_keys) or local.find(c.minhash, c.task_keys)
        if original is not None:
            dups.append((c, original))
            continue
        local.add(c.sample_id, c.minhash, c.task_keys)
        unique.append(c)
    return unique, dups


def keep_count(n: int, fraction: float, min_keep: int) -> int:
    """How many of `n` unique answers a window keeps."""
    return min(n, max(min_keep, math.floor(fraction * n)))


def select_diverse(unique: list[Candidate], k: int) -> tuple[list[Candidate], list[Candidate]]:
    """(kept, dropped): k best answers balanced over (family, shape bucket) groups."""
    groups: dict[tuple[str, str], list[Candidate]] = defaultdict(list)
    for c in sorted(unique, key=_rank):
        groups[c.group].append(c)
    picks: dict[tuple[str, str], int] = defaultdict(int)
    kept: list[Candidate] = []
    while len(kept) < k:
        live = [g for g in groups if groups[g]]
        g = min(live, key=lambda g: (picks[g], _rank(groups[g][0]), g))
        kept.append(groups[g].pop(0))
        picks[g] += 1
    chosen = {c.sample_id for c in kept}
    return kept, [c for c in unique if c.sample_id not in chosen]
