"""Where the parent compares a candidate's outputs (CPU: the GPU path itself runs in test_gpu.py).

On a GPU host large outputs are compared on the GPU under the shared lock; small ones on the
host's CPU, taking no lock (each lock taken may wait for a timed phase)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch

from services.verifier import candidate
from services.verifier.options import VerifyOptions


class _CountingGates:
    def __init__(self) -> None:
        self.shared_taken = 0

    @contextmanager
    def shared(self) -> Iterator[None]:
        self.shared_taken += 1
        yield

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        yield


def _call(*outputs: object) -> dict[str, object]:
    return {"outputs": list(outputs), "inputs_after": None}


@pytest.mark.parametrize("device, n, expect, locks", [
    ("cuda", 1 << 20, "cpu", 0),  # 4 MiB of fp32: the CPU, no lock
    ("cuda", (1 << 20) + 1, "cuda", 1),  # just over: the GPU, under the shared lock
    ("cpu", 1 << 24, "cpu", 0),  # a CPU verifier compares everything on the CPU
])
def test_small_outputs_are_compared_on_the_cpu_without_the_gpu_lock(
        device: str, n: int, expect: str, locks: int) -> None:
    gates, steps = _CountingGates(), {}  # type: ignore[var-annotated]
    data = _call(torch.empty(n, dtype=torch.float32))
    with candidate._compare_device(VerifyOptions(device=device), gates, steps,  # type: ignore[arg-type]
                                   candidate._output_bytes(data)) as dev:
        assert dev == expect
    assert gates.shared_taken == locks and ("judge_lock_wait" in steps) == bool(locks)


def test_output_bytes_count_plain_tensors_only() -> None:
    class Sub(torch.Tensor):
        pass

    big = torch.empty(1 << 10, dtype=torch.float16)
    assert candidate._output_bytes(_call(big, big)) == 2 * 2048
    assert candidate._output_bytes(_call(big, big.as_subclass(Sub), 3)) == 2048
    assert candidate._output_bytes({"outputs": "junk"}) == 0
    assert candidate._output_bytes(None) == 0
