"""Comparison rules: tolerances, relative error norm, non-finite policy, trivial gate."""

from __future__ import annotations

import torch

from services.verifier.numerics import Tol, compare, is_contiguous_or_same, trivial_matches

TOL = Tol(atol=1e-4, rtol=1e-4, rel_norm=1e-5)


def test_exact_and_close_pass_far_fails() -> None:
    ref = torch.randn(64, 32)
    assert compare(ref.clone(), ref, TOL).ok
    assert compare(ref + 1e-7, ref, TOL).ok
    bad = compare(ref + 1e-2, ref, TOL)
    assert not bad.ok and "outside atol" in bad.reason


def test_rel_norm_catches_small_systematic_error_that_allclose_allows() -> None:
    ref = torch.randn(4096) * 100
    out = ref * (1 + 5e-5)  # inside rtol=1e-4 everywhere, but a 5e-5 relative norm error
    r = compare(out, ref, TOL)
    assert not r.ok and "relative error norm" in r.reason


def test_nan_policy() -> None:
    ref = torch.randn(10)
    out = ref.clone()
    out[3] = float("nan")
    r = compare(out, ref, TOL)
    assert not r.ok and "nan output" in r.reason
    assert "never written" in compare(torch.full_like(ref, float("nan")), ref, TOL).reason
    ref_nan = ref.clone()
    ref_nan[2], ref_nan[5] = float("nan"), float("inf")
    same = ref_nan.clone()
    assert compare(same, ref_nan, TOL).ok  # identical non-finite positions and values
    moved = same.clone()
    moved[5] = -float("inf")
    assert not compare(moved, ref_nan, TOL).ok


def test_integer_outputs_are_exact() -> None:
    ref = torch.arange(10)
    assert compare(ref.clone(), ref, TOL).ok
    assert not compare(ref + 1, ref, TOL).ok


def test_trivial_gate() -> None:
    x = torch.randn(256)
    assert trivial_matches(torch.zeros(256), [x], TOL) == ["zeros", "constant"]
    # Tiny outputs: allclose alone would accept zeros, the floored norm check does not.
    assert trivial_matches(x * 1e-6, [x], TOL) == []
    assert "identity(input 0)" in trivial_matches(x.clone(), [x], TOL)
    assert "constant" in trivial_matches(torch.full((64,), 3.0), [x], TOL)
    assert trivial_matches(torch.softmax(x, 0), [x], TOL) == []
    assert trivial_matches(torch.tensor([0.7]), [], TOL) == []  # one element is no evidence


def test_strides_rule() -> None:
    ref = torch.empty(4, 6)
    assert is_contiguous_or_same(torch.empty(4, 6), ref)
    assert not is_contiguous_or_same(torch.empty(6, 4).t(), ref)
    assert is_contiguous_or_same(torch.empty(6, 4).t(), torch.empty(6, 4).t())
