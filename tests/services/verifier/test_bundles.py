"""The session's reference-bundle cache: built once per problem, ahead of the workers, and
never evicted while a use announced by verify_many is still to come."""

from __future__ import annotations

import os
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from services.verifier import core
from services.verifier.core import Session
from services.verifier.exceptions import ProblemError
from services.verifier.prefetch import Plan, Progress, prefetch
from services.verifier.reference import ReferenceBundle
from tests.services.verifier.conftest import CPU_OPTIONS, SOLUTIONS


def _bundle(tmp: Path, name: str) -> ReferenceBundle:
    d = tmp / name
    d.mkdir()
    return ReferenceBundle(key=name, inputs_dir=d, meta={}, refs=[], hi_refs=[], inputs=[],
                           tolerances={}, isolation="none")


@pytest.fixture
def session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A real Session whose builds are recorded instead of run: this tests the cache policy
    (which bundle is built when, which one may be dropped), not the reference worker."""
    built: list[str] = []

    def build(self: Session, problem_src: str) -> ReferenceBundle:
        built.append(problem_src)
        return _bundle(tmp_path, f"b{len(built)}")

    monkeypatch.setattr(Session, "_build", build)
    s = Session(replace(CPU_OPTIONS, warm_slots=0, tmp_dir=str(tmp_path)), max_bundles=1)
    s.built = built  # type: ignore[attr-defined]
    yield s
    s.close()


def test_announced_bundles_survive_eviction_until_done(session: Any) -> None:
    session.expect(["A", "B"])
    a, b = session.ensure("A"), session.ensure("B")
    with session.bundle("C"):
        pass  # over max_bundles=1: only C (not announced) may go
    assert session.ensure("A") is a and session.ensure("B") is b
    assert session.built == ["A", "B", "C"]
    session.done_with("A")
    assert not a.inputs_dir.exists() and b.inputs_dir.exists()  # A done, B still to come
    session.done_with("B")
    assert session.ensure("B") is b and len(session.built) == 3  # within max_bundles: kept


def test_prefetch_builds_ahead_but_not_beyond_the_window(session: Any) -> None:
    ok = (SOLUTIONS / "add_ok.py").read_text()
    bad = "import os\n"  # fails the static check: no bundle, and no place in the window
    items = [("P0", ok), ("P1", bad), ("P2", ok), ("P3", ok), ("P4", ok)]
    session.expect(p for p, _ in items)
    progress = Progress()
    t = threading.Thread(target=prefetch,
                         args=(session, progress, Plan(items, session.options, 2)))
    t.start()
    progress.started(0)  # the window: two sandboxed items past item 0 (P2, P3)
    deadline = threading.Event()
    for _ in range(200):
        if session.built == ["P0", "P2", "P3"]:
            break
        deadline.wait(0.01)
    assert session.built == ["P0", "P2", "P3"]  # P1 skipped, P4 waits for item 2
    progress.started(2)
    for _ in range(200):
        if len(session.built) == 4:
            break
        deadline.wait(0.01)
    progress.stop()
    t.join(5)
    assert not t.is_alive() and session.built == ["P0", "P2", "P3", "P4"]


def test_builders_sharing_a_plan_build_at_once_and_each_problem_once(
        session: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ok = (SOLUTIONS / "add_ok.py").read_text()
    items = [(f"P{i % 5}", ok) for i in range(20)]  # 5 problems, each used 4 times
    built: list[str] = []
    together = threading.Barrier(3, timeout=10)  # the first 3 builds must overlap

    def build(self: Session, problem_src: str) -> ReferenceBundle:
        built.append(problem_src)
        if len(built) <= 3:
            together.wait()  # raises (and the build fails) if the builders run one by one
        return _bundle(tmp_path, f"c{len(built)}")

    monkeypatch.setattr(Session, "_build", build)
    session.expect(p for p, _ in items)
    progress, plan = Progress(), Plan(items, session.options, 2)
    progress.started(len(items))  # every item is inside the window at once
    threads = [threading.Thread(target=prefetch, args=(session, progress, plan))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert sorted(built) == ["P0", "P1", "P2", "P3", "P4"]
    assert not together.broken
    assert all(isinstance(session.ensure(f"P{i}"), ReferenceBundle) for i in range(5))


def test_progress_wait_returns_false_once_stopped() -> None:
    p = Progress()
    p.started(3)
    assert p.wait_for(1) and p.wait_for(3)
    p.stop()
    assert not p.wait_for(10)


def test_verify_many_still_returns_one_verdict_per_pair_in_order() -> None:
    assert core.verify_many([], CPU_OPTIONS, workers=2) == []


def test_reference_worker_is_started_before_its_problem_arrives() -> None:
    """A pre-started reference worker (torch imported while idle) builds the next bundle."""
    import time

    from tests.services.verifier.conftest import problem_src

    s = Session(replace(CPU_OPTIONS, warm_slots=1))
    try:
        s.ref_slots.fill()
        deadline = time.monotonic() + 120
        while not all(slot.process.warm for slot in s.ref_slots._idle):
            assert time.monotonic() < deadline, "the reference worker never warmed up"
            time.sleep(0.1)
        r = s.verify(problem_src("add"), (SOLUTIONS / "add_ok.py").read_text())
        assert r.passed, r.reasons
        assert r.details["reference_warm_start"] is True
        assert r.details["reference_steps_s"]["startup"] > 0
    finally:
        s.close()


def test_a_model_that_writes_its_inputs_leaves_the_drawn_ones_to_the_candidate() -> None:
    """The reference runs on copies: inputs saved for candidates (and the trivial gate, and
    the float64 run) are the drawn ones, not what an in-place Model left in them. Otherwise
    the candidate gets x + y as its x, and an honest add reads (x + y) + y."""
    from services.verifier.core import Session
    from tests.services.verifier.conftest import CPU_OPTIONS, PROBLEMS, SOLUTIONS

    problem = (PROBLEMS / "add.py").read_text().replace(
        "        return x + y", "        return x.add_(y)  # in place, on its own input")
    session = Session(CPU_OPTIONS)
    try:
        report = session.verify(problem, (SOLUTIONS / "add_ok.py").read_text())
    finally:
        session.close()
    assert report.passed, report.reasons


@pytest.fixture
def ref_build() -> Any:
    """reference.build of the add problem on the CPU, under a GPU lock; the
    work dirs are kept (keep_artifacts) and removed after the test."""
    import shutil

    from services.verifier import reference, sandbox
    from services.verifier import workspace as W
    from services.verifier.gpu_lock import GpuLock
    from tests.services.verifier.conftest import problem_src

    o = replace(CPU_OPTIONS, keep_artifacts=True)
    base = W.make_base(o.tmp_dir)  # not tmp_path: the sandbox uid cannot traverse it
    settled: list[ReferenceBundle] = []

    def build(timing: bool, gates: GpuLock | None = None) -> ReferenceBundle:
        return reference.build(problem_src("add"), o, base,
                               sandbox.choose_mode(o.isolation, o.device), timing=timing,
                               measure_peak=False, gates=gates or GpuLock(o.cache, 0.0),
                               on_settled=settled.append)

    build.settled, build.base = settled, base  # type: ignore[attr-defined]
    yield build
    shutil.rmtree(base, ignore_errors=True)


def test_a_bundle_comes_from_the_published_trials_and_settles_when_its_worker_ends(
        ref_build: Any) -> None:
    """The worker publishes its trials (under a GPU lock it says IDLE first and writes its
    files without holding it) and only then does its last step; the bundle settles once
    the worker is done."""
    b = ref_build(timing=False)
    b.settle(120)
    assert ref_build.settled == [b]
    # os.walk, not rglob: the worker's private cache dir may still be going away (its slot
    # closes after the bundle settles), and a dir gone mid-walk is skipped, not an error
    found = [f for _, _, files in os.walk(ref_build.base) for f in files
             if f == "published.json"]
    assert len(found) == 1
    assert b.refs and b.inputs and sorted(p.name for p in b.inputs_dir.iterdir())
    assert b.meta["steps_s"]["save"] >= 0 and "idle" in b.meta["phase_s"]


def test_a_problem_that_fails_after_publishing_fails_every_verdict_on_it(
        ref_build: Any) -> None:
    """Timing the baselines (here: on a CPU, so it fails) comes after the bundle was handed
    out; its failure still makes the problem unusable, for every verdict that waits."""
    b = ref_build(timing=True)
    assert b.refs  # handed out: the trials were fine
    with pytest.raises(ProblemError, match="problem failed to run"):
        b.settle(120)
    with pytest.raises(ProblemError):  # and again, for the next verdict
        b.settle(0)
    assert ref_build.settled == []


def test_a_verdict_waits_for_its_bundle_to_settle(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A candidate that passed on a bundle whose worker then failed is rejected, with the
    problem as the reason (misuse), as if the bundle had never been built."""
    from services.verifier import reference
    from tests.services.verifier.conftest import problem_src

    real = reference.build

    def failing_later(*args: Any, **kw: Any) -> ReferenceBundle:
        b = real(*args, **kw)
        b.pending()  # as if its worker were still timing the baselines
        threading.Timer(0.5, b.complete, args=(ProblemError("baselines failed"),)).start()
        return b

    monkeypatch.setattr(reference, "build", failing_later)
    s = Session(replace(CPU_OPTIONS, warm_slots=0))
    try:
        r = s.verify(problem_src("add"), (SOLUTIONS / "add_ok.py").read_text())
    finally:
        s.close()
    assert not r.passed and r.stage == "problem" and "baselines failed" in r.reasons[0]


def test_a_trial_copies_and_saves_its_tensors_without_the_gpu_lock(
        ref_build: Any, tmp_path: Path) -> None:
    """Each trial ends paused (KZ-PAUSE): its host copies and file writes hold no lock, and
    the next trial asks for it again (KZ-YIELD). So one shared step per trial, and none
    after the last: the worker publishes straight from its pause."""
    from services.verifier.gpu_lock import GpuLock

    class Counting(GpuLock):
        steps = 0

        def shared(self, kind: str | None = None) -> Any:
            Counting.steps += 1
            return super().shared(kind)

    b = ref_build(timing=False, gates=Counting(str(tmp_path), 0.0))
    b.settle(120)
    trials = len(b.meta["trials"])
    # the host lap is there (on the CPU it can round to 0.0 ms: tiny tensors)
    assert trials > 1 and b.refs and "trials_host" in b.meta["steps_s"]
    assert Counting.steps == trials  # SHARED, then a YIELD before each later trial
    # the longest shared step, with its parts: the host copies and the waits are outside it
    steps = b.meta["steps_s"]
    parts = {k[len("step_max_"):]: v for k, v in steps.items() if k.startswith("step_max_")}
    assert steps["step_max"] > 0 and set(parts) <= {"shape", "draw", "gate", "hi"}, steps
    assert "draw" in parts and sum(parts.values()) <= steps["step_max"] + 1e-3
