"""Reference Triton kernels match the optimised baselines under TRITON_INTERPRET=1.

The checks live in cases.py and run in worker subprocesses (see conftest.py);
each case is reported here as its own test.
"""

from __future__ import annotations

import pytest

from kz_common.kernels import available_ops, reference_solution
from kz_common.ops import UnknownOpError, op_names
from tests.kz_common.kernels.cases import SUITES
from tests.kz_common.kernels.conftest import check_case

INTERP_CASES = sorted(SUITES["interp"]())


def test_every_catalogue_op_has_a_reference_solution() -> None:
    assert set(available_ops()) == set(op_names())
    for op in available_ops():
        assert "class ModelNew(nn.Module)" in reference_solution(op)
    with pytest.raises(UnknownOpError):
        reference_solution("nope")


def test_cases_cover_every_op_and_dtype() -> None:
    for op in op_names():
        for dt in ("float32", "float16", "bfloat16"):
            assert f"baseline[{op}-{dt}]" in INTERP_CASES


@pytest.mark.parametrize("case_id", INTERP_CASES)
def test_interpreter(case_id: str, interp_results) -> None:  # type: ignore[no-untyped-def]
    check_case(interp_results, case_id)
