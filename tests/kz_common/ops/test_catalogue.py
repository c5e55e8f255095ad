"""The op catalogue and problem renderer: every problem runs and its two models agree."""

from __future__ import annotations

import ast
import math

import pytest
import torch

from kz_common.ops import (
    CatalogueError,
    DimMismatchError,
    ShapeRangeError,
    UnknownOpError,
    UnsupportedDtypeError,
    all_ops,
    choose_shapes,
    cpu_test_range,
    get_op,
    op_names,
    render_problem,
    shape_bucket,
    shape_signature,
    tolerance_for,
)
from kz_common.ops.spec import FAMILIES
from tests.kz_common.helpers import check_close, draw_inputs, load_problem

REQUIRED_OPS = {
    "add", "gelu", "silu", "bias_gelu", "softmax", "layernorm", "rmsnorm",
    "row_sum", "row_max", "matmul", "attention",
}
DTYPES = ["float32", "float16", "bfloat16"]
OPS = op_names()


def test_registry_has_required_ops() -> None:
    assert REQUIRED_OPS <= set(OPS)
    assert [s.name for s in all_ops()] == OPS
    for spec in all_ops():
        assert get_op(spec.name) is spec
        assert spec.family in FAMILIES
        assert all_ops(spec.family) and all(s.family == spec.family for s in all_ops(spec.family))
        assert spec.is_accumulating == (spec.family not in ("elementwise", "fused_activation"))
        for dt in DTYPES:
            assert spec.tolerance(dt) == tolerance_for(getattr(torch, dt), spec.family)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_rendered_cpu_problem_models_agree(op: str, dtype: str) -> None:
    src = render_problem(op, dtype, cpu_test_range(op))
    ast.parse(src)
    prob = load_problem(src)
    assert prob.KZ_META["op"] == op and prob.KZ_META["dtype"] == dtype
    assert prob.KZ_META["family"] == get_op(op).family
    assert prob.KZ_DTYPE == getattr(torch, dtype) and prob.KZ_DEVICE == "cpu"
    assert len(prob.KZ_SHAPES) >= 3
    model = prob.Model(*prob.get_init_inputs())
    opt = prob.ModelOpt(*prob.get_init_inputs())
    tol = tolerance_for(prob.KZ_DTYPE, prob.KZ_META["family"])
    for shape in prob.KZ_SHAPES:
        inputs = draw_inputs(prob, shape)
        assert all(t.dtype == prob.KZ_DTYPE for t in inputs)
        with torch.no_grad():
            check_close(model(*inputs), opt(*inputs), tol, f"{op}/{dtype}/{shape}")


@pytest.mark.parametrize("op", OPS)
def test_rendered_default_problem_structure(op: str) -> None:
    spec = get_op(op)
    src = render_problem(op, "float16", spec.default_range, device="cuda")
    prob = load_problem(src)
    assert prob.KZ_DEVICE == "cuda"
    shapes = prob.KZ_SHAPES
    assert len(shapes) >= 3
    lo = {d: r[0] for d, r in spec.default_range.items()}
    hi = {d: r[1] for d, r in spec.default_range.items()}
    assert shapes[0] == lo and shapes[-1] == hi
    mid = shapes[1]
    assert any(v & (v - 1) for v in mid.values()), "middle shape should be awkward"
    for d in spec.dims:  # default globals = the middle shape
        assert getattr(prob, d) == mid[d]
    assert prob.get_init_inputs() == []
    # deterministic
    assert render_problem(op, "float16", spec.default_range, device="cuda") == src


def test_problem_runs_on_small_default_corner() -> None:
    """The default-range min corner of every op runs in float32 on CPU (cheap shapes)."""
    for spec in all_ops():
        prob = load_problem(render_problem(spec.name, "float32", spec.default_range))
        inputs = draw_inputs(prob, prob.KZ_SHAPES[0])
        with torch.no_grad():
            check_close(prob.Model()(*inputs), prob.ModelOpt()(*inputs),
                        tolerance_for(torch.float32, spec.family), spec.name)


def test_explicit_shapes_and_globals_override() -> None:
    shapes = [{"rows": 3, "cols": 5}, {"cols": 100, "rows": 2}]
    src = render_problem("softmax", "float32", {"rows": (1, 8), "cols": (1, 128)}, shapes=shapes)
    prob = load_problem(src)
    assert prob.KZ_SHAPES == [{"rows": 3, "cols": 5}, {"rows": 2, "cols": 100}]
    (x,) = draw_inputs(prob, {"rows": 2, "cols": 100})
    assert x.shape == (2, 100)


def test_kernelbench_subset_is_a_valid_problem() -> None:
    """Stripping every KZ_* / ModelOpt addition leaves a plain KernelBench problem."""
    src = render_problem("layernorm", "float32", cpu_test_range("layernorm"))
    tree = ast.parse(src)
    keep = []
    for node in tree.body:
        names = {t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)}
        if any(n.startswith("KZ_") and n != "KZ_DEVICE" and n != "KZ_DTYPE" for n in names):
            continue
        if isinstance(node, ast.ClassDef) and node.name == "ModelOpt":
            continue
        keep.append(node)
    prob = load_problem(ast.unparse(ast.Module(body=keep, type_ignores=[])))
    out = prob.Model(*prob.get_init_inputs())(*prob.get_inputs())
    assert out.shape == (prob.rows, prob.cols)


def test_cost_model() -> None:
    mm = get_op("matmul")
    s = {"M": 128, "N": 64, "K": 32}
    assert mm.flops(s) == 2 * 128 * 64 * 32
    assert mm.bytes_moved(s, "float16") == 2 * (128 * 32 + 32 * 64 + 128 * 64)
    assert mm.bytes_moved(s, torch.float32) == 4 * (128 * 32 + 32 * 64 + 128 * 64)
    rc = {"rows": 10, "cols": 7}
    assert get_op("add").bytes_moved(rc, "float32") == 4 * 3 * 70
    assert get_op("softmax").bytes_moved(rc, "bfloat16") == 2 * 2 * 70
    assert get_op("layernorm").bytes_moved(rc, "float32") == 4 * (2 * 70 + 2 * 7)
    assert get_op("rmsnorm").bytes_moved(rc, "float32") == 4 * (2 * 70 + 7)
    assert get_op("bias_gelu").bytes_moved(rc, "float16") == 2 * (2 * 70 + 7)
    assert get_op("row_sum").bytes_moved(rc, "float32") == 4 * (70 + 10)
    att = {"batch_heads": 2, "seq": 16, "head_dim": 8}
    assert get_op("attention").flops(att) == 4 * 2 * 16 * 16 * 8
    assert get_op("attention").bytes_moved(att, "float16") == 2 * 4 * 2 * 16 * 8
    for spec in all_ops():
        shape = {d: r[1] for d, r in spec.default_range.items()}
        assert spec.flops(shape) > 0 and spec.bytes_moved(shape, "float32") > 0
        assert spec.arithmetic_intensity(shape, "float16") > 0


def test_shape_bucket_and_signature() -> None:
    assert shape_bucket({"rows": (1024, 4096), "cols": (1024, 4096)}) == "rows:10-12|cols:10-12"
    assert shape_bucket({"rows": (1000, 3000), "cols": [1, 1]}) == "rows:9-12|cols:0-0"
    assert shape_bucket({"cols": (1, 2), "rows": (1, 2)}, op="softmax") == "rows:0-1|cols:0-1"
    assert shape_bucket({"cols": (1, 2), "rows": (1, 2)}, op="not_an_op") == "cols:0-1|rows:0-1"
    assert shape_signature({"rows": 4096, "cols": 17}) == "rows=4096|cols=17"
    assert shape_signature({"rows": (1, 64), "cols": (1, 300)}) == "rows=1..64|cols=1..300"
    with pytest.raises(ShapeRangeError):
        shape_bucket({"rows": (0, 4)})
    with pytest.raises(ShapeRangeError):
        shape_bucket({})


def test_choose_shapes_degenerate_and_awkward() -> None:
    assert choose_shapes({"rows": (5, 5), "cols": (7, 7)}) == [{"rows": 5, "cols": 7}]
    shapes = choose_shapes({"rows": (1024, 4096), "cols": (1, 300)})
    assert shapes[1]["rows"] % 2 == 1 and shapes[1]["cols"] % 2 == 1
    assert math.isclose(shapes[1]["rows"], 2048, rel_tol=0.01)


OK_RANGE = {"rows": (1, 2), "cols": (1, 2)}
BAD_CALLS = [  # (op, dtype, shape_range, extra kwargs, expected error)
    ("nope", "float16", OK_RANGE, {}, UnknownOpError),
    ("softmax", "int8", OK_RANGE, {}, UnsupportedDtypeError),
    ("softmax", "float64", OK_RANGE, {}, UnsupportedDtypeError),
    ("softmax", "float16", {"rows": (1, 2)}, {}, DimMismatchError),
    ("softmax", "float16", {**OK_RANGE, "k": (1, 2)}, {}, DimMismatchError),
    ("softmax", "float16", {"rows": (0, 2), "cols": (1, 2)}, {}, ShapeRangeError),
    ("softmax", "float16", {"rows": (4, 2), "cols": (1, 2)}, {}, ShapeRangeError),
    ("softmax", "float16", {"rows": (1, 10**6), "cols": (1, 2)}, {}, ShapeRangeError),
    ("softmax", "float16", {"rows": (1, 65536), "cols": (1, 65536)}, {}, ShapeRangeError),
    ("softmax", "float16", {"rows": (1.5, 2), "cols": (1, 2)}, {}, ShapeRangeError),
    ("softmax", "float16", {"rows": 3, "cols": (1, 2)}, {}, ShapeRangeError),
    ("attention", "float16", {"batch_heads": (1, 2), "seq": (1, 8), "head_dim": (1, 8)}, {},
     ShapeRangeError),
    ("softmax", "float16", OK_RANGE, {"shapes": [{"rows": 3, "cols": 1}]}, ShapeRangeError),
    ("softmax", "float16", OK_RANGE, {"shapes": [{"rows": 1}]}, DimMismatchError),
    ("softmax", "float16", OK_RANGE, {"shapes": []}, ShapeRangeError),
    ("softmax", "float16", OK_RANGE, {"device": "tpu"}, ShapeRangeError),
]


@pytest.mark.parametrize(("op", "dtype", "shape_range", "extra", "exc"), BAD_CALLS)
def test_bad_input_raises_clear_error(
    op: str, dtype: str, shape_range: dict, extra: dict, exc: type[Exception]
) -> None:
    with pytest.raises(exc) as info:
        render_problem(op, dtype, shape_range, **extra)
    assert isinstance(info.value, CatalogueError) and isinstance(info.value, ValueError)
    assert str(info.value)


def test_unknown_op_message_lists_known_ops() -> None:
    with pytest.raises(UnknownOpError, match="softmax"):
        get_op("softmaxx")
    with pytest.raises(UnknownOpError):
        cpu_test_range("softmaxx")


def test_flops_validate_shape() -> None:
    with pytest.raises(DimMismatchError):
        get_op("matmul").flops({"M": 1, "N": 2})
    with pytest.raises(UnsupportedDtypeError):
        get_op("matmul").bytes_moved({"M": 1, "N": 2, "K": 3}, "int32")


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_default_middle_shape_models_agree(op: str, dtype: str) -> None:
    """Model and ModelOpt agree at the (awkward) middle shape of the default range."""
    spec = get_op(op)
    prob = load_problem(render_problem(op, dtype, spec.default_range))
    inputs = draw_inputs(prob, prob.KZ_SHAPES[1], seed=1)
    with torch.no_grad():
        check_close(prob.Model()(*inputs), prob.ModelOpt()(*inputs),
                    tolerance_for(prob.KZ_DTYPE, spec.family), f"{op}/{dtype}")


def test_rendered_problem_fits_challenge_event() -> None:
    """A challenge built from catalogue data validates and round-trips through JSON."""
    from schemas.events import ChallengeCreated, Target

    for spec in all_ops():
        rng = cpu_test_range(spec.name)
        event = ChallengeCreated(
            challenge_id=f"c-{spec.name}", op=spec.name, family=spec.family, dtype="float16",
            shape_range=rng, target=Target(kind="naive_multiple", value=1.0), difficulty=0,
            generator="programmatic", round=0,
            problem_source=render_problem(spec.name, "float16", rng),
        )
        back = ChallengeCreated.model_validate_json(event.model_dump_json())
        # what a consumer does with the event: re-render and bucket it identically
        assert render_problem(back.op, back.dtype, back.shape_range) == event.problem_source
        assert shape_bucket(back.shape_range, back.op) == shape_bucket(rng, spec.name)
