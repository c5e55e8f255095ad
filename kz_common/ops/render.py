"""Render a catalogue op into a problem: KernelBench format plus the KZ_* extensions.

A problem is Python source defining module-level int globals for the dims (set to
the default shape), `Model` (naive reference), `ModelOpt` (optimised baseline),
`get_inputs()` (built from the dim globals on `KZ_DEVICE` with dtype `KZ_DTYPE`),
`get_init_inputs()`, `KZ_SHAPES` (concrete shapes to verify on) and `KZ_META`.
The verifier seeds the RNG, sets KZ_DEVICE / KZ_DTYPE and the dim globals from each
KZ_SHAPES entry, then calls get_inputs().
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kz_common.ops.exceptions import ShapeRangeError
from kz_common.ops.registry import get_op
from kz_common.ops.shapes import choose_shapes

_HEADER = '''\
"""KernelZero problem: {op} ({family}), {dtype}.

{description}.
Shape range: {range_text}.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

KZ_DEVICE = {device!r}
KZ_DTYPE = torch.{dtype}

# Default shape; the verifier overwrites these globals from each KZ_SHAPES entry.
{dim_globals}
'''


def _format_shapes(shapes: Sequence[Mapping[str, int]], dims: Sequence[str]) -> str:
    lines = ["KZ_SHAPES = ["]
    for s in shapes:
        inner = ", ".join(f"{d!r}: {s[d]}" for d in dims)
        lines.append(f"    {{{inner}}},")
    lines.append("]")
    return "\n".join(lines) + "\n"


def _format_meta(meta: Mapping[str, object]) -> str:
    lines = ["KZ_META = {"]
    for k, v in meta.items():
        lines.append(f"    {k!r}: {v!r},")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _check_device(device: object) -> str:
    if not isinstance(device, str) or not (device == "cpu" or device.split(":")[0] == "cuda"):
        raise ShapeRangeError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    return device


def render_problem(
    op: str,
    dtype: str,
    shape_range: Mapping[str, tuple[int, int]],
    shapes: Sequence[Mapping[str, int]] | None = None,
    device: str = "cpu",
) -> str:
    """Complete problem source for `op` at `dtype` over `shape_range`.

    `shapes` (each inside the range) become KZ_SHAPES; when None they are chosen
    deterministically: min corner, an awkward (odd, non-power-of-two) middle, max corner.
    The dim globals default to the middle entry of KZ_SHAPES.
    Raises a `CatalogueError` subclass for an unknown op, unsupported dtype, a range
    outside the op's limits, missing/extra dims, or shapes outside the range.
    """
    spec = get_op(op)
    dtype = spec.validate_dtype(dtype)
    rng = spec.validate_range(shape_range)
    device = _check_device(device)
    if shapes is None:
        chosen = choose_shapes(rng)
    else:
        if isinstance(shapes, Mapping) or not isinstance(shapes, Sequence) or not shapes:
            raise ShapeRangeError(f"op {op!r}: shapes must be a non-empty list of dicts, got {shapes!r}")
        chosen = [spec.validate_shape(s, within=rng) for s in shapes]
    default = chosen[len(chosen) // 2]

    header = _HEADER.format(
        op=spec.name,
        family=spec.family,
        dtype=dtype,
        description=spec.description[:1].upper() + spec.description[1:],
        range_text=", ".join(f"{d} in [{lo}, {hi}]" for d, (lo, hi) in rng.items()),
        device=device,
        dim_globals="\n".join(f"{d} = {default[d]}" for d in spec.dims),
    )
    meta = {
        "op": spec.name,
        "family": spec.family,
        "dtype": dtype,
        "dims": list(spec.dims),
        "shape_range": {d: [lo, hi] for d, (lo, hi) in rng.items()},
    }
    blocks = [
        header,
        spec.reference_source,
        spec.baseline_source,
        spec.inputs_source,
        spec.init_inputs_source,
        _format_shapes(chosen, spec.dims),
        _format_meta(meta),
    ]
    return "\n\n".join(b.rstrip("\n") + "\n" for b in blocks).rstrip("\n") + "\n"
