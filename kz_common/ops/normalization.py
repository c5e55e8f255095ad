"""Row normalisations over the last dim: layernorm (weight + bias) and rmsnorm (weight).

Weights are forward inputs, not nn.Parameters, so no state hides in the module.
"""

from __future__ import annotations

from kz_common.ops.elementwise import (
    ALL_DTYPES,
    ROW_CPU,
    ROW_DEFAULT,
    ROW_DIMS,
    ROW_LIMITS,
    row_elements,
)
from kz_common.ops.spec import OpSpec

LAYERNORM = OpSpec(
    name="layernorm",
    family="normalization",
    dims=ROW_DIMS,
    default_range=ROW_DEFAULT,
    limits=ROW_LIMITS,
    cpu_range=ROW_CPU,
    dtypes=ALL_DTYPES,
    description="layer norm over the last dim with weight and bias inputs, eps=1e-5, biased variance",
    reference_source='''\
class Model(nn.Module):
    """Naive reference: mean and (biased) variance as explicit ops, in at least fp32 (a
    bf16 mean/variance is off the exact result by more than the bf16 tolerance)."""

    def __init__(self, eps: float = 1e-5):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight, bias):
        acc = torch.promote_types(x.dtype, torch.float32)  # float64 stays float64
        xf = x.to(acc)
        mean = torch.mean(xf, dim=-1, keepdim=True)
        centered = xf - mean
        var = torch.mean(centered * centered, dim=-1, keepdim=True)
        out = centered / torch.sqrt(var + self.eps) * weight.to(acc) + bias.to(acc)
        return out.to(x.dtype)
''',
    baseline_source='''\
class ModelOpt(nn.Module):
    """Optimised baseline: F.layer_norm."""

    def __init__(self, eps: float = 1e-5):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight, bias):
        return F.layer_norm(x, (x.shape[-1],), weight, bias, self.eps)
''',
    inputs_source='''\
def get_inputs():
    x = torch.randn(rows, cols, device=KZ_DEVICE, dtype=KZ_DTYPE)
    weight = torch.randn(cols, device=KZ_DEVICE, dtype=KZ_DTYPE)
    bias = torch.randn(cols, device=KZ_DEVICE, dtype=KZ_DTYPE)
    return [x, weight, bias]
''',
    # mean, subtract, square, sum, normalise, scale, shift (+ a per-row rsqrt)
    flops_fn=lambda s: 8 * row_elements(s),
    elements_fn=lambda s: 2 * row_elements(s) + 2 * s["cols"],
    largest_tensor_fn=row_elements,
)

RMSNORM = OpSpec(
    name="rmsnorm",
    family="normalization",
    dims=ROW_DIMS,
    default_range=ROW_DEFAULT,
    limits=ROW_LIMITS,
    cpu_range=ROW_CPU,
    dtypes=ALL_DTYPES,
    description="RMS norm over the last dim with a weight input: x * rsqrt(mean(x^2) + eps) * w, eps=1e-6",
    reference_source='''\
class Model(nn.Module):
    """Naive reference: mean of squares and rsqrt as explicit ops, in at least fp32."""

    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        acc = torch.promote_types(x.dtype, torch.float32)  # float64 stays float64
        xf = x.to(acc)
        mean_sq = torch.mean(xf * xf, dim=-1, keepdim=True)
        return (xf * torch.rsqrt(mean_sq + self.eps) * weight.to(acc)).to(x.dtype)
''',
    baseline_source='''\
class ModelOpt(nn.Module):
    """Optimised baseline: F.rms_norm where torch has it, else an fp32-accumulating formulation."""

    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        if hasattr(F, "rms_norm"):
            return F.rms_norm(x, (x.shape[-1],), weight, self.eps)
        xf = x.float()
        inv = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (xf * inv).to(x.dtype) * weight
''',
    inputs_source='''\
def get_inputs():
    x = torch.randn(rows, cols, device=KZ_DEVICE, dtype=KZ_DTYPE)
    weight = torch.randn(cols, device=KZ_DEVICE, dtype=KZ_DTYPE)
    return [x, weight]
''',
    # square, sum, scale, weight (+ a per-row rsqrt)
    flops_fn=lambda s: 4 * row_elements(s),
    elements_fn=lambda s: 2 * row_elements(s) + s["cols"],
    largest_tensor_fn=row_elements,
)

OPS = (LAYERNORM, RMSNORM)
