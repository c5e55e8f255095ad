"""Fixtures for running the reference kernels under the Triton CPU interpreter."""

from __future__ import annotations

import types
from collections.abc import Callable

import pytest

from kz_common.kernels import reference_solution
from tests.kz_common.helpers import load_problem


@pytest.fixture
def load_solution(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], types.ModuleType]:
    """exec() a reference solution with TRITON_INTERPRET=1 set while its @triton.jit decorators run.

    triton.jit picks the interpreter at decoration time, so the variable only needs to be
    set while the source executes; it is restored after the test.
    """

    def _load(op: str) -> types.ModuleType:
        monkeypatch.setenv("TRITON_INTERPRET", "1")
        module = load_problem(reference_solution(op), name=f"kz_solution_{op}")
        kernels = [v for v in vars(module).values() if type(v).__name__ == "InterpretedFunction"]
        assert kernels, f"{op}: no kernel was built by the Triton interpreter"
        return module

    return _load
