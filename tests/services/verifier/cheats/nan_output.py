"""Cheat: NaN in some outputs. `(|out-ref| > tol).sum() == 0` checks pass NaN (NaN > tol is
False); the verifier requires finite outputs wherever the reference is finite."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

CHEAT = {"problem": "softmax", "fools_naive": "cpu", "naive_variant": "exceed_count",
         "stage": "numerics", "expect": "nan output"}


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=-float("inf"))
    num = tl.exp(x - tl.max(x, axis=0))
    y = num / tl.sum(num, axis=0)
    y = tl.where(offs % 7 == 0, float("nan"), y)
    tl.store(out_ptr + row * n_cols + offs, y, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        softmax_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return out
