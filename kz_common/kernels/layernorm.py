"""Reference solution: layernorm over the last dim, with weight and bias inputs.

One program per row. A row that fits in one block (up to MAX_FUSED_COLS) is
loaded once: mean, biased variance of the centred values, normalise, scale and
shift all happen in registers. Wider rows loop over BLOCK-wide chunks: one pass
for the mean, one for the variance (of x - mean, which is numerically safer than
E[x^2] - mean^2), one to write. Statistics are accumulated in fp32.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

MAX_FUSED_COLS = 8192
LOOP_BLOCK = 2048


@triton.jit
def layernorm_row_kernel(
    x_ptr, w_ptr, b_ptr, out_ptr, n_cols, stride_x_row, stride_out_row, eps,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x_row + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    xc = tl.where(mask, x - mean, 0.0)
    var = tl.sum(xc * xc, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = xc * rstd * w + b
    tl.store(out_ptr + row * stride_out_row + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def layernorm_looped_kernel(
    x_ptr, w_ptr, b_ptr, out_ptr, n_cols, stride_x_row, stride_out_row, eps,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    x_row = x_ptr + row * stride_x_row
    out_row = out_ptr + row * stride_out_row

    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / n_cols

    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        xc = tl.where(mask, x - mean, 0.0)
        acc += xc * xc
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)

    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        y = (x - mean) * rstd * w + b
        tl.store(out_row + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


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

    def __init__(self, eps: float = 1e-5):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight, bias):
        n_cols = x.shape[-1]
        x2 = x.reshape(-1, n_cols).contiguous()
        weight = weight.contiguous()
        bias = bias.contiguous()
        out = torch.empty_like(x2)
        n_rows = x2.shape[0]
        fused, block, num_warps = _config(n_cols, self.max_fused_cols)
        kernel = layernorm_row_kernel if fused else layernorm_looped_kernel
        kernel[(n_rows,)](
            x2, weight, bias, out, n_cols, x2.stride(0), out.stride(0), self.eps,
            BLOCK=block, num_warps=num_warps,
        )
        return out.view(x.shape)
