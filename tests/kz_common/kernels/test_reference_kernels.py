"""Reference Triton kernels match the optimised baselines under TRITON_INTERPRET=1."""

from __future__ import annotations

import pytest
import torch

from kz_common.kernels import available_ops, reference_solution
from kz_common.ops import UnknownOpError, cpu_test_range, get_op, op_names, render_problem, tolerance_for
from tests.kz_common.helpers import check_close, draw_inputs, load_problem

DTYPES = ["float32", "float16", "bfloat16"]
DOT_OPS = {"matmul", "attention"}  # kernels built on tl.dot


def _interpreter_skip(op: str, dtype: str) -> None:
    if dtype == "bfloat16" and op in DOT_OPS:
        pytest.skip("Triton's CPU interpreter computes tl.dot on bfloat16 operands incorrectly")


def _problem(op: str, dtype: str, shape_range=None, shapes=None):  # type: ignore[no-untyped-def]
    return load_problem(render_problem(op, dtype, shape_range or cpu_test_range(op), shapes=shapes))


def _run(sol, prob, shape, seed=0, model=None):  # type: ignore[no-untyped-def]
    inputs = draw_inputs(prob, shape, seed=seed)
    init = prob.get_init_inputs()
    new = (model or sol.ModelNew(*init))(*inputs)
    with torch.no_grad():
        ref = prob.ModelOpt(*init)(*inputs)
    check_close(new, ref, tolerance_for(prob.KZ_DTYPE, prob.KZ_META["family"]),
                f"{prob.KZ_META['op']}/{prob.KZ_META['dtype']}/{shape}")


def test_every_catalogue_op_has_a_reference_solution() -> None:
    assert set(available_ops()) == set(op_names())
    for op in available_ops():
        assert "class ModelNew(nn.Module)" in reference_solution(op)
    with pytest.raises(UnknownOpError):
        reference_solution("nope")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", op_names())
def test_reference_kernel_matches_baseline(op: str, dtype: str, load_solution) -> None:  # type: ignore[no-untyped-def]
    _interpreter_skip(op, dtype)
    sol = load_solution(op)
    prob = _problem(op, dtype)
    for i, shape in enumerate(prob.KZ_SHAPES):
        _run(sol, prob, shape, seed=i)


@pytest.mark.parametrize("op", ["softmax", "layernorm", "rmsnorm"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_looped_row_kernels(op: str, dtype: str, load_solution) -> None:  # type: ignore[no-untyped-def]
    """Rows wider than one block take the looped (online) kernel; force it with small blocks."""
    sol = load_solution(op)
    for name in ("ONLINE_BLOCK", "LOOP_BLOCK"):
        if hasattr(sol, name):
            setattr(sol, name, 64)
    model = sol.ModelNew()
    model.max_fused_cols = 32
    prob = _problem(op, dtype)
    for shape in ({"rows": 3, "cols": 33}, {"rows": 2, "cols": 64}, {"rows": 4, "cols": 300}):
        _run(sol, prob, shape, model=model)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_matmul_every_tile_config(dtype: str, load_solution) -> None:  # type: ignore[no-untyped-def]
    """Each tile config the size heuristic can pick computes correctly (on a small problem)."""
    sol = load_solution("matmul")
    itemsize = torch.empty(0, dtype=getattr(torch, dtype)).element_size()
    configs = {
        str(sol._config(M, N, 512, itemsize)[0]): sol._config(M, N, 512, itemsize)
        for M, N in ((8, 8), (32, 4096), (1000, 1000), (8192, 8192))
    }
    torch.manual_seed(0)
    M, N, K = 70, 300, 90
    a = torch.randn(M, K, dtype=getattr(torch, dtype))
    b = torch.randn(K, N, dtype=getattr(torch, dtype))
    tol = tolerance_for(a.dtype, "matmul")
    for cfg, precision, _ in configs.values():
        c = torch.empty(M, N, dtype=a.dtype)
        grid = (-(-M // cfg["BLOCK_M"]) * -(-N // cfg["BLOCK_N"]),)
        sol.matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                c.stride(0), c.stride(1), GROUP_M=8, INPUT_PRECISION=precision, **cfg)
        check_close(c, torch.matmul(a, b), tol, f"matmul {cfg}")


def test_matmul_strided_inputs(load_solution) -> None:  # type: ignore[no-untyped-def]
    sol = load_solution("matmul")
    torch.manual_seed(0)
    a = torch.randn(40, 33).t()  # (33, 40), column-major
    b = torch.randn(40, 58)[:, ::2]  # (40, 29), column stride 2
    out = sol.ModelNew()(a, b)
    check_close(out, torch.matmul(a, b), tolerance_for(torch.float32, "matmul"), "strided matmul")


@pytest.mark.parametrize(("dtype", "shape"), [
    ("float16", {"batch_heads": 2, "seq": 150, "head_dim": 64}),
    ("float16", {"batch_heads": 1, "seq": 40, "head_dim": 100}),
    ("float16", {"batch_heads": 1, "seq": 33, "head_dim": 200}),
    ("float32", {"batch_heads": 1, "seq": 70, "head_dim": 72}),
])
def test_attention_head_dim_configs(dtype: str, shape: dict, load_solution) -> None:  # type: ignore[no-untyped-def]
    sol = load_solution("attention")
    rng = {d: (1, max(v, get_op("attention").limits[d][0])) for d, v in shape.items()}
    rng["head_dim"] = (8, shape["head_dim"])
    prob = _problem("attention", dtype, shape_range=rng, shapes=[shape])
    _run(sol, prob, shape)


def test_row_ops_on_3d_input(load_solution) -> None:  # type: ignore[no-untyped-def]
    """Row kernels treat leading dims as rows, like their torch baselines."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 37)
    sm = load_solution("softmax").ModelNew()(x)
    check_close(sm, torch.softmax(x, -1), tolerance_for(torch.float32, "softmax"), "softmax 3d")
    rs = load_solution("row_sum").ModelNew()(x)
    check_close(rs, x.sum(-1), tolerance_for(torch.float32, "reduction"), "row_sum 3d")
