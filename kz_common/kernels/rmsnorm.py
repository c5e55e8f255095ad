"""Reference solution: rmsnorm over the last dim, with a weight input.

out = x * rsqrt(mean(x^2) + eps) * weight. One program per row. A row that fits
in one block (up to MAX_FUSED_COLS) is read once into registers; wider rows take
one looped pass for the sum of squares and one to write. Accumulation in fp32.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

MAX_FUSED_COLS = 8192
LOOP_BLOCK = 2048


@triton.jit
def rmsnorm_row_kernel(
    x_ptr, w_ptr, out_ptr, n_cols, stride_x_row, stride_out_row, eps, BLOCK: tl.constexpr
):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x_row + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = x * rstd * w
    tl.store(out_ptr + row * stride_out_row + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def rmsnorm_looped_kernel(
    x_ptr, w_ptr, out_ptr, n_cols, stride_x_row, stride_out_row, eps, BLOCK: tl.constexpr
):
    row = tl.program_id(0)
    x_row = x_ptr + row * stride_x_row
    out_row = out_ptr + row * stride_out_row

    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        acc += x * x
    rstd = tl.rsqrt(tl.sum(acc, axis=0) / n_cols + eps)

    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_row + cols, (x * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)


def _num_warps(block):
    # H200 sweep (benchmarks/layernorm_sweep.py): 8192-wide rows reach 95% of the copy
    # rate at 8 warps but 90% at 16 (more warps: a longer cross-warp reduction tail).
    if block >= 16384:
        return 16
    if block >= 2048:
        return 8
    return 4


def _config(n_cols, max_fused_cols):
    """(use the single-block kernel?, BLOCK, num_warps) for rows of n_cols."""
    if n_cols <= max_fused_cols:
        block = max(16, triton.next_power_of_2(n_cols))
        return True, block, _num_warps(block)
    return False, LOOP_BLOCK, 8


class ModelNew(nn.Module):
    max_fused_cols = MAX_FUSED_COLS  # tests lower this to exercise the looped kernel

    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        n_cols = x.shape[-1]
        x2 = x.reshape(-1, n_cols).contiguous()
        weight = weight.contiguous()
        out = torch.empty_like(x2)
        n_rows = x2.shape[0]
        fused, block, num_warps = _config(n_cols, self.max_fused_cols)
        kernel = rmsnorm_row_kernel if fused else rmsnorm_looped_kernel
        kernel[(n_rows,)](
            x2, weight, out, n_cols, x2.stride(0), out.stride(0), self.eps,
            BLOCK=block, num_warps=num_warps,
        )
        return out.view(x.shape)
