"""Fused bias + activation: out = gelu_tanh(x + bias), bias broadcast over rows."""

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

BIAS_GELU = OpSpec(
    name="bias_gelu",
    family="fused_activation",
    dims=ROW_DIMS,
    default_range=ROW_DEFAULT,
    limits=ROW_LIMITS,
    cpu_range=ROW_CPU,
    dtypes=ALL_DTYPES,
    description="out = gelu_tanh(x + bias) for x (rows, cols) and bias (cols,)",
    reference_source='''\
class Model(nn.Module):
    """Naive reference: bias add, then the tanh-approximated GELU formula, op by op."""

    def __init__(self):
        super().__init__()

    def forward(self, x, bias):
        h = x + bias
        inner = 0.7978845608028654 * (h + 0.044715 * h * h * h)  # sqrt(2/pi) * (...)
        return 0.5 * h * (1.0 + torch.tanh(inner))
''',
    baseline_source='''\
class ModelOpt(nn.Module):
    """Optimised baseline: native add and F.gelu with the tanh approximation."""

    def __init__(self):
        super().__init__()

    def forward(self, x, bias):
        return F.gelu(torch.add(x, bias), approximate="tanh")
''',
    inputs_source='''\
def get_inputs():
    x = torch.randn(rows, cols, device=KZ_DEVICE, dtype=KZ_DTYPE)
    bias = torch.randn(cols, device=KZ_DEVICE, dtype=KZ_DTYPE)
    return [x, bias]
''',
    flops_fn=lambda s: 9 * row_elements(s),
    elements_fn=lambda s: 2 * row_elements(s) + s["cols"],
    largest_tensor_fn=row_elements,
)

OPS = (BIAS_GELU,)
