"""Where the parent compares a candidate's outputs (CPU: the GPU path itself runs in test_gpu.py),
and how it judges them (judgement.py) and the holdout runs.

On a GPU host large outputs are compared on the GPU under the shared lock; small ones on the
host's CPU, taking no lock (each lock taken may wait for a timed phase)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from services.verifier import compare_device as C
from services.verifier import judgement
from services.verifier.numerics import Tol
from services.verifier.options import VerifyOptions
from services.verifier.reference import ReferenceBundle


class _CountingGates:
    def __init__(self) -> None:
        self.shared_taken = 0
        self.kinds: set[str | None] = set()

    @contextmanager
    def shared(self, kind: str | None = None) -> Iterator[None]:
        self.shared_taken += 1
        self.kinds.add(kind)
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
    with C.where(VerifyOptions(device=device), gates, steps, data) as (dev, _):  # type: ignore[arg-type]
        assert dev == expect
    assert gates.shared_taken == locks and ("judge_lock_wait" in steps) == bool(locks)
    assert gates.kinds == ({"compare"} if locks else set())  # counted apart from the harness


def test_output_bytes_count_plain_tensors_only() -> None:
    class Sub(torch.Tensor):
        pass

    big = torch.empty(1 << 10, dtype=torch.float16)
    assert C.output_bytes(_call(big, big)) == 2 * 2048
    assert C.output_bytes(_call(big, big.as_subclass(Sub), 3)) == 2048
    assert C.output_bytes({"outputs": "junk"}) == 0
    assert C.output_bytes(None) == 0


def test_staging_holds_its_budget_and_gives_it_back() -> None:
    """Page-locked copies for the GPU compare are made within one byte budget: a record
    that does not fit is compared from where it is; the budget comes back after use."""
    stager = C.Stager(budget=3 * 4096)
    two, junk = _call(torch.ones(1024), torch.ones(1024)), {"outputs": "junk"}
    with stager.stage([two, junk]) as staged:
        assert stager._left == 4096 and len(staged) == 2
        assert len(staged[0]) == 2 and staged[1] == []  # one entry per output, in order
        with stager.stage([two]) as over:  # 8 KiB more: over the budget
            assert over == [None] and stager._left == 4096
    assert stager._left == 3 * 4096


def test_a_staged_copy_is_compared_but_the_record_is_what_is_checked() -> None:
    """The page-locked copy only replaces the values the compare reads: the structural
    checks (here: an output that is its input's storage) still read the record's own
    tensor, and the compare reads the copy (a wrong copy fails an otherwise right call)."""
    bundle = _bundle_with_holdouts()
    x = bundle.inputs[0][0]
    right = x * 2
    o = judgement.Outcome()
    judgement._check_call(o, {"outputs": [x], "inputs_after": [x]}, 0, bundle, "call 0",
                          place=judgement.on_host(staged=[right.clone()]))  # the record fails
    assert o.failures and "output alias" in o.failures[0][1]
    o = judgement.Outcome()
    judgement._check_call(o, _call(right), 0, bundle, "call 0",
                          place=judgement.on_host(staged=[right + 1]))
    assert o.failures and o.failures[0][0] == "numerics"
    o = judgement.Outcome()
    judgement._check_call(o, _call(right), 0, bundle, "call 0",
                          place=judgement.on_host(staged=[right.clone()]))
    assert not o.failures


def test_only_the_compare_holds_the_place_the_host_checks_come_before_it() -> None:
    """A record's host-side checks (here: its inputs came back modified) are done before
    its place (on a GPU host: the shared GPU lock) is taken, and its compare's failure is
    named (here: a constant output, its input) after the place is left. A record with nothing
    left to compare (every output of the wrong shape) takes no place at all."""
    bundle = _bundle_with_holdouts()
    x = bundle.inputs[0][0]
    o, seen = judgement.Outcome(), []

    @contextmanager
    def place(data: object) -> Iterator[tuple[str, None]]:
        seen.append(list(o.failures))
        yield "cpu", None
        seen.append(list(o.failures))

    judgement._check_call(o, {"outputs": [x.clone()], "inputs_after": [x + 1]}, 0, bundle,
                          "call 0", expect_inputs=True, place=place)
    assert seen == [[("runtime", "call 0: inputs were modified (input mutation)")]] * 2
    assert o.failures[-1][0] == "numerics" and o.failures[-1][1].endswith("(constant output)")
    seen.clear()
    judgement._check_call(judgement.Outcome(), _call(torch.zeros(3)), 0, bundle, "call 0",
                          place=place)
    assert seen == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_staged_outputs_are_page_locked_copies() -> None:
    out = torch.randn(64, 33).t()  # not contiguous: the copy keeps the values
    with C.Stager(budget=1 << 20).stage([_call(out, 3)]) as staged:
        copy, none = staged[0]
        assert none is None and copy.is_pinned() and torch.equal(copy, out)


def _bundle_with_holdouts() -> ReferenceBundle:
    """Trial 0 is a correctness call; trials 1 and 2 are holdouts of the timed shape."""
    xs = [[torch.full((8,), float(k + 1))] for k in range(3)]
    meta = {"trials": [{"shape_index": 0, "trial": k, "scale_exp": 0, "holdout": k > 0}
                       for k in range(3)],
            "shapes": [{"overrides": {}}],
            "timing": {"trial_indices": [0], "holdout_indices": [1, 2]}}
    return ReferenceBundle(key="k", inputs_dir=Path("."), meta=meta,
                           refs=[[x[0] * 2] for x in xs], hi_refs=[[None] for _ in xs],
                           inputs=xs, tolerances={"float32": Tol(1e-4, 1e-4, 1e-4)},
                           isolation="none")


def _held(bundle: ReferenceBundle, wrong: int | None = None) -> list[dict[str, object]]:
    return [_call(bundle.refs[i][0] + (1.0 if k == wrong else 0.0))
            for k, i in enumerate(bundle.meta["timing"]["holdout_indices"])]


@pytest.mark.parametrize("holdout_ms, median, raised", [
    ([0.95, 1.01], 1.0, False),  # an honest kernel: single synced runs at or below b2b
    ([1.2, 1.3], 1.2 / 1.05, True),  # slower on new inputs: the time rises to theirs
    ([1.45, 1.5], 1.45 / 1.05, True),  # under the rejection line: raised, not rejected
])
def test_holdout_runs_bound_the_reported_time_from_below(
        holdout_ms: list[float], median: float, raised: bool) -> None:
    bundle, o = _bundle_with_holdouts(), judgement.Outcome()
    o.timing = {"median_ms": 1.0}
    judgement._check_holdouts(o, _held(bundle), {"timing": {"holdout_ms": holdout_ms}},
                              bundle)
    assert not o.failures and o.timing["median_ms"] == pytest.approx(median)
    assert o.timing.get("holdout_raised", False) == raised


def test_a_cache_by_input_contents_is_rejected_by_its_holdout_runs() -> None:
    bundle, o = _bundle_with_holdouts(), judgement.Outcome()
    o.timing = {"median_ms": 0.45}  # the timed runs, served from a cache (H200: 2.2-3.9x)
    judgement._check_holdouts(o, _held(bundle), {"timing": {"holdout_ms": [1.0, 1.02]}},
                              bundle)
    assert o.failures and o.failures[0][0] == "timing"
    assert "outputs cached by input contents" in o.failures[0][1]


@pytest.mark.parametrize("report, held_wrong, expect", [
    ({"timing": {"holdout_ms": [1.0, 1.0]}}, 1, "holdout run 1"),  # a wrong output
    ({"timing": {"holdout_ms": [1.0]}}, None, "no valid time for the holdout runs"),
    ({"timing": {}}, None, "no valid time for the holdout runs"),
    ({"timing": {"holdout_ms": [1.0, float("nan")]}}, None, "no valid time"),
])
def test_holdout_runs_must_be_timed_and_correct(report: dict[str, object],
                                                held_wrong: int | None, expect: str) -> None:
    bundle, o = _bundle_with_holdouts(), judgement.Outcome()
    o.timing = {"median_ms": 1.0}
    judgement._check_holdouts(o, _held(bundle, held_wrong), report, bundle)
    assert o.failures and o.failures[0][0] == "timing" and expect in o.failures[0][1]


def test_the_holdout_ratio_travels_in_the_verdict() -> None:
    from kz_common.ops import cpu_test_range, render_problem
    from schemas.events import ChallengeContext, ChallengeCreated, Target
    from services.verifier.report import Timings, VerifyReport

    challenge = ChallengeCreated(
        challenge_id="c1", op="add", family="elementwise", dtype="float32",
        shape_range=cpu_test_range("add"), target=Target(kind="naive_multiple", value=1.0),
        difficulty=0, generator="programmatic", round=0,
        problem_source=render_problem("add", "float32", cpu_test_range("add")))
    rep = VerifyReport(passed=True, stage="passed", reasons=[], device="cuda",
                       perf_measured=True, timings=Timings(1.2, 2.0, 1.5, 0.03, 1.3))
    payload = rep.to_payload("c1", "h", context=ChallengeContext.of(challenge))
    assert payload.timing.holdout_ratio == 1.3 and payload.timing.candidate_ms == 1.2


def test_the_parents_cuda_warm_up_runs_under_the_shared_lock() -> None:
    """The parent's CUDA context and compare kernels are made early, under the shared
    lock like any compare (no GPU work of the parent may overlap a timed phase); a host
    where that fails (this one, without a GPU) only leaves it to the first real compare."""
    gates = _CountingGates()
    C.warm(gates).join(60)  # type: ignore[arg-type]
    assert gates.shared_taken == 1 and gates.kinds == {"compare"}
    if torch.cuda.is_available():
        assert torch.cuda.is_initialized()
