"""Output comparison and the trivial-solution gate (torch only: also copied into sandboxes).

Non-finite policy: a candidate NaN/Inf passes only where the reference has the
very same non-finite value at the very same position (NaN<->NaN, +inf<->+inf);
everything finite is compared with allclose(atol, rtol) AND a relative error
norm ||out - ref|| / ||ref|| < rel_norm (||ref|| floored at atol*sqrt(n), so
near-zero outputs are judged on an absolute scale).

Two references: the same-dtype one (Model on the drawn inputs, as the problem
states it) and, where the reference worker could compute it, a high-precision one
(Model in float64, rounded to the output dtype). An output passes if it matches
EITHER, so a kernel more accurate than the same-dtype Model is never rejected
because of the Model's own rounding (e.g. gelu_tanh's 0.5*h*(1+tanh(z)) cancels
for h << 0, an error the floored norm check above magnifies on tiny outputs).
The trivial gate judges against the same-dtype reference only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Tol:
    atol: float
    rtol: float
    rel_norm: float


@dataclass(frozen=True)
class Comparison:
    ok: bool
    max_rel_error: float
    reason: str | None = None


def compare(out: torch.Tensor, ref: torch.Tensor, tol: Tol) -> Comparison:
    """Whether `out` matches `ref` (same shape/dtype assumed checked) within `tol`."""
    if out.shape != ref.shape:
        return Comparison(False, math.inf, f"shape {tuple(out.shape)} != {tuple(ref.shape)}")
    if not (ref.is_floating_point() or ref.is_complex()):
        same = torch.equal(out, ref)
        return Comparison(same, 0.0 if same else math.inf, None if same else "integer mismatch")
    # fp32 arithmetic is ample for <=32-bit outputs (tolerances >= 1e-5) and halves the cost.
    work = torch.float64 if ref.dtype == torch.float64 else torch.float32
    o, r = out.detach().to(work).reshape(-1), ref.detach().to(work).reshape(-1)
    if o.numel() == 0:
        return Comparison(True, 0.0)
    # Every number the verdict needs, read back at once: on a GPU shared by a busy batch
    # each read-back waits for this process's turn on the device.
    finite = torch.isfinite(r).all() & torch.isfinite(o).all()
    all_finite, *stats = _read_back([finite, *_finite_stats(o, r, tol)])
    if all_finite:
        return _judge(r, tol, *stats)
    failed = _non_finite(o, r)  # always a failure when only the output has NaN/Inf
    if failed:
        return failed
    keep = torch.isfinite(r)  # only the finite part of the reference is compared below
    o, r = o[keep], r[keep]
    if o.numel() == 0:
        return Comparison(True, 0.0)
    return _judge(r, tol, *_read_back(_finite_stats(o, r, tol)))


def _read_back(values: list[torch.Tensor]) -> list[float]:
    """0-d tensors as Python floats, in one transfer (one device sync)."""
    return torch.stack([v.to(torch.float64) for v in values]).tolist()


def _non_finite(o: torch.Tensor, r: torch.Tensor) -> Comparison | None:
    """The failure, if any, where `o` or `r` holds NaN/Inf somewhere."""
    o_fin, r_fin = torch.isfinite(o), torch.isfinite(r)
    if not bool(o_fin.any()) and bool(r_fin.any()):
        return Comparison(False, math.inf, "output entirely NaN/Inf: never written "
                          "(uninitialised/stale memory read, nan output)")
    bad_nf = int((~o_fin & r_fin).sum())
    if bad_nf:
        return Comparison(False, math.inf, f"output has NaN/Inf at {bad_nf} positions where the "
                          "reference is finite (nan output)")
    nf = ~r_fin
    same_nan = torch.equal(torch.isnan(o[nf]), torch.isnan(r[nf]))
    inf_pos = nf & ~torch.isnan(r)
    if not same_nan or not torch.equal(o[inf_pos], r[inf_pos]):
        return Comparison(False, math.inf, "non-finite values differ from the reference")
    return None


def _finite_stats(o: torch.Tensor, r: torch.Tensor, tol: Tol) -> list[torch.Tensor]:
    """[elements outside allclose, max relative error, ||r||, ||o - r||, max |o - r|] as
    0-d tensors, nothing read back yet (meaningful where `o` and `r` are all finite).
    In-place ops over three scratch buffers: on the parent's CPU this runs for every call of
    every candidate, on tensors of up to a few hundred MB."""
    diff = torch.sub(o, r).abs_()
    ra = r.abs()
    bound = torch.mul(ra, tol.rtol).add_(tol.atol)
    n_bad = torch.gt(diff, bound).sum()
    max_rel = torch.div(diff, ra.clamp_min_(tol.atol), out=bound).max()
    return [n_bad, max_rel, torch.linalg.vector_norm(r), torch.linalg.vector_norm(diff),
            diff.max()]


def _judge(r: torch.Tensor, tol: Tol, n_bad: float, max_rel: float, norm_r: float,
           norm_diff: float, max_abs: float) -> Comparison:
    """allclose and the relative error norm, from `_finite_stats`' numbers."""
    rel_norm = norm_diff / max(norm_r, tol.atol * math.sqrt(r.numel()))
    if n_bad:
        return Comparison(False, max_rel, f"{int(n_bad)}/{r.numel()} elements outside "
                          f"atol={tol.atol} rtol={tol.rtol} (max abs err {max_abs:.3g})")
    if rel_norm >= tol.rel_norm:
        return Comparison(False, max_rel, f"relative error norm {rel_norm:.3g} >= {tol.rel_norm}")
    return Comparison(True, max_rel)


def compare_refs(out: torch.Tensor, ref: torch.Tensor, hi: torch.Tensor | None,
                 tol: Tol) -> Comparison:
    """`compare` against the same-dtype reference, else against the high-precision one;
    a failure reports the same-dtype comparison (the reference the problem states)."""
    first = compare(out, ref, tol)
    if first.ok or hi is None:
        return first
    second = compare(out, hi, tol)
    return second if second.ok else first


def accurate_reference(ref: torch.Tensor, hi: object, tol: Tol) -> torch.Tensor | None:
    """`hi` (Model's float64 output) rounded to `ref`'s dtype, if worth keeping as a second
    reference, else None.

    Not kept when it adds little: `ref` already matches it within a tenth of `tol` (the
    usual case for large outputs), so judging against `ref` alone moves no verdict by
    more than a tenth of the tolerance; storing it would double the bundle for nothing.
    Not kept when it is no refinement of `ref`: its elements must lie within
    allclose(atol, rtol) of `ref` with the very same non-finite values, so accepting
    outputs that match it widens acceptance by at most one tolerance band around the
    stated reference; a bigger disagreement means the float64 run is not the same
    computation (dtype-dependent Model code).
    """
    if (not isinstance(hi, torch.Tensor) or not ref.is_floating_point()
            or ref.dtype == torch.float64 or not hi.is_floating_point()
            or hi.shape != ref.shape):
        return None
    rounded = hi.detach().to(device=ref.device, dtype=ref.dtype)
    if _same_bits(rounded, ref) or compare(ref, rounded, Tol(tol.atol / 10, tol.rtol / 10,
                                                              tol.rel_norm / 10)).ok:
        return None
    band = Tol(tol.atol, tol.rtol, math.inf)  # elementwise only: rel_norm is not the point
    return rounded.contiguous() if compare(rounded, ref, band).ok else None


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    if not b.numel():
        return True
    return torch.equal(a.reshape(-1).contiguous().view(torch.uint8),
                       b.reshape(-1).contiguous().view(torch.uint8))


def trivial_matches(ref: torch.Tensor, inputs: list[object], tol: Tol) -> list[str]:
    """Which trivial outputs (zeros, constant, identity) would pass for this reference."""
    hits = []
    if compare(torch.zeros_like(ref), ref, tol).ok:
        hits.append("zeros")
    # A single element is always "constant"; that is no evidence of a predictable output.
    if ref.is_floating_point() and ref.numel() > 1:
        # the mean of the finite elements (0 if none), left on the device: no read-back
        fin = torch.isfinite(ref)
        mean = torch.where(fin, ref.double(), 0.0).sum() / fin.sum().clamp_min(1)
        if compare(torch.zeros_like(ref).add_(mean.to(ref.dtype)), ref, tol).ok:
            hits.append("constant")
    for i, x in enumerate(inputs):
        if (isinstance(x, torch.Tensor) and x.shape == ref.shape and x.dtype == ref.dtype
                and compare(x, ref, tol).ok):
            hits.append(f"identity(input {i})")
    return hits


def is_contiguous_or_same(out: torch.Tensor, ref: torch.Tensor) -> bool:
    return out.is_contiguous() or tuple(out.stride()) == tuple(ref.stride())


def warm_kernels(device: str) -> None:
    """Each kernel a reference trial launches whatever the problem, once, on a few elements:
    drawing inputs (randn, rand, randint; scaled, cloned, checked finite), the trivial gate
    and the float64 reference's rounding and comparison. CUDA loads a kernel at its first
    launch (lazy module loading): a reference worker's first trial paid those loads under
    the shared GPU lock, which every timed phase on the host waits for (H100 batch: a
    bundle's longest shared step 0.77 s median, its draw 0.39 s and gate 0.31 s, against
    ~0.03 s for a later trial). Called in the worker's start-up, before it has a job."""
    tol = Tol(1e-3, 1e-3, 1e-3)
    for dt in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        x = torch.randn(256, device=device, dtype=dt)
        torch.rand(256, device=device, dtype=dt)
        x = torch.cat([x, x.clone()]) * 2.0  # a draw's copies and its power-of-two scaling
        bool(torch.isfinite(x).all())
        trivial_matches(x, [x], tol)
        accurate_reference(x, x.to(torch.float64) * 1.0001, tol)
        x.cpu()
    for dt in (torch.int32, torch.int64):
        i = torch.randint(0, 7, (256,), device=device, dtype=dt)
        trivial_matches(i, [i], tol)
    if device == "cuda":
        torch.cuda.synchronize()
