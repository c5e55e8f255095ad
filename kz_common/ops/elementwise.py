"""Elementwise ops over a (rows, cols) tensor: add, gelu (tanh approximation), silu.

GELU uses the tanh approximation everywhere in KernelZero: the naive reference
writes the formula out and the baseline calls F.gelu(x, approximate="tanh").
"""

from __future__ import annotations

from kz_common.ops.spec import OpSpec, prod

ROW_DIMS = ("rows", "cols")
ROW_DEFAULT = {"rows": (256, 8192), "cols": (256, 8192)}
ROW_LIMITS = {"rows": (1, 65536), "cols": (1, 65536)}
ROW_CPU = {"rows": (1, 64), "cols": (1, 300)}
ALL_DTYPES = ("float32", "float16", "bfloat16")


def row_elements(s) -> int:  # type: ignore[no-untyped-def]
    """rows * cols: the element count of one (rows, cols) tensor, shared by the row-op cost models."""
    return prod(s, "rows", "cols")


X_INPUT = '''\
def get_inputs():
    x = torch.randn(rows, cols, device=KZ_DEVICE, dtype=KZ_DTYPE)
    return [x]
'''

ADD = OpSpec(
    name="add",
    family="elementwise",
    dims=ROW_DIMS,
    default_range=ROW_DEFAULT,
    limits=ROW_LIMITS,
    cpu_range=ROW_CPU,
    dtypes=ALL_DTYPES,
    description="out = a + b for two (rows, cols) tensors",
    reference_source='''\
class Model(nn.Module):
    """Naive reference: elementwise sum of two tensors."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return a + b
''',
    baseline_source='''\
class ModelOpt(nn.Module):
    """Optimised baseline: torch.add."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.add(a, b)
''',
    inputs_source='''\
def get_inputs():
    a = torch.randn(rows, cols, device=KZ_DEVICE, dtype=KZ_DTYPE)
    b = torch.randn(rows, cols, device=KZ_DEVICE, dtype=KZ_DTYPE)
    return [a, b]
''',
    flops_fn=row_elements,
    elements_fn=lambda s: 3 * row_elements(s),
    largest_tensor_fn=row_elements,
)

GELU = OpSpec(
    name="gelu",
    family="elementwise",
    dims=ROW_DIMS,
    default_range=ROW_DEFAULT,
    limits=ROW_LIMITS,
    cpu_range=ROW_CPU,
    dtypes=ALL_DTYPES,
    description="GELU, tanh approximation: 0.5*x*(1 + tanh(sqrt(2/pi)*(x + 0.044715*x^3)))",
    reference_source='''\
class Model(nn.Module):
    """Naive reference: the tanh-approximated GELU formula, op by op."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)  # sqrt(2/pi) * (...)
        return 0.5 * x * (1.0 + torch.tanh(inner))
''',
    baseline_source='''\
class ModelOpt(nn.Module):
    """Optimised baseline: F.gelu with the tanh approximation."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.gelu(x, approximate="tanh")
''',
    inputs_source=X_INPUT,
    flops_fn=lambda s: 8 * row_elements(s),
    elements_fn=lambda s: 2 * row_elements(s),
    largest_tensor_fn=row_elements,
)

SILU = OpSpec(
    name="silu",
    family="elementwise",
    dims=ROW_DIMS,
    default_range=ROW_DEFAULT,
    limits=ROW_LIMITS,
    cpu_range=ROW_CPU,
    dtypes=ALL_DTYPES,
    description="SiLU (swish): x * sigmoid(x)",
    reference_source='''\
class Model(nn.Module):
    """Naive reference: x * sigmoid(x) with sigmoid written out."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x / (1.0 + torch.exp(-x))
''',
    baseline_source='''\
class ModelOpt(nn.Module):
    """Optimised baseline: F.silu."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.silu(x)
''',
    inputs_source=X_INPUT,
    flops_fn=lambda s: 4 * row_elements(s),
    elements_fn=lambda s: 2 * row_elements(s),
    largest_tensor_fn=row_elements,
)

OPS = (ADD, GELU, SILU)
