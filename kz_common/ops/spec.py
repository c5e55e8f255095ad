"""`OpSpec`: everything the catalogue knows about one op.

An op has ordered named dims (e.g. rows, cols), a default shape range per dim
(what a challenge draws from by default), hard limits per dim (what the renderer
accepts at all), the dtypes it supports, the code text of its naive reference
(`class Model`), optimised baseline (`class ModelOpt`) and input generator
(`def get_inputs`), and a cost model (flops, fewest bytes moved) for rooflines.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch

from kz_common.ops.exceptions import DimMismatchError, ShapeRangeError, UnsupportedDtypeError
from kz_common.ops.tolerances import ACCUMULATING_FAMILIES, Tolerance, tolerance_for

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}
FAMILIES = (
    "elementwise",
    "fused_activation",
    "softmax",
    "normalization",
    "reduction",
    "matmul",
    "attention",
)
# Largest tensor (in elements) any op may create: keeps int32 indexing safe in kernels
# and keeps the naive reference (which materialises intermediates) within device memory.
MAX_TENSOR_ELEMENTS = 2**31 - 1

Shape = Mapping[str, int]
ShapeRange = Mapping[str, tuple[int, int]]


def dtype_name(dtype: str | torch.dtype) -> str:
    """Canonical name ("float16") of a dtype given as a name or a torch dtype."""
    if isinstance(dtype, torch.dtype):
        for name, td in DTYPES.items():
            if td == dtype:
                return name
        raise UnsupportedDtypeError(f"dtype {dtype} is not supported; supported: {sorted(DTYPES)}")
    name = str(dtype).removeprefix("torch.")
    if name not in DTYPES:
        raise UnsupportedDtypeError(f"dtype {dtype!r} is not supported; supported: {sorted(DTYPES)}")
    return name


def torch_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """The torch dtype of a dtype given as a name or a torch dtype."""
    return DTYPES[dtype_name(dtype)]


@dataclass(frozen=True, eq=False)
class OpSpec:
    """One catalogue op. Immutable; compare and hash by name."""

    name: str
    family: str
    dims: tuple[str, ...]
    default_range: Mapping[str, tuple[int, int]]
    limits: Mapping[str, tuple[int, int]]
    cpu_range: Mapping[str, tuple[int, int]]  # small enough for TRITON_INTERPRET=1
    dtypes: tuple[str, ...]
    reference_source: str  # code text defining `class Model(nn.Module)`
    baseline_source: str  # code text defining `class ModelOpt(nn.Module)`
    inputs_source: str  # code text defining `def get_inputs()`
    flops_fn: Callable[[Shape], int]
    elements_fn: Callable[[Shape], int]  # elements read (each input once) + written (each output once)
    largest_tensor_fn: Callable[[Shape], int]  # elements of the largest tensor the reference creates
    description: str = ""
    init_inputs_source: str = "def get_init_inputs():\n    return []\n"
    tags: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"op {self.name!r}: unknown family {self.family!r}")
        for attr in ("default_range", "limits", "cpu_range"):
            rng = getattr(self, attr)
            if tuple(rng) != self.dims:
                raise ValueError(f"op {self.name!r}: {attr} keys {tuple(rng)} != dims {self.dims}")
        for d in self.dims:
            lo, hi = self.limits[d]
            for attr in ("default_range", "cpu_range"):
                a, b = getattr(self, attr)[d]
                if not lo <= a <= b <= hi:
                    raise ValueError(f"op {self.name!r}: {attr}[{d!r}] outside limits")

    def __hash__(self) -> int:
        return hash(self.name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OpSpec) and other.name == self.name

    # ------------------------------------------------------------------ properties

    @property
    def is_accumulating(self) -> bool:
        """Whether outputs accumulate over many inputs (looser tolerance)."""
        return self.family in ACCUMULATING_FAMILIES

    def tolerance(self, dtype: str | torch.dtype) -> Tolerance:
        """The tolerance a solution's outputs must meet at `dtype`."""
        return tolerance_for(torch_dtype(dtype), self.family)

    # ------------------------------------------------------------------ cost model

    def flops(self, shape: Shape) -> int:
        """Floating-point operations of one forward at `shape` (matmul: 2*M*N*K)."""
        self.validate_shape(shape)
        return int(self.flops_fn(shape))

    def bytes_moved(self, shape: Shape, dtype: str | torch.dtype) -> int:
        """Fewest bytes one forward must move: each input read once, each output written once."""
        self.validate_shape(shape)
        itemsize = torch_dtype(dtype).itemsize
        return int(self.elements_fn(shape)) * itemsize

    def arithmetic_intensity(self, shape: Shape, dtype: str | torch.dtype) -> float:
        """flops per byte moved, for roofline placement."""
        return self.flops(shape) / self.bytes_moved(shape, dtype)

    # ------------------------------------------------------------------ validation

    def validate_dtype(self, dtype: str | torch.dtype) -> str:
        """Canonical dtype name, or UnsupportedDtypeError."""
        name = dtype_name(dtype)
        if name not in self.dtypes:
            raise UnsupportedDtypeError(
                f"op {self.name!r} does not support dtype {name!r}; supported: {list(self.dtypes)}"
            )
        return name

    def _check_dims(self, keys: object, what: str) -> None:
        given = list(keys)  # type: ignore[call-overload]
        missing = [d for d in self.dims if d not in given]
        extra = [d for d in given if d not in self.dims]
        if missing or extra:
            raise DimMismatchError(
                f"op {self.name!r}: {what} must name exactly dims {list(self.dims)}; "
                f"missing {missing}, extra {extra}"
            )

    def validate_range(self, shape_range: ShapeRange) -> dict[str, tuple[int, int]]:
        """Normalised copy of `shape_range` in dim order, or a ShapeRangeError."""
        if not isinstance(shape_range, Mapping):
            raise ShapeRangeError(f"op {self.name!r}: shape_range must be a dict, got {shape_range!r}")
        self._check_dims(shape_range.keys(), "shape_range")
        out: dict[str, tuple[int, int]] = {}
        for d in self.dims:
            pair = shape_range[d]
            try:
                lo, hi = pair
            except (TypeError, ValueError):
                raise ShapeRangeError(
                    f"op {self.name!r}: shape_range[{d!r}] must be a (min, max) pair, got {pair!r}"
                ) from None
            if not (_is_int(lo) and _is_int(hi)):
                raise ShapeRangeError(f"op {self.name!r}: shape_range[{d!r}] must hold ints, got {pair!r}")
            lim_lo, lim_hi = self.limits[d]
            if not 1 <= lo <= hi:
                raise ShapeRangeError(
                    f"op {self.name!r}: shape_range[{d!r}] must satisfy 1 <= min <= max, got {pair!r}"
                )
            if lo < lim_lo or hi > lim_hi:
                raise ShapeRangeError(
                    f"op {self.name!r}: shape_range[{d!r}]={tuple(pair)} is outside the allowed "
                    f"limits [{lim_lo}, {lim_hi}]"
                )
            out[d] = (int(lo), int(hi))
        top = {d: hi for d, (_, hi) in out.items()}
        if self.largest_tensor_fn(top) > MAX_TENSOR_ELEMENTS:
            raise ShapeRangeError(
                f"op {self.name!r}: at the max corner {top} a tensor would exceed "
                f"{MAX_TENSOR_ELEMENTS} elements"
            )
        return out

    def validate_shape(self, shape: Shape, within: ShapeRange | None = None) -> dict[str, int]:
        """Normalised copy of a concrete shape in dim order, or a ShapeRangeError."""
        if not isinstance(shape, Mapping):
            raise ShapeRangeError(f"op {self.name!r}: a shape must be a dict, got {shape!r}")
        self._check_dims(shape.keys(), "shape")
        bounds = within if within is not None else self.limits
        out: dict[str, int] = {}
        for d in self.dims:
            v = shape[d]
            if not _is_int(v):
                raise ShapeRangeError(f"op {self.name!r}: shape[{d!r}] must be an int, got {v!r}")
            lo, hi = bounds[d]
            if not lo <= v <= hi:
                raise ShapeRangeError(f"op {self.name!r}: shape[{d!r}]={v} outside [{lo}, {hi}]")
            out[d] = int(v)
        if self.largest_tensor_fn(out) > MAX_TENSOR_ELEMENTS:
            raise ShapeRangeError(f"op {self.name!r}: shape {out} creates a tensor that is too large")
        return out


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def prod(shape: Shape, *dims: str) -> int:
    """Product of the named dims of a shape."""
    return math.prod(int(shape[d]) for d in dims)
