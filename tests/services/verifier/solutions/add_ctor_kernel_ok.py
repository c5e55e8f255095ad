"""Vector add whose constructor launches a Triton kernel (it fills the factor its forward
scales `y` by, 1.0): the harness builds such a model again once it holds the GPU lock.
The factor lives on the CPU, so this one runs under the CPU interpreter only."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def fill_kernel(out_ptr, value):
    tl.store(out_ptr, value)


@triton.jit
def scaled_add_kernel(x_ptr, y_ptr, scale_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    s = tl.load(scale_ptr)
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y * s, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.empty(1))
        fill_kernel[(1,)](self.scale, 1.0)

    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)
        scaled_add_kernel[grid](x, y, self.scale, out, n, BLOCK=256)
        return out
