"""Layernorm variants on the GPU: which row kernel reaches >= 85% of the copy peak?

    python benchmarks/layernorm_sweep.py --out DIR

The reference kernel (kz_common/kernels/layernorm.py) reduces the mean, THEN the
variance of the centred row: two dependent reductions. The "shifted" variant takes
both statistics in one pass from data shifted by the row's first element
(var = E[(x-K)^2] - E[x-K]^2, robust while K lies near the mean, which a sample of
the row does), so the two reductions are independent. Each variant runs at several
num_warps on 8192x8192 fp16/bf16 (256 MB moved, > 2x L2); timed by
triton.testing.do_bench (median, L2 flushed); correctness against torch's layernorm.
Writes DIR/layernorm_sweep.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import triton
import triton.language as tl
import triton.testing


@triton.jit
def two_pass(x_ptr, w_ptr, b_ptr, out_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    xc = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * n_cols + cols, (xc * rstd * w + b).to(out_ptr.dtype.element_ty),
             mask=mask)


@triton.jit
def shifted(x_ptr, w_ptr, b_ptr, out_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    k = tl.load(x_ptr + row * n_cols).to(tl.float32)
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    d = tl.where(mask, x - k, 0.0)
    s1 = tl.sum(d, axis=0) / n_cols
    s2 = tl.sum(d * d, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(tl.maximum(s2 - s1 * s1, 0.0) + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * n_cols + cols,
             ((d - s1) * rstd * w + b).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def shifted_evict(x_ptr, w_ptr, b_ptr, out_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    k = tl.load(x_ptr + row * n_cols).to(tl.float32)
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0,
                eviction_policy="evict_first").to(tl.float32)
    d = tl.where(mask, x - k, 0.0)
    s1 = tl.sum(d, axis=0) / n_cols
    s2 = tl.sum(d * d, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(tl.maximum(s2 - s1 * s1, 0.0) + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
    tl.store(out_ptr + row * n_cols + cols,
             ((d - s1) * rstd * w + b).to(out_ptr.dtype.element_ty), mask=mask,
             eviction_policy="evict_first")


VARIANTS = {"two_pass": two_pass, "shifted": shifted, "shifted_evict": shifted_evict}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows_out = []
    peak_ms = None
    for dtype in (torch.float16, torch.bfloat16):
        rows, cols = 8192, 8192
        x = torch.randn(rows, cols, device="cuda", dtype=dtype) * 3 + 1.5  # offset mean
        w = torch.randn(cols, device="cuda", dtype=dtype)
        b = torch.randn(cols, device="cuda", dtype=dtype)
        ref = torch.nn.functional.layer_norm(x.float(), (cols,), w.float(), b.float(), 1e-5)
        moved = 2 * x.numel() * x.element_size()
        if peak_ms is None:
            src = torch.empty(moved // 2, dtype=torch.uint8, device="cuda")
            dst = torch.empty_like(src)
            peak_ms = triton.testing.do_bench(lambda: dst.copy_(src), return_mode="median")
        eager = triton.testing.do_bench(
            lambda: torch.nn.functional.layer_norm(x, (cols,), w, b, 1e-5), return_mode="median")
        for name, kernel in VARIANTS.items():
            for warps in (4, 8, 16, 32):
                out = torch.empty_like(x)
                fn = lambda: kernel[(rows,)](x, w, b, out, cols, 1e-5, BLOCK=8192,  # noqa: E731
                                             num_warps=warps)
                fn()
                err = (out.float() - ref).abs().max().item()
                ms = triton.testing.do_bench(fn, return_mode="median")
                rows_out.append({"dtype": str(dtype).split(".")[-1], "variant": name,
                                 "num_warps": warps, "ms": ms, "max_abs_err": err,
                                 "of_copy_peak": peak_ms / ms, "x_eager": eager / ms,
                                 "GB/s": moved / ms / 1e6})
                r = rows_out[-1]
                print(f"{r['dtype']:9} {name:14} w{warps:<3} {ms * 1e3:8.1f} us "
                      f"{r['GB/s']:7.0f} GB/s {r['of_copy_peak']:6.1%} x{r['x_eager']:.2f} "
                      f"err {err:.3g}", flush=True)
    info = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "triton": triton.__version__, "copy_ms_same_bytes": peak_ms, "rows": rows_out}
    (args.out / "layernorm_sweep.json").write_text(json.dumps(info, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
