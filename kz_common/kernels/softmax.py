"""Reference solution: softmax over the last dim.

One program per row. A row that fits in one block (up to MAX_FUSED_COLS) is
loaded once into registers: max, exp, sum and normalise happen on-chip, so x is
read once and out written once. Wider rows use the online softmax: one pass keeps
a running max and a running sum of exp (rescaled whenever the max grows), a second
pass writes exp(x - max) / sum. Everything is accumulated in fp32.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

MAX_FUSED_COLS = 8192  # widest row handled in a single block
ONLINE_BLOCK = 4096  # chunk width of the looped kernel


@triton.jit
def softmax_row_kernel(x_ptr, out_ptr, n_cols, stride_x_row, stride_out_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x_row + cols, mask=mask, other=-float("inf")).to(tl.float32)
    x_max = tl.max(x, axis=0)
    num = tl.exp(x - x_max)  # masked lanes: exp(-inf) = 0
    den = tl.sum(num, axis=0)
    y = num / den
    tl.store(out_ptr + row * stride_out_row + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def softmax_online_kernel(x_ptr, out_ptr, n_cols, stride_x_row, stride_out_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row * stride_x_row
    out_row = out_ptr + row * stride_out_row

    # Pass 1: per-lane running max m and running sum s of exp(x - m).
    # m starts at a finite sentinel so that lanes that have only seen masked
    # (-inf) values give exp(0) * 0 rather than exp(-inf - -inf) = NaN.
    m = tl.full([BLOCK], -3.0e38, tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        s = s * tl.exp(m - m_new) + tl.exp(x - m_new)
        m = m_new
    # Combine the lanes.
    row_max = tl.max(m, axis=0)
    inv_sum = 1.0 / tl.sum(s * tl.exp(m - row_max), axis=0)

    # Pass 2: normalise and write.
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=-float("inf")).to(tl.float32)
        y = tl.exp(x - row_max) * inv_sum
        tl.store(out_row + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def _num_warps(block):
    """More warps for wider blocks, so each thread holds at most ~16 fp32 values."""
    if block >= 4096:
        return 16
    if block >= 2048:
        return 8
    return 4


def _config(n_cols, max_fused_cols):
    """(use the single-block kernel?, BLOCK, num_warps) for rows of n_cols."""
    if n_cols <= max_fused_cols:
        block = max(16, triton.next_power_of_2(n_cols))
        return True, block, _num_warps(block)
    return False, ONLINE_BLOCK, 8


class ModelNew(nn.Module):
    max_fused_cols = MAX_FUSED_COLS  # tests lower this to exercise the online kernel

    def __init__(self):
        super().__init__()

    def forward(self, x):
        n_cols = x.shape[-1]
        x2 = x.reshape(-1, n_cols).contiguous()
        out = torch.empty_like(x2)
        n_rows = x2.shape[0]
        fused, block, num_warps = _config(n_cols, self.max_fused_cols)
        kernel = softmax_row_kernel if fused else softmax_online_kernel
        kernel[(n_rows,)](
            x2, out, n_cols, x2.stride(0), out.stride(0), BLOCK=block, num_warps=num_warps
        )
        return out.view(x.shape)
