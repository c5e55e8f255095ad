"""Cheat: memoise the output by input shape; later calls return the first result instantly."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

# Rejected twice over: later calls launch no kernel, and their output repeats call 0's.
CHEAT = {"problem": "softmax", "fools_naive": "cpu", "stage": "runtime",
         "expect": "cached/memoised output"}


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=-float("inf"))
    num = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * n_cols + offs, num / tl.sum(num, axis=0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.memo = {}

    def forward(self, x):
        key = (tuple(x.shape), x.dtype)
        if key in self.memo:
            return self.memo[key]
        out = torch.empty_like(x)
        softmax_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        self.memo[key] = out
        return out
