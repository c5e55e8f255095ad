"""Named check cases for the reference kernels, run in a subprocess by worker.py.

Triton decides interpreter-or-compiler when it is first imported (its own
tl.sum / tl.max are @triton.jit functions), so these checks cannot share the
pytest process, where any other test may already have imported triton. Importing
this module does not import triton; each case does when it runs.

A case is a no-argument callable; it passes by returning, fails by raising, and
skips by raising `Skip`.
"""

from __future__ import annotations

from collections.abc import Callable

from kz_common.ops import op_names

DTYPES = ("float32", "float16", "bfloat16")
DOT_OPS = frozenset({"matmul", "attention"})  # kernels built on tl.dot


class Skip(Exception):
    """Raised by a case that does not apply here."""


# ----------------------------------------------------------------------------- interpreter


def _interp_solution(op: str):  # type: ignore[no-untyped-def]
    from kz_common.kernels import reference_solution
    from tests.kz_common.helpers import load_problem

    module = load_problem(reference_solution(op), name=f"kz_solution_{op}")
    kernels = [v for v in vars(module).values() if type(v).__name__ == "InterpretedFunction"]
    assert kernels, f"{op}: no kernel was built by the Triton interpreter (TRITON_INTERPRET unset?)"
    return module


def _problem(op, dtype, shape_range=None, shapes=None):  # type: ignore[no-untyped-def]
    from kz_common.ops import cpu_test_range, render_problem
    from tests.kz_common.helpers import load_problem

    return load_problem(render_problem(op, dtype, shape_range or cpu_test_range(op), shapes=shapes))


def _run(sol, prob, shape, seed=0, model=None) -> None:  # type: ignore[no-untyped-def]
    import torch

    from kz_common.ops import tolerance_for
    from tests.kz_common.helpers import check_close, draw_inputs

    inputs = draw_inputs(prob, shape, seed=seed)
    init = prob.get_init_inputs()
    new = (model or sol.ModelNew(*init))(*inputs)
    with torch.no_grad():
        ref = prob.ModelOpt(*init)(*inputs)
    check_close(new, ref, tolerance_for(prob.KZ_DTYPE, prob.KZ_META["family"]),
                f"{prob.KZ_META['op']}/{prob.KZ_META['dtype']}/{shape}")


def matches_baseline(op: str, dtype: str) -> None:
    """The reference kernel matches ModelOpt on every KZ_SHAPES shape of the CPU test range."""
    if dtype == "bfloat16" and op in DOT_OPS:
        raise Skip("Triton's CPU interpreter computes tl.dot on bfloat16 operands incorrectly")
    sol = _interp_solution(op)
    prob = _problem(op, dtype)
    for i, shape in enumerate(prob.KZ_SHAPES):
        _run(sol, prob, shape, seed=i)


def looped_row_kernel(op: str, dtype: str) -> None:
    """Rows wider than one block take the looped (online) kernel; forced here with small blocks."""
    sol = _interp_solution(op)
    for name in ("ONLINE_BLOCK", "LOOP_BLOCK"):
        if hasattr(sol, name):
            setattr(sol, name, 64)
    model = sol.ModelNew()
    model.max_fused_cols = 32
    prob = _problem(op, dtype)
    for shape in ({"rows": 3, "cols": 33}, {"rows": 2, "cols": 64}, {"rows": 4, "cols": 300}):
        _run(sol, prob, shape, model=model)


def matmul_every_tile_config(dtype: str) -> None:
    """Each tile config the size heuristic can pick computes correctly (on a small problem)."""
    import torch

    from kz_common.ops import tolerance_for
    from tests.kz_common.helpers import check_close

    sol = _interp_solution("matmul")
    td = getattr(torch, dtype)
    itemsize = torch.empty(0, dtype=td).element_size()
    configs = {}
    for M, N in ((8, 8), (32, 4096), (1000, 1000), (8192, 8192)):
        cfg, precision, _ = sol._config(M, N, 512, itemsize)
        configs[str(cfg)] = (cfg, precision)
    torch.manual_seed(0)
    M, N, K = 70, 300, 90
    a, b = torch.randn(M, K, dtype=td), torch.randn(K, N, dtype=td)
    for cfg, precision in configs.values():
        c = torch.empty(M, N, dtype=td)
        grid = (-(-M // cfg["BLOCK_M"]) * -(-N // cfg["BLOCK_N"]),)
        sol.matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                c.stride(0), c.stride(1), GROUP_M=8, INPUT_PRECISION=precision, **cfg)
        check_close(c, torch.matmul(a, b), tolerance_for(td, "matmul"), f"matmul {cfg}")


def matmul_strided_inputs() -> None:
    import torch

    from kz_common.ops import tolerance_for
    from tests.kz_common.helpers import check_close

    sol = _interp_solution("matmul")
    torch.manual_seed(0)
    a = torch.randn(40, 33).t()  # (33, 40), column-major
    b = torch.randn(40, 58)[:, ::2]  # (40, 29), column stride 2
    check_close(sol.ModelNew()(a, b), torch.matmul(a, b), tolerance_for(torch.float32, "matmul"),
                "strided matmul")


def attention_head_dim(dtype: str, batch_heads: int, seq: int, head_dim: int) -> None:
    """Head dims outside the CPU test range exercise the other block configs."""
    sol = _interp_solution("attention")
    shape = {"batch_heads": batch_heads, "seq": seq, "head_dim": head_dim}
    rng = {"batch_heads": (1, batch_heads), "seq": (1, seq), "head_dim": (8, head_dim)}
    _run(sol, _problem("attention", dtype, shape_range=rng, shapes=[shape]), shape)


def row_ops_on_3d_input() -> None:
    """Row kernels treat leading dims as rows, like their torch baselines."""
    import torch

    from kz_common.ops import tolerance_for
    from tests.kz_common.helpers import check_close

    torch.manual_seed(0)
    x = torch.randn(2, 3, 37)
    check_close(_interp_solution("softmax").ModelNew()(x), torch.softmax(x, -1),
                tolerance_for(torch.float32, "softmax"), "softmax 3d")
    check_close(_interp_solution("row_sum").ModelNew()(x), x.sum(-1),
                tolerance_for(torch.float32, "reduction"), "row_sum 3d")


def _interp_cases() -> dict[str, Callable[[], None]]:
    cases: dict[str, Callable[[], None]] = {}
    for op in op_names():
        for dt in DTYPES:
            cases[f"baseline[{op}-{dt}]"] = lambda op=op, dt=dt: matches_baseline(op, dt)
    for op in ("softmax", "layernorm", "rmsnorm"):
        for dt in ("float32", "float16"):
            cases[f"looped[{op}-{dt}]"] = lambda op=op, dt=dt: looped_row_kernel(op, dt)
    for dt in ("float32", "float16"):
        cases[f"matmul_tiles[{dt}]"] = lambda dt=dt: matmul_every_tile_config(dt)
    cases["matmul_strided"] = matmul_strided_inputs
    for dt, bh, s, d in (("float16", 2, 150, 64), ("float16", 1, 40, 100), ("float16", 1, 33, 200),
                         ("float32", 1, 70, 72), ("float32", 1, 20, 160)):
        cases[f"attention_dims[{dt}-{bh}x{s}x{d}]"] = (
            lambda dt=dt, bh=bh, s=s, d=d: attention_head_dim(dt, bh, s, d))
    cases["row_ops_3d"] = row_ops_on_3d_input
    return cases


# ----------------------------------------------------------------------------- sm_90 compile

MAX_SPILL_BYTES = 64  # a few bytes of stack on awkward (non-16-divisible) shapes are tolerated


def _sm90_shapes(op: str) -> list[dict[str, int]]:
    from kz_common.ops import get_op, render_problem
    from tests.kz_common.helpers import load_problem

    spec = get_op(op)
    shapes = list(load_problem(render_problem(op, "float16", spec.default_range)).KZ_SHAPES)
    if "cols" in spec.dims:
        shapes.append({"rows": 4, "cols": 65536})  # looped / online paths
    if op == "attention":
        shapes.append({"batch_heads": 2, "seq": 1000, "head_dim": 256})
    if op == "matmul":
        shapes.append({"M": 16, "N": 4096, "K": 4096})  # skinny config
    return shapes


def compiles_for_sm90(op: str, dtype: str) -> None:
    """Every launch at H200-scale shapes compiles to cubin, fits shared memory, barely spills."""
    import re

    from kz_common.ops import get_op, render_problem
    from tests.kz_common.helpers import draw_inputs, load_problem
    from tests.kz_common.kernels import sm90

    module = sm90.load_for_compile(op)
    prob = load_problem(render_problem(op, dtype, get_op(op).default_range))
    prob.KZ_DEVICE = "meta"  # no memory, no compute: only shapes, strides and dtypes
    for shape in _sm90_shapes(op):
        launches = sm90.record_launches(module, draw_inputs(prob, shape), prob.get_init_inputs())
        assert launches, f"{op}/{dtype}/{shape}: no kernel launch"
        for launch in launches:
            kernel = sm90.compile_sm90(launch)
            where = f"{op}/{dtype}/{shape}/{launch.fn.__name__}"
            assert kernel.asm.get("cubin"), where
            assert kernel.metadata.shared <= sm90.SM90_MAX_SHARED, f"{where}: smem {kernel.metadata.shared}"
            usage = sm90.resource_usage(kernel)
            stack = re.search(r"STACK:(\d+)", usage)
            assert stack is None or int(stack.group(1)) <= MAX_SPILL_BYTES, f"{where}: spills ({usage})"


def _sm90_cases() -> dict[str, Callable[[], None]]:
    return {f"sm90[{op}-{dt}]": (lambda op=op, dt=dt: compiles_for_sm90(op, dt))
            for op in op_names() for dt in DTYPES}


SUITES: dict[str, Callable[[], dict[str, Callable[[], None]]]] = {
    "interp": _interp_cases,
    "sm90": _sm90_cases,
}
