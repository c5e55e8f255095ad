"""Every launch the reference solutions make at H200-scale shapes compiles for sm_90.

No GPU is needed: the launches are recorded on meta tensors and built down to cubin
with the ptxas bundled in the Triton wheel (see sm90.py). Also checks that shared
memory fits an H100/H200 block and that no config spills registers heavily.
"""

from __future__ import annotations

import re

import pytest

from kz_common.ops import get_op, op_names, render_problem
from tests.kz_common.helpers import draw_inputs, load_problem
from tests.kz_common.kernels.sm90 import (
    SM90_MAX_SHARED,
    compile_sm90,
    load_for_compile,
    record_launches,
    resource_usage,
)

pytestmark = pytest.mark.slow  # ~90 s from a cold Triton cache, seconds when warm

MAX_SPILL_BYTES = 64  # a few bytes of stack on awkward (non-16-divisible) shapes are tolerated


def _shapes(op: str) -> list[dict[str, int]]:
    spec = get_op(op)
    prob = load_problem(render_problem(op, "float16", spec.default_range))
    shapes = list(prob.KZ_SHAPES)  # min corner, awkward middle, max corner
    if "cols" in spec.dims:
        shapes.append({"rows": 4, "cols": 65536})  # looped / online paths
    if op == "attention":
        shapes.append({"batch_heads": 2, "seq": 1000, "head_dim": 256})
    if op == "matmul":
        shapes.append({"M": 16, "N": 4096, "K": 4096})  # skinny config
    return shapes


@pytest.mark.parametrize("op", op_names())
def test_reference_kernels_compile_for_sm90(op: str, monkeypatch: pytest.MonkeyPatch) -> None:
    module = load_for_compile(op, monkeypatch)
    spec = get_op(op)
    seen = 0
    for dtype in ("float32", "float16", "bfloat16"):
        prob = load_problem(render_problem(op, dtype, spec.default_range))
        prob.KZ_DEVICE = "meta"  # no memory, no compute: only shapes, strides and dtypes
        for shape in _shapes(op):
            launches = record_launches(module, draw_inputs(prob, shape), prob.get_init_inputs())
            assert launches, f"{op}/{dtype}/{shape}: no kernel launch"
            for launch in launches:
                kernel = compile_sm90(launch)
                where = f"{op}/{dtype}/{shape}/{launch.fn.__name__}"
                assert kernel.asm.get("cubin"), where
                assert kernel.metadata.shared <= SM90_MAX_SHARED, f"{where}: smem {kernel.metadata.shared}"
                usage = resource_usage(kernel)
                stack = re.search(r"STACK:(\d+)", usage)
                if stack:
                    assert int(stack.group(1)) <= MAX_SPILL_BYTES, f"{where}: spills ({usage})"
                seen += 1
    assert seen
