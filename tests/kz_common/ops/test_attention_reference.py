"""The attention problem's stated reference (Model) is accurate at every input scale the
verifier draws (inputs times 2^-2 .. 2^2, services/verifier/reference_worker.py).

At 2^2 the logits are ~16x those of randn inputs (std ~16, row max ~50). A Model that
rounds them to fp16/bf16 is off the exact result by more than the tolerance (and by more
than the band in which the float64 reference may stand in for it), so an accurate kernel
was rejected. The verifier judges against Model; Model must therefore be within the
tolerance of its own float64 run, and agree with the optimised baseline, at every scale.
"""

from __future__ import annotations

import pytest
import torch

from kz_common.ops import cpu_test_range, render_problem
from tests.kz_common.helpers import check_model_at_scales, load_problem

# The CPU-range corners plus the shapes where an fp16-softmax Model misses most often.
_SHAPES = [{"batch_heads": 1, "seq": 1, "head_dim": 8}, {"batch_heads": 3, "seq": 80, "head_dim": 48},
           {"batch_heads": 2, "seq": 64, "head_dim": 40}, {"batch_heads": 1, "seq": 64, "head_dim": 32}]
_SCALES = (-2, -1, 0, 1, 2)
_SEEDS = range(4)


def _problem(dtype: str):  # type: ignore[no-untyped-def]
    return load_problem(render_problem("attention", dtype, cpu_test_range("attention"),
                                       shapes=_SHAPES))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_model_matches_float64_and_baseline_at_every_verifier_scale(dtype: str) -> None:
    check_model_at_scales(_problem(dtype), "attention", _SHAPES, _SCALES, _SEEDS,
                          f"attention/{dtype}")


def test_float64_model_stays_float64() -> None:
    """The verifier's float64 reference runs this Model in float64: no fp32 step inside."""
    prob = _problem("float16")
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 37, 24, dtype=torch.float64) * 4 for _ in range(3))
    s = torch.softmax(q @ k.transpose(-2, -1) / 24 ** 0.5, dim=-1) @ v
    out = prob.Model()(q, k, v)
    assert out.dtype == torch.float64
    assert float((out - s).abs().max()) < 1e-12
