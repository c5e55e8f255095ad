"""Op catalogue: op families, references, baselines, input generators, cost models, tolerances.

Public API:
    get_op(name) -> OpSpec, all_ops(family=None) -> list[OpSpec], op_names()
    render_problem(op, dtype, shape_range, shapes=None, device="cpu") -> str
    shape_bucket(shape_range, op=None) -> str, shape_signature(shape, op=None) -> str
    cpu_test_range(op) -> dict[str, tuple[int, int]]
    tolerance_for(dtype, family) (from kz_common.ops.tolerances)
"""

from kz_common.ops.exceptions import (
    CatalogueError,
    DimMismatchError,
    ShapeRangeError,
    UnknownOpError,
    UnsupportedDtypeError,
)
from kz_common.ops.registry import all_ops, cpu_test_range, get_op, op_names
from kz_common.ops.render import render_problem
from kz_common.ops.shapes import choose_shapes, shape_bucket, shape_signature
from kz_common.ops.spec import DTYPES, FAMILIES, OpSpec, dtype_name, torch_dtype
from kz_common.ops.tolerances import Tolerance, tolerance_for

__all__ = [
    "DTYPES",
    "FAMILIES",
    "CatalogueError",
    "DimMismatchError",
    "OpSpec",
    "ShapeRangeError",
    "Tolerance",
    "UnknownOpError",
    "UnsupportedDtypeError",
    "all_ops",
    "choose_shapes",
    "cpu_test_range",
    "dtype_name",
    "get_op",
    "op_names",
    "render_problem",
    "shape_bucket",
    "shape_signature",
    "tolerance_for",
    "torch_dtype",
]
