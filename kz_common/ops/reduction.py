"""Row reductions over the last dim of a (rows, cols) tensor: row_sum and row_max.

The output has shape (rows,) and the input dtype. For these ops the plain torch
formulation is already what a naive user writes, so reference and baseline differ
only in spelling (row_max's naive form also computes the argmax it throws away).
"""

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

ROW_SUM = OpSpec(
    name="row_sum",
    family="reduction",
    dims=ROW_DIMS,
    default_range=ROW_DEFAULT,
    limits=ROW_LIMITS,
    cpu_range=ROW_CPU,
    dtypes=ALL_DTYPES,
    description="sum over the last dim: (rows, cols) -> (rows,)",
    reference_source='''\
class Model(nn.Module):
    """Naive reference: tensor .sum over the last dim."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.sum(dim=-1)
''',
    baseline_source='''\
class ModelOpt(nn.Module):
    """Optimised baseline: torch.sum."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.sum(x, dim=-1)
''',
    inputs_source=X_INPUT,
    flops_fn=row_elements,
    elements_fn=lambda s: row_elements(s) + s["rows"],
    largest_tensor_fn=row_elements,
)

ROW_MAX = OpSpec(
    name="row_max",
    family="reduction",
    dims=ROW_DIMS,
    default_range=ROW_DEFAULT,
    limits=ROW_LIMITS,
    cpu_range=ROW_CPU,
    dtypes=ALL_DTYPES,
    description="max over the last dim: (rows, cols) -> (rows,)",
    reference_source='''\
class Model(nn.Module):
    """Naive reference: torch.max (which also computes the unused argmax)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.max(x, dim=-1).values
''',
    baseline_source='''\
class ModelOpt(nn.Module):
    """Optimised baseline: torch.amax (values only)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.amax(x, dim=-1)
''',
    inputs_source=X_INPUT,
    flops_fn=row_elements,
    elements_fn=lambda s: row_elements(s) + s["rows"],
    largest_tensor_fn=row_elements,
)

OPS = (ROW_SUM, ROW_MAX)
