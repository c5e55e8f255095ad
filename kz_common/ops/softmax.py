"""Row softmax over the last dim of a (rows, cols) tensor."""

from __future__ import annotations

from kz_common.ops.elementwise import (
    ALL_DTYPES,
    ROW_CPU,
    ROW_DEFAULT,
    ROW_DIMS,
    ROW_LIMITS,
    X_INPUT,
    row_elements,
)
from kz_common.ops.spec import OpSpec

SOFTMAX = OpSpec(
    name="softmax",
    family="softmax",
    dims=ROW_DIMS,
    default_range=ROW_DEFAULT,
    limits=ROW_LIMITS,
    cpu_range=ROW_CPU,
    dtypes=ALL_DTYPES,
    description="softmax over the last dim: exp(x - max) / sum(exp(x - max))",
    reference_source='''\
class Model(nn.Module):
    """Naive reference: numerically safe softmax written as explicit ops."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        x_max = torch.max(x, dim=-1, keepdim=True).values
        e = torch.exp(x - x_max)
        return e / torch.sum(e, dim=-1, keepdim=True)
''',
    baseline_source='''\
class ModelOpt(nn.Module):
    """Optimised baseline: torch.softmax."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=-1)
''',
    inputs_source=X_INPUT,
    # max, subtract, exp, sum, divide per element
    flops_fn=lambda s: 5 * row_elements(s),
    elements_fn=lambda s: 2 * row_elements(s),
    largest_tensor_fn=row_elements,
)

OPS = (SOFTMAX,)
