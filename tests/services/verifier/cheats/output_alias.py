"""Cheat: softmax in place and return the input tensor itself (aliases the input)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

CHEAT = {"problem": "softmax", "fools_naive": "cpu", "stage": "runtime",
         "expect": "output alias"}


@triton.jit
def softmax_inplace(x_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=-float("inf"))
    num = tl.exp(x - tl.max(x, axis=0))
    tl.store(x_ptr + row * n_cols + offs, num / tl.sum(num, axis=0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        softmax_inplace[(x.shape[0],)](x, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return x
