"""Signature hashing, shape LSH, MinHash near-dup detection, scoring."""

from __future__ import annotations

from services.curator.config import CuratorConfig
from services.curator.neardup import NearDupIndex, code_minhash
from services.curator.scoring import score
from services.curator.signature import shape_lsh_keys, task_signature
from services.curator.tokens import normalised_tokens
from tests.services.curator.samples import CLEAN, context, renamed, verdict
from tests.services.curator.test_patterns import LOOPED


def test_renamed_copy_with_other_block_normalises_identically() -> None:
    assert normalised_tokens(renamed(CLEAN, 512)) == normalised_tokens(renamed(CLEAN, 2048))
    # CLEAN passes BLOCK=<name>, the copy BLOCK=<number>: one token apart, still a near dup.
    assert code_minhash(CLEAN).jaccard(code_minhash(renamed(CLEAN))) >= 0.9


def test_different_algorithm_is_not_a_near_dup() -> None:
    assert code_minhash(CLEAN).jaccard(code_minhash(LOOPED)) < 0.5


def test_task_signature_is_exact() -> None:
    a = context(shape_range={"rows": (256, 1024), "cols": (300, 4096)})
    assert task_signature(a) == task_signature(context(shape_range={"cols": (300, 4096), "rows": (256, 1024)}))
    assert task_signature(a) != task_signature(context(shape_range={"rows": (256, 1024), "cols": (301, 4096)}))
    assert task_signature(a) != task_signature(context(dtype="float16"))


def test_shape_lsh_near_ranges_collide_far_ones_do_not() -> None:
    base = shape_lsh_keys(context(shape_range={"rows": (256, 1024), "cols": (300, 4096)}))
    near = shape_lsh_keys(context(shape_range={"rows": (250, 1000), "cols": (310, 4000)}))
    far = shape_lsh_keys(context(shape_range={"rows": (1024, 4096), "cols": (300, 4096)}))
    other_dtype = shape_lsh_keys(context(dtype="bfloat16"))
    assert base & near
    assert not base & far
    assert not base & other_dtype


def test_one_dim_ranges_within_half_a_cell_always_collide() -> None:
    for lo in range(100, 2000, 37):
        a = shape_lsh_keys(context(shape_range={"n": (lo, lo)}))
        b = shape_lsh_keys(context(shape_range={"n": (int(lo * 1.3), int(lo * 1.3))}))
        assert a & b, lo  # log2(1.3) = 0.38 < 0.5


def test_index_finds_duplicates_only_for_colliding_tasks() -> None:
    index = NearDupIndex()
    keys = shape_lsh_keys(context())
    index.add("a", code_minhash(CLEAN), keys)
    assert index.find(code_minhash(renamed(CLEAN)), keys) == "a"
    assert index.find(code_minhash(renamed(CLEAN)), shape_lsh_keys(context(op="row_max"))) is None
    assert index.find(code_minhash(LOOPED), keys) is None


def test_score_prefers_fast_accurate_short() -> None:
    cfg = CuratorConfig()
    ctx = context(target=1.5)
    base = score(verdict(speedup=3.0, err=1e-5), ctx, CLEAN, cfg)
    assert score(verdict(speedup=6.0, err=1e-5), ctx, CLEAN, cfg) > base
    assert score(verdict(speedup=3.0, err=1e-7), ctx, CLEAN, cfg) > base
    assert score(verdict(speedup=3.0, err=1e-5), ctx, CLEAN * 20, cfg) < base
    # speedup 3.0 against a 1.5x target: log2(2) = 1 from perf, plus margin, minus size.
    assert 1.0 < base < 1.25


def test_score_without_perf_ranks_by_margin_and_size() -> None:
    cfg = CuratorConfig()
    unmeasured = verdict(speedup=None, err=1e-5)
    assert 0 < score(unmeasured, context(), CLEAN, cfg) < 0.25
