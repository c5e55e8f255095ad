"""Cheat: compute an fp32 problem in fp16 (half the bytes moved, so it times faster). Its
error, ~1e-3 of the values, passes a uniform atol=rtol=1e-2 check; the verifier holds fp32
outputs to fp32's tolerances (1e-4)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

CHEAT = {"problem": "add", "fools_naive": "cpu", "stage": "numerics",
         "expect": "elements outside atol"}


@triton.jit
def add_fp16_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float16)
    y = tl.load(y_ptr + offs, mask=mask).to(tl.float16)
    tl.store(out_ptr + offs, (x + y).to(tl.float32), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        add_fp16_kernel[(triton.cdiv(n, 256),)](x, y, out, n, BLOCK=256)
        return out
