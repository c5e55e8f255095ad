"""End to end: a kernel more accurate than the same-dtype Model passes (float64 reference).

bias_gelu's naive Model computes 0.5*h*(1+tanh(z)), which cancels for h in about
[-5.7, -3]; at a 1x1 shape the floored norm check then asks the catalogue kernel
(h/(1+exp(-2z)), more accurate) for an absolute error below 1e-9, which the fp32
Model itself misses. The problem below draws every trial's inputs from that range
(no input scaling), so without the float64 reference nearly every trial rejects it.
"""

from __future__ import annotations

import pytest

from services.verifier.core import Session
from tests.services.verifier.conftest import CPU_OPTIONS

_BAD_RANGE = '''
def get_inputs():
    x = -3.6 - 1.8 * torch.rand(rows, cols, device=KZ_DEVICE, dtype=KZ_DTYPE)
    bias = torch.zeros(cols, device=KZ_DEVICE, dtype=KZ_DTYPE)
    return [x, bias]


KZ_SHAPES = [{'rows': 1, 'cols': 1}, {'rows': 1, 'cols': 2}]
'''


def _problem() -> str:
    from kz_common.ops import cpu_test_range, render_problem

    src = render_problem("bias_gelu", "float32", cpu_test_range("bias_gelu"))
    start, end = src.index("def get_inputs():"), src.index("KZ_META = {")
    src = src[:start] + _BAD_RANGE.lstrip() + "\n\n" + src[end:]
    return src.replace("KZ_META = {", "KZ_META = {'scale_inputs': False, ", 1)


@pytest.mark.slow
def test_bias_gelu_reference_solution_passes_in_the_cancelling_range() -> None:
    from kz_common.kernels import reference_solution

    problem = _problem()
    session = Session(CPU_OPTIONS, warm_slots=0)
    try:
        with session.bundle(problem) as bundle:
            xs = [float(t[0].min()) for t in bundle.inputs] + [float(t[0].max())
                                                               for t in bundle.inputs]
            assert -5.4 <= min(xs) and max(xs) <= -3.6  # the inputs really are in the range
            # The float64 run refines the fp32 Model here: (nearly) every trial stores one.
            # (failed once in a loaded CI run, 4 of 6, never in isolation: say why if again)
            assert sum(h[0] is not None for h in bundle.hi_refs) >= len(bundle.refs) - 1, (
                bundle.meta.get("hi_ref_notes"), bundle.meta.get("hi_ref_s"),
                [(t.get("redraws"), t.get("scale_exp")) for t in bundle.meta["trials"]])
            assert not bundle.meta["non_discriminating_shapes"]  # zeros still fail the gate
        report = session.verify(problem, reference_solution("bias_gelu"))
    finally:
        session.close()
    assert report.passed, report.reasons
