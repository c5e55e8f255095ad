"""Re-verification: which verdict of a sample is current, and how to treat a new one.

A sample is (challenge id, sample index). Replaying `extracted` through a new
verifier version produces a second verdict (a new event id) for every sample;
the curator must decide on the newest one and void the earlier decision, never
compare the sample with itself (near-dup index, per-challenge best answer).

Versions compare by their numbers, exactly as the DuckDB `version_key` macro of
kz_common/analytics/views.py does ('1.10' > '1.9', 'v2' > '1.0.0'), so the
curator's notion of "newest" and the curated projection's agree. A verdict of
the same version as the current one also supersedes it (the projection breaks
version ties by time: the later verdict wins there too).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Literal

from schemas import SolutionVerified

SampleKey = tuple[str, int]
Pool = Literal["new", "history"]
_NUMBER = re.compile(r"\d+")


def version_key(version: str | None) -> tuple[int, ...]:
    """Sortable form of a verifier version: its numbers in order."""
    return tuple(int(n) for n in _NUMBER.findall(version or ""))


def sample_key(v: SolutionVerified) -> SampleKey:
    return (v.challenge_id, v.sample_index)


@dataclass
class Current:
    """The verdict that currently speaks for a sample."""

    sample_id: str  # its verdict event id
    version: tuple[int, ...]
    # The pool a revoked kept predecessor was in: if this verdict is kept it takes that
    # place (already trained on: history; still waiting: new) and is not new data.
    pool: Pool | None = None


class Arrival(Enum):
    FIRST = "first"  # no earlier verdict of this sample
    SAME = "same"  # the current verdict again (a redelivery): already decided
    STALE = "stale"  # an older verifier version than the current verdict: ignored
    NEWER = "newer"  # same or newer version: supersedes the current verdict


class Ledger:
    """Current verdict per sample."""

    def __init__(self) -> None:
        self._current: dict[SampleKey, Current] = {}

    def __len__(self) -> int:
        return len(self._current)

    def get(self, key: SampleKey) -> Current | None:
        return self._current.get(key)

    def classify(self, sample_id: str, v: SolutionVerified) -> tuple[Arrival, Current | None]:
        """How a verdict relates to its sample's current one (returned too, when any)."""
        cur = self._current.get(sample_key(v))
        if cur is None:
            return Arrival.FIRST, None
        if cur.sample_id == sample_id:
            return Arrival.SAME, cur
        if version_key(v.verifier_version) < cur.version:
            return Arrival.STALE, cur
        return Arrival.NEWER, cur

    def make_current(self, sample_id: str, v: SolutionVerified, *, pool: Pool | None = None) -> None:
        self._current[sample_key(v)] = Current(sample_id, version_key(v.verifier_version), pool)
