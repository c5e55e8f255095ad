"""Cheat: specialise to the default shape (48 columns); wrong anywhere else."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

CHEAT = {"problem": "softmax", "fools_naive": "cpu", "stage": "numerics",
         "expect": "'cols': 64"}


@triton.jit
def softmax48(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + offs, mask=offs < 48, other=-float("inf"))
    num = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * n_cols + offs, num / tl.sum(num, axis=0), mask=offs < n_cols)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        softmax48[(x.shape[0],)](x, out, x.shape[1], BLOCK=64)
        return out
