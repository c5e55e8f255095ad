"""Pattern rules: each fires on its cheat and stays silent on the legitimate look-alike."""

from __future__ import annotations

import pytest

from services.curator.patterns import run_patterns
from services.curator.patterns.hardcoded import challenge_dims
from tests.services.curator.samples import CLEAN

RANGE = {"rows": (256, 1024), "cols": (300, 4096)}
FIXED = {"rows": (64, 64), "cols": (1000, 1000)}


def rules(code: str, shape_range: dict[str, tuple[int, int]] = RANGE) -> set[str]:
    return {h.rule for h in run_patterns(code, shape_range)}


def with_forward(body: str, extra: str = "") -> str:
    """CLEAN with forward's body replaced (8-space indented lines) and `extra` appended."""
    head = CLEAN[: CLEAN.index("    def forward(self, x):")]
    return head + "    def forward(self, x):\n" + body + "\n" + extra


LAUNCH = (
    "        out = torch.empty_like(x)\n"
    "        n_rows, n_cols = x.shape\n"
    "        softmax_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK=triton.next_power_of_2(n_cols))\n"
    "        return out"
)


def test_clean_solution_fires_nothing() -> None:
    assert rules(CLEAN) == set()
    assert rules(CLEAN, FIXED) == set()


def test_unparseable() -> None:
    assert rules("def broken(:\n") == {"unparseable"}


# ------------------------------------------------------------------ constant / value branches


@pytest.mark.parametrize("cond", ["True", "1 == 1", "not False", "DEBUG"])
def test_constant_condition_fires(cond: str) -> None:
    code = "DEBUG = False\n" + with_forward(f"        if {cond}:\n            pass\n" + LAUNCH)
    assert "constant_branch" in rules(code)


def test_constexpr_branch_in_kernel_is_not_constant() -> None:
    code = CLEAN.replace("    x = x - tl.max(x, axis=0)\n",
                         "    if BLOCK > 1024:\n        x = x * 1.0\n    x = x - tl.max(x, axis=0)\n")
    assert rules(code) == set()


@pytest.mark.parametrize("cond", ["x.sum() == 0", "(x == 0).all()", "x.abs().max().item() < 1e-6"])
def test_value_shortcut_fires(cond: str) -> None:
    code = with_forward(f"        if {cond}:\n            return torch.zeros_like(x)\n" + LAUNCH)
    assert "value_shortcut" in rules(code)


def test_value_shortcut_through_a_local() -> None:
    code = with_forward("        s = x[0, 0]\n        if s == 0:\n            return x\n" + LAUNCH)
    assert "value_shortcut" in rules(code)


@pytest.mark.parametrize("cond", ["x.numel() == 0", "n == 0", "x.shape[1] == 0", "not x.is_contiguous()",
                                  "x.dtype == torch.float16", "x is None", "len(x) == 0"])
def test_metadata_branches_are_allowed(cond: str) -> None:
    # Empty-input handling and layout/dtype checks read metadata, not values: allowed.
    code = with_forward(f"        n = x.shape[0]\n        if {cond}:\n            return torch.empty_like(x)\n"
                        + LAUNCH)
    assert rules(code) == set()


# ------------------------------------------------------------------ redundant variants

VARIANT = CLEAN.replace("def softmax_kernel(", "def softmax_kernel_small(")


def test_redundant_variants_fire() -> None:
    body = (
        "        out = torch.empty_like(x)\n        n_rows, n_cols = x.shape\n"
        "        if n_cols <= 1024:\n"
        "            softmax_kernel_small[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK=1024)\n"
        "        else:\n"
        "            softmax_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK=4096)\n"
        "        return out"
    )
    kernels = VARIANT[: VARIANT.index("class ModelNew")]
    code = with_forward(body).replace("class ModelNew", kernels + CLEAN[CLEAN.index("@triton.jit"):
                                      CLEAN.index("class ModelNew")] + "class ModelNew", 1)
    assert "redundant_variants" in rules(code)


def test_one_kernel_with_two_block_sizes_is_fine() -> None:
    body = (
        "        out = torch.empty_like(x)\n        n_rows, n_cols = x.shape\n"
        "        BLOCK = 1024 if n_cols <= 1024 else 4096\n"
        "        if n_cols <= 1024:\n"
        "            softmax_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK=BLOCK)\n"
        "        else:\n"
        "            softmax_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK=BLOCK)\n"
        "        return out"
    )
    assert rules(with_forward(body)) == set()


LOOPED = '''
@triton.jit
def softmax_looped(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = -float("inf")
    s = 0.0
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + row * stride + offs, mask=offs < n_cols, other=-float("inf"))
        new_m = tl.maximum(m, tl.max(v, axis=0))
        s = s * tl.exp(m - new_m) + tl.sum(tl.exp(v - new_m), axis=0)
        m = new_m
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + row * stride + offs, mask=offs < n_cols)
        tl.store(out_ptr + row * stride + offs, tl.exp(v - m) / s, mask=offs < n_cols)

'''


def test_genuinely_different_kernels_per_branch_are_fine() -> None:
    body = (
        "        out = torch.empty_like(x)\n        n_rows, n_cols = x.shape\n"
        "        if n_cols <= 4096:\n"
        "            softmax_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK=triton.next_power_of_2(n_cols))\n"
        "        else:\n"
        "            softmax_looped[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK=1024)\n"
        "        return out"
    )
    code = with_forward(body).replace("class ModelNew", LOOPED + "class ModelNew", 1)
    assert rules(code) == set()


# ------------------------------------------------------------------ dead code


def test_unreachable_after_return() -> None:
    code = with_forward(LAUNCH + "\n        print('never')")
    assert "dead_code" in rules(code)


def test_kernel_never_launched() -> None:
    code = CLEAN.replace("class ModelNew", LOOPED + "class ModelNew", 1)
    hits = run_patterns(code, RANGE)
    assert [h.rule for h in hits] == ["dead_code"] and "softmax_looped" in hits[0].evidence


def test_unused_helper_function() -> None:
    code = CLEAN + "\n\ndef helper(a):\n    return a\n"
    assert rules(code) == {"dead_code"}


def test_used_helper_and_entry_points_are_alive() -> None:
    code = with_forward("        return _launch(x)", extra=(
        "\n\ndef _launch(x):\n" + LAUNCH.replace("        ", "    ") +
        "\n\ndef get_inputs():\n    return [torch.randn(4, 4)]\n\ndef get_init_inputs():\n    return []\n"
    ))
    assert rules(code) == set()


# ------------------------------------------------------------------ library calls


@pytest.mark.parametrize("expr", ["torch.softmax(x, dim=-1)", "F.softmax(x, -1)", "x.softmax(-1)",
                                  "x @ x.T", "x.exp() / x.exp().sum(-1, keepdim=True)", "x * 2"])
def test_library_math_in_forward_fires(expr: str) -> None:
    code = "import torch.nn.functional as F\n" + with_forward(f"        return {expr}")
    assert "library_call" in rules(code)


def test_nn_module_call_fires_but_holding_weights_is_fine() -> None:
    init = "        super().__init__()\n        self.fc = nn.Linear(4, 4)\n"
    called = CLEAN.replace("        super().__init__()\n", init).replace(
        "        return out\n", "        return self.fc(out)\n")
    assert "library_call" in rules(called)
    held = CLEAN.replace("        super().__init__()\n", init).replace(
        "x.stride(0), BLOCK=BLOCK)", "x.stride(0), BLOCK=BLOCK)\n        w = self.fc.weight.contiguous()")
    assert rules(held) == set()


def test_allocation_views_and_shape_math_are_fine() -> None:
    body = ("        x = x.view(-1, x.shape[-1]).contiguous().to(torch.float32)\n"
            "        n = x.shape[0] * x.shape[1]\n        grid = (triton.cdiv(n, 1024),)\n" + LAUNCH)
    assert rules(with_forward(body)) == set()


# ------------------------------------------------------------------ hard-coded shapes


def test_challenge_dims_cover_rendered_shapes() -> None:
    dims = challenge_dims(FIXED)
    assert {64, 1000, 64000} <= dims


@pytest.mark.parametrize("body", [
    ("        out = torch.empty(64, 1000, device=x.device)\n"
     "        softmax_kernel[(64,)](x, out, 1000, 1000, BLOCK=1024)\n        return out"),
    ("        N = 1000\n        out = torch.empty_like(x)\n"
     "        softmax_kernel[(x.shape[0],)](x, out, N, x.stride(0), BLOCK=1024)\n        return out"),
    ("        out = torch.empty_like(x)\n"
     "        softmax_kernel[(triton.cdiv(64000, 1024),)](x, out, x.shape[1], x.stride(0), BLOCK=1024)\n"
     "        return out"),
    "        y = x.view(64, 1000)\n" + LAUNCH,
])
def test_hardcoded_shape_fires(body: str) -> None:
    assert "hardcoded_shape" in rules(with_forward(body), FIXED)


def test_block_constant_equal_to_a_dim_is_not_a_shape() -> None:
    # 1024 is a challenge dim here, but passed as the constexpr BLOCK: a block size, not a dim.
    shape_range = {"rows": (64, 64), "cols": (1024, 1024)}
    body = ("        out = torch.empty_like(x)\n        n_rows, n_cols = x.shape\n"
            "        softmax_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK=1024)\n        return out")
    assert rules(with_forward(body), shape_range) == set()
    grid = body.replace("(n_rows,)", "(triton.cdiv(x.numel(), 1024),)")
    assert rules(with_forward(grid), shape_range) == set()


def test_literal_that_is_no_challenge_dim_is_fine() -> None:
    body = "        y = x.view(-1, 7)\n" + LAUNCH
    assert rules(with_forward(body), FIXED) == set()
