"""Every launch the reference solutions make at H200-scale shapes compiles for sm_90.

No GPU is needed: launches are recorded on meta tensors and built down to cubin with
the ptxas bundled in the Triton wheel (sm90.py), in worker subprocesses without
TRITON_INTERPRET (conftest.py). Also checks shared memory fits an H100/H200 block
and no config spills more than a few bytes of registers.
"""

from __future__ import annotations

import pytest

from tests.kz_common.kernels.cases import SUITES
from tests.kz_common.kernels.conftest import check_case

pytestmark = pytest.mark.slow  # ~60 s from a cold Triton cache, seconds when warm

SM90_CASES = sorted(SUITES["sm90"]())


@pytest.mark.parametrize("case_id", SM90_CASES)
def test_sm90_compile(case_id: str, sm90_results) -> None:  # type: ignore[no-untyped-def]
    check_case(sm90_results, case_id)
