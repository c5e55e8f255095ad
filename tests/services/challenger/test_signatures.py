"""Ladder, shape sampling, signatures, near-duplicate refusal and the history summary."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from schemas.events import Target
from services.challenger.ladder import LADDER, MAX_DIFFICULTY, rung, sample_shape_range
from services.challenger.signatures import (
    ChallengeSignature,
    SignatureHistory,
    is_near_duplicate,
    log_distance,
)

LOOSE = Target(kind="naive_multiple", value=1.5)
TIGHT = Target(kind="optimized_fraction", value=0.8)


def sig(rows: tuple[int, int], cols: tuple[int, int], op: str = "softmax", dtype: str = "float16",
        target: Target = LOOSE) -> ChallengeSignature:
    return ChallengeSignature.of(op, dtype, target, {"rows": rows, "cols": cols})


def test_ladder_tightens_and_widens() -> None:
    assert rung(0).target == Target(kind="naive_multiple", value=1.5)
    assert [r.target.value for r in LADDER[1:]] == [0.5, 0.8, 1.0]
    assert all(a.span < b.span for a, b in itertools.pairwise(LADDER))
    assert rung(MAX_DIFFICULTY + 5) == LADDER[-1]
    with pytest.raises(ValueError, match=">= 0"):
        rung(-1)


@pytest.mark.parametrize("span", [0.25, 0.7, 1.0])
def test_sampled_ranges_stay_in_base_and_cover_the_span(span: float) -> None:
    base = {"rows": (256, 8192), "cols": (1, 300)}
    rng = random.Random(0)
    for _ in range(200):
        out = sample_shape_range(base, span, rng)
        for d, (lo, hi) in out.items():
            assert base[d][0] <= lo <= hi <= base[d][1]
            full = math.log2(base[d][1] / base[d][0])
            assert abs(math.log2(hi / lo) - span * full) < 1.0  # rounding to ints costs < 1 octave
    with pytest.raises(ValueError, match="span"):
        sample_shape_range(base, 0.0, rng)


def test_near_duplicates_ignore_bucket_boundaries() -> None:
    a = sig((1024, 4096), (64, 128))
    assert is_near_duplicate(a, sig((1024, 4095), (64, 128)))
    assert is_near_duplicate(a, sig((1100, 4096), (64, 120)))  # within half an octave
    assert not is_near_duplicate(a, sig((1024, 8192), (64, 128)))  # a whole octave wider
    assert not is_near_duplicate(a, sig((1024, 4096), (64, 128), dtype="float32"))
    assert not is_near_duplicate(a, sig((1024, 4096), (64, 128), target=TIGHT))
    assert not is_near_duplicate(a, sig((1024, 4096), (64, 128), op="layernorm"))
    # a fixed grid would split these two: 2^10.5 sits between them
    assert is_near_duplicate(sig((1448, 1448), (8, 8)), sig((1449, 1449), (8, 8)), tolerance=0.01)
    other_dims = ChallengeSignature.of("softmax", "float16", LOOSE, {"M": (1, 2), "N": (1, 2)})
    assert log_distance(a, other_dims) == math.inf


def test_history_evicts_oldest_and_finds_recent_clashes() -> None:
    h = SignatureHistory(capacity=2, tolerance=0.5)
    h.add("c1", sig((1024, 4096), (64, 128)))
    h.add("c2", sig((16, 32), (16, 32)))
    assert h.near_duplicate_of(sig((1024, 4095), (64, 128))) is not None
    h.add("c3", sig((2, 4), (2, 4)))
    assert len(h) == 2 and h.near_duplicate_of(sig((1024, 4095), (64, 128))) is None
    h.add("c3", sig((2, 4), (2, 4)))  # the same challenge seen again is not a second entry
    assert len(h) == 2


def test_summary_compresses_counts_per_op_and_bucket() -> None:
    h = SignatureHistory()
    assert h.summary() == "none yet"
    for i in range(5):
        h.add(f"s{i}", sig((1024, 4096), (64, 129 + i)))
    h.add("l", sig((8, 16), (8, 16), op="layernorm", dtype="float32"))
    text = h.summary()
    assert text.splitlines()[0] == "6 recent challenges:"
    assert "- softmax x5 (float16 x5); busiest shape buckets: rows:10-12|cols:6-8 x5" in text
    assert "- layernorm x1 (float32 x1)" in text
    assert "more ops" in h.summary(max_ops=1)
