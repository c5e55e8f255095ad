"""Reference solution: gelu, tanh approximation.

gelu(x) = 0.5 * x * (1 + tanh(z)), z = sqrt(2/pi) * (x + 0.044715 * x^3).
Since 0.5 * (1 + tanh(z)) == sigmoid(2z), we compute x / (1 + exp(-2z)): one exp,
no cancellation for large negative x, and exp overflow gives the correct limit 0.
The tensor is flattened; each program handles BLOCK contiguous elements.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def gelu_tanh_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    z = 0.7978845608028654 * (x + 0.044715 * x * x * x)  # sqrt(2/pi) * (x + 0.044715 x^3)
    y = x / (1.0 + tl.exp(-2.0 * z))
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n_elements = x.numel()
        grid = (triton.cdiv(n_elements, BLOCK),)
        gelu_tanh_kernel[grid](x, out, n_elements, BLOCK=BLOCK, num_warps=4)
        return out
