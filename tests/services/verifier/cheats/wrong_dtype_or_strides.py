"""Cheat: return a transposed-layout view (right values, wrong strides) that allclose accepts."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

CHEAT = {"problem": "softmax", "fools_naive": "cpu", "stage": "output",
         "expect": "wrong strides"}


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, so_row, so_col, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=-float("inf"))
    num = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * so_row + offs * so_col, num / tl.sum(num, axis=0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        rows, cols = x.shape
        out = torch.empty((cols, rows), device=x.device, dtype=x.dtype).t()
        softmax_kernel[(rows,)](x, out, cols, out.stride(0), out.stride(1),
                                BLOCK=triton.next_power_of_2(cols))
        return out
