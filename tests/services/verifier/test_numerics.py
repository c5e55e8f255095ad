"""Comparison rules: tolerances, relative error norm, non-finite policy, trivial gate."""

from __future__ import annotations

import math

import torch

from services.verifier.numerics import (
    Tol,
    accurate_reference,
    compare,
    compare_refs,
    is_contiguous_or_same,
    trivial_matches,
)

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


def _gelu_model(h: torch.Tensor) -> torch.Tensor:
    """bias_gelu's naive Model formula: 0.5*h*(1+tanh(z)) cancels for h << 0."""
    inner = 0.7978845608028654 * (h + 0.044715 * h * h * h)
    return 0.5 * h * (1.0 + torch.tanh(inner))


def _gelu_kernel(h: torch.Tensor) -> torch.Tensor:
    """The catalogue kernel's fp32 formula h/(1+exp(-2z)): no cancellation."""
    z = 0.7978845608028654 * (h + 0.044715 * h * h * h)
    return h / (1.0 + torch.exp(-2.0 * z))


def test_more_accurate_kernel_passes_against_the_float64_reference() -> None:
    # 1-element outputs (shape 1x1): ||ref|| is floored at atol, so the norm check asks
    # for |err| < atol*rel_norm = 1e-9, below the fp32 Model's own error in this range.
    h = torch.linspace(-12.0, 3.0, 6001)
    ref, out = _gelu_model(h), _gelu_kernel(h)
    exact = _gelu_model(h.double())
    stated = [compare(out[i:i + 1], ref[i:i + 1], TOL).ok for i in range(h.numel())]
    assert not all(stated)  # the false rejection: the same-dtype reference alone fails it
    failing = h[[not ok for ok in stated]]
    assert float(failing.min()) < -4.5 and float(failing.max()) > -4.0
    for i in range(h.numel()):
        r, x = ref[i:i + 1], exact[i:i + 1]
        hi = accurate_reference(r, x, TOL)
        assert compare_refs(out[i:i + 1], r, hi, TOL).ok, float(h[i])
    # Whole-tensor outputs over the bad range pass too, and the norm floor still bites.
    bad = torch.linspace(-5.4, -3.6, 301)
    hi = accurate_reference(_gelu_model(bad), _gelu_model(bad.double()), TOL)
    assert hi is not None and compare_refs(_gelu_kernel(bad), _gelu_model(bad), hi, TOL).ok
    assert not compare_refs(torch.zeros(301), _gelu_model(bad), hi, TOL).ok


def test_float64_reference_never_widens_acceptance_beyond_one_band() -> None:
    ref = torch.randn(256)
    assert accurate_reference(ref, ref.double(), TOL) is None  # nothing to add: not stored
    assert accurate_reference(ref, (ref + 1e-2).double(), TOL) is None  # not a refinement
    assert accurate_reference(ref, ref.double()[:128], TOL) is None  # wrong shape
    assert accurate_reference(torch.arange(4), torch.arange(4.0).double(), TOL) is None
    nan = ref.clone()
    nan[3] = math.nan
    assert accurate_reference(ref, nan.double(), TOL) is None  # non-finite must agree
    # Within a tenth of the tolerance already: judging against `ref` alone is as good.
    assert accurate_reference(ref, ref.double() * (1 + 1e-7), TOL) is None
    near = accurate_reference(ref, ref.double() + 5e-5, TOL)  # off by half the band
    assert near is not None and near.dtype == ref.dtype
    # A wrong output is wrong against both; the failure names the stated reference.
    far = compare_refs(ref + 1e-2, ref, near, TOL)
    assert not far.ok and far.reason == compare(ref + 1e-2, ref, TOL).reason
    # The trivial gate is judged on the same-dtype reference only (unchanged).
    assert trivial_matches(ref * 1e-6, [ref], TOL) == []


def test_float64_reference_for_half_outputs() -> None:
    h = torch.linspace(-6.0, 3.0, 2001).half()
    tol = Tol(atol=1e-2, rtol=1e-2, rel_norm=2e-3)
    ref = _gelu_model(h)  # op by op in fp16
    hi = accurate_reference(ref, _gelu_model(h.double()), tol)
    out = _gelu_kernel(h.float()).half()  # fp32 math, one rounding
    assert compare_refs(out, ref, hi, tol).ok
    for i in range(0, h.numel(), 7):
        r = ref[i:i + 1]
        assert compare_refs(out[i:i + 1], r, accurate_reference(r, _gelu_model(
            h[i:i + 1].double()), tol), tol).ok, float(h[i])


def test_the_reference_workers_warm_up_runs_every_trial_kernel_for_every_dtype() -> None:
    """warm_kernels draws, gates and rounds a float64 reference once per dtype (on the GPU:
    in the worker's start-up, so that the first trial under the shared lock loads no
    kernel). Here on the CPU: every op is valid for every dtype; it raises otherwise."""
    from services.verifier.numerics import warm_kernels

    warm_kernels("cpu")
