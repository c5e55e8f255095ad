"""Pre-started sandbox slots and the cache copies between them and the shared cache."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from services.verifier import candidate, core, pool, reference, sandbox
from services.verifier import workspace as W
from services.verifier.core import verify_many
from services.verifier.pool import SlotPool
from tests.services.verifier.conftest import CPU_OPTIONS, SOLUTIONS, problem_src


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_copy_tree_copies_files_but_never_symlinks(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    (src / "a" / "k.bin").write_bytes(b"kernel")
    (tmp_path / "secret").write_text("root only")
    (src / "a" / "leak").symlink_to(tmp_path / "secret")
    (src / "dirlink").symlink_to(tmp_path)
    W.copy_tree(src, tmp_path / "dst")
    assert _tree(tmp_path / "dst") == {"a/k.bin": b"kernel"}


def test_copy_tree_skips_stub_files_and_respects_the_budget(tmp_path: Path) -> None:
    src, stubs = tmp_path / "src", tmp_path / "stubs"
    for d in (src / "t", stubs / "t"):
        d.mkdir(parents=True)
    (src / "t" / "cuda_utils.so").write_bytes(b"stub")
    (stubs / "t" / "cuda_utils.so").write_bytes(b"stub")
    (src / "t" / "mine.cubin").write_bytes(b"x" * 10)
    W.copy_tree(src, tmp_path / "dst", skip=stubs)
    assert _tree(tmp_path / "dst") == {"t/mine.cubin": b"x" * 10}
    W.copy_tree(src, tmp_path / "small", budget=5)  # over budget: nothing that big is copied
    assert not any(p.stat().st_size > 5 for p in (tmp_path / "small").rglob("*") if p.is_file())


def test_a_dead_slot_is_never_handed_out(tmp_path: Path) -> None:
    options = replace(CPU_OPTIONS, cache_dir=str(tmp_path / "cache"))
    mode = sandbox.choose_mode("auto", "cpu")
    base = W.make_base("")
    pool = SlotPool(options, mode, base, size=1)
    try:
        pool.fill()
        victim = pool._idle[0]
        os.killpg(victim.process.proc.pid, signal.SIGKILL)  # e.g. the host's OOM killer
        victim.process.proc.wait()
        slot = pool.take()
        assert slot is not victim and slot.process.alive
        assert not victim.root.exists()  # the dead slot's dirs were removed
        slot.close()
    finally:
        pool.close()
        W.shutil.rmtree(base, ignore_errors=True)


def _pool(tmp_path: Path, size: int, demand: int | None = None) -> tuple[SlotPool, Path]:
    """A CPU pool with its own cache and base dir, its slots started."""
    options = replace(CPU_OPTIONS, cache_dir=str(tmp_path / "cache"))
    base = W.make_base("")
    slots = SlotPool(options, sandbox.choose_mode("auto", "cpu"), base, size, demand)
    slots.fill()
    return slots, base


def test_a_pool_short_of_device_room_starts_none_ahead_and_sheds_its_idle(
        tmp_path: Path) -> None:
    """`may_start` (the device's room) gates the starts ahead of demand, not a take; shed
    closes the idle slots, and they no longer count against the demand."""
    room = [False]
    options = replace(CPU_OPTIONS, cache_dir=str(tmp_path / "cache"))
    base = W.make_base("")
    slots = SlotPool(options, sandbox.choose_mode("auto", "cpu"), base, 2, demand=3,
                     may_start=lambda: room[0])
    try:
        slots.fill()
        assert not slots._idle
        taken = slots.take()  # a candidate gets its slot regardless
        assert taken.process.alive and not slots._idle
        taken.close()
        room[0] = True
        slots.fill()
        idle = list(slots._idle)
        assert len(idle) == 2
        assert slots.shed() == 2 and not slots._idle
        assert not any(x.process.alive for x in idle) and not any(x.root.exists() for x in idle)
        slots.fill()  # demand 3: one taken, the two shed start again
        assert len(slots._idle) == 2
    finally:
        slots.close()
        W.shutil.rmtree(base, ignore_errors=True)


def _warm_pool(tmp_path: Path, size: int) -> tuple[SlotPool, Path]:
    slots, base = _pool(tmp_path, size)
    deadline = time.monotonic() + 120
    while not all(s.process.warm for s in slots._idle) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(s.process.warm for s in slots._idle)
    return slots, base


def _plant(slot: pool.Slot) -> None:
    """What a start-up build leaves (on the CPU the interpreter builds nothing)."""
    (slot.cache / "ab12").mkdir()
    (slot.cache / "ab12" / "launcher.so").write_bytes(b"trusted")


def test_a_waiting_warm_slot_gives_the_stubs_when_another_is_taken(tmp_path: Path) -> None:
    slots, base = _warm_pool(tmp_path, size=2)
    try:
        young, ready = slots._idle
        young.process.ctrl.warm.clear()  # as if still starting: taken cold, never harvested
        _plant(ready)
        taken = slots.take()
        assert taken is young
        assert (slots.stubs / "ab12" / "launcher.so").read_bytes() == b"trusted"
        taken.close()
    finally:
        slots.close()
        W.shutil.rmtree(base, ignore_errors=True)


def test_a_closing_pool_keeps_the_stubs_of_a_warm_slot(tmp_path: Path) -> None:
    """A session that ended before any slot was handed out warm still leaves the stubs
    (the benchmark's prime, a short CLI batch): the next session's slots copy them."""
    slots, base = _warm_pool(tmp_path, size=1)
    try:
        _plant(slots._idle[0])
        assert not slots.stubs.exists()
    finally:
        slots.close()
        W.shutil.rmtree(base, ignore_errors=True)
    assert (slots.stubs / "ab12" / "launcher.so").read_bytes() == b"trusted"


def test_a_slot_taken_cold_gives_the_stubs_once_warm_before_its_job(tmp_path: Path) -> None:
    """Every slot taken before its start-up ended (a batch no bigger than its workers)
    still leaves the stubs: the first taker waits for its slot's start-up, before the load."""
    slots, base = _pool(tmp_path, size=1, demand=1)
    try:
        cold = slots._idle[0]
        assert not cold.process.warm  # importing torch takes seconds
        _plant(cold)
        taken = slots.take()
        assert taken is cold and taken.process.warm
        assert (slots.stubs / "ab12" / "launcher.so").read_bytes() == b"trusted"
        taken.close()
    finally:
        slots.close()
        W.shutil.rmtree(base, ignore_errors=True)


def test_verifies_with_a_cache_dir_the_sandbox_uid_cannot_reach(tmp_path: Path) -> None:
    """The shared cache may live in a root-only dir: sandboxes get private copies."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    options = replace(CPU_OPTIONS, cache_dir=str(private / "cache"))
    src = (SOLUTIONS / "add_ok.py").read_text()
    reports = verify_many([(problem_src("add"), src)] * 2, options, workers=2)
    assert all(r.passed for r in reports), [r.reasons for r in reports]
    assert oct(private.stat().st_mode & 0o777) == "0o700"  # nothing widened the caller's dir


def test_a_batch_whose_sandboxes_start_unpaused_leaves_none_unpaused(tmp_path: Path) -> None:
    """VerifyOptions.pause_starting False, through the pool (candidate slots and reference
    workers): verdicts as usual, and once the batch is over no sandbox is left out of the
    others a timed phase stops (their keys leave UNPAUSED at the job or the discard)."""
    from services.verifier.quiet import UNPAUSED

    options = replace(CPU_OPTIONS, cache_dir=str(tmp_path / "cache"), pause_starting=False)
    src = (SOLUTIONS / "add_ok.py").read_text()
    items = [(problem_src("add"), f"{src}\n# candidate {k}\n") for k in range(3)]
    reports = verify_many(items, options, workers=2)
    assert all(r.passed for r in reports), [r.reasons for r in reports]
    assert not UNPAUSED.keys()


@pytest.mark.parametrize("early", [False, True], ids=["permit_at_exit", "permit_at_done"])
def test_a_batch_starts_the_next_sandbox_while_it_judges_the_last(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, early: bool) -> None:
    """One worker, one judge: the first candidate's judgement waits until the second
    candidate's sandbox has started (on the code before, it would wait in vain: its worker
    held the only place until its verdict), and no two sandboxes ever run at once. (On the
    CPU no phase is timed, so `permit_at_done` keeps each place to the sandbox's exit.)"""
    options = replace(CPU_OPTIONS, cache_dir=str(tmp_path / "cache"), judges=1,
                      permit_at_done=early)
    entered, second = [], threading.Event()
    real_sandboxed, real_judge = candidate._sandboxed, candidate.judge

    def sandboxed(*args: object, **kwargs: object) -> object:
        entered.append(True)
        if len(entered) == 2:
            second.set()
        return real_sandboxed(*args, **kwargs)  # type: ignore[arg-type]

    overlapped: list[bool] = []

    def judge(*args: object, **kwargs: object) -> object:
        if not overlapped:  # the first judgement: the next sandbox must start meanwhile
            overlapped.append(second.wait(60))
        return real_judge(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(candidate, "_sandboxed", sandboxed)
    monkeypatch.setattr(candidate, "judge", judge)
    src = (SOLUTIONS / "add_ok.py").read_text()
    items = [(problem_src("add"), f"{src}\n# candidate {k}\n") for k in range(2)]
    session = core.batch_session(items, options, workers=1)
    try:
        told: list[tuple[int, object]] = []
        reports = core.verify_batch(session, items, workers=1,
                                    on_report=lambda i, r: told.append((i, r)))
    finally:
        session.close()
    assert all(r.passed for r in reports), [r.reasons for r in reports]
    assert sorted(told, key=lambda t: t[0]) == list(enumerate(reports))  # each, as it came
    assert overlapped == [True]
    (a0, a1), (b0, b1) = sorted(r.details["sandbox_batch_s"] for r in reports)
    assert a0 <= a1 <= b0 <= b1  # one worker: the sandboxes' runs one after the other
    assert all(r.details["steps_s"]["run_wait"] >= 0 for r in reports)


def test_a_model_whose_constructor_launches_a_kernel_is_built_again_under_the_lock(
        tmp_path: Path) -> None:
    """The first build runs before any GPU lock, with kernels compiled but not launched
    (kz_trace's compile_only): the constructor's fill is held back, and the harness
    builds the model again once its shared lock is granted (its `rebuild` step). On the
    code before, the fill ran in the lock-free build and there was no such step."""
    options = replace(CPU_OPTIONS, cache_dir=str(tmp_path / "cache"))
    src = (SOLUTIONS / "add_ctor_kernel_ok.py").read_text()
    r = verify_many([(problem_src("add"), src)], options, workers=1)[0]
    assert r.passed, r.reasons
    assert "rebuild" in r.details["harness_steps_s"], r.details["harness_steps_s"]
    plain = verify_many([(problem_src("add"), (SOLUTIONS / "add_ok.py").read_text())],
                        options, workers=1)[0]
    assert plain.passed and "rebuild" not in plain.details["harness_steps_s"]


def test_judges_default_to_half_the_workers() -> None:
    assert [core.judges_for(CPU_OPTIONS, w) for w in (1, 2, 12, 13)] == [1, 1, 6, 7]
    assert core.judges_for(replace(CPU_OPTIONS, judges=0), 12) == 0
    with pytest.raises(ValueError, match="judges"):
        replace(CPU_OPTIONS, judges=-2)


def test_a_permit_given_back_early_frees_its_place_once() -> None:
    """`permit_at_done`: the place goes at the end of the timed runs; leaving the sandbox's
    block later must not give it back a second time (a bounded semaphore would raise, a
    plain one would let one sandbox too many run)."""
    permits, into = threading.BoundedSemaphore(1), []  # type: ignore[var-annotated]
    with core.Permit(permits, 0.0, into) as permit:
        assert not permits.acquire(blocking=False)  # held
        permit.give_back()
        assert permits.acquire(blocking=False)  # free for the next candidate's sandbox
    permits.release()
    assert len(into) == 2  # got, given back: the benchmark's sandbox_batch_s
    with core.Permit(permits, 0.0, []):
        assert not permits.acquire(blocking=False)
    assert permits.acquire(blocking=False)  # given back at the block's end


def test_a_slot_gets_its_holdouts_only_through_the_handle(tmp_path: Path) -> None:
    """Slot.load leaves the holdout files out of the sandbox's inputs dir; the handle
    links them in (for the harness's request) and takes them away again (at READY)."""
    options = replace(CPU_OPTIONS, cache_dir=str(tmp_path / "cache"))
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    for name in ("trial_0.pt", "holdout_0.pt", "holdout_1.pt"):
        (bundle / name).write_bytes(name.encode())
    base = W.make_base("")
    pool = SlotPool(options, sandbox.choose_mode("auto", "cpu"), base, size=0)
    try:
        slot = pool.take()
        held = slot.load("# solution", bundle, tmp_path / "no-cache",
                         withhold=["holdout_0.pt", "holdout_1.pt"])
        assert sorted(os.listdir(slot.inputs)) == ["trial_0.pt"]
        held.give()
        assert sorted(os.listdir(slot.inputs)) == ["holdout_0.pt", "holdout_1.pt", "trial_0.pt"]
        assert (slot.inputs / "holdout_1.pt").read_bytes() == b"holdout_1.pt"
        held.take()
        assert sorted(os.listdir(slot.inputs)) == ["trial_0.pt"]
        assert sorted(os.listdir(bundle)) == ["holdout_0.pt", "holdout_1.pt", "trial_0.pt"]
        slot.close()
    finally:
        pool.close()
        W.shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("files", [pool.HARNESS_FILES, reference.WORKER_FILES],
                         ids=["harness", "reference worker"])
def test_sandbox_modules_import_by_their_sandbox_names_alone(files: dict[str, str],
                                                             tmp_path: Path) -> None:
    """What a sandbox gets: these files under their sandbox names, no repo. Each module
    (but the entry script, which runs on import) must import from them alone, not from
    the repo (installed here, so a fallback to it would pass unseen; on the CPU the
    harness never imports kz_timing)."""
    W.populate(tmp_path, {name: W.PKG / src for name, src in files.items()})
    mods = [n[:-3] for n in files if n.startswith("kz_")]
    code = (f"import sys; sys.path.insert(0, {str(tmp_path)!r}); "
            f"import {', '.join(mods)}; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('services', 'kz_common')]; "
            "assert not bad, bad")
    res = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]


# A slot's harness: 0.5 s of trusted start-up, then WARM, then its job; its last word
# SAVED comes 0.4 s before its end (as a CUDA context's teardown would take)
WARMING_CHILD = r"""
import os, sys, time
ctrl = os.fdopen(int(sys.stdin.readline()), "w", buffering=1)
time.sleep(0.5)
ctrl.write("KZ-WARM\n")
sys.stdin.readline()
ctrl.write("KZ-SAVED\n")
time.sleep(0.4)
"""


@pytest.mark.parametrize("job_after_s", [1.2, 0.0], ids=["warm", "cold"])
def test_the_slot_clock_reads_its_age_and_its_start_up(base: Path, job_after_s: float) -> None:
    """The parent's own clock of a pre-started sandbox (never the child's word): its age
    when the job came and its start-up to WARM, so a batch can tell slots taken too young
    (cold starts) from slow start-ups; and its exit from its last word on (`exit_dying`)."""
    from tests.services.verifier.gated_child import gated_process

    proc, gates = gated_process(base, WARMING_CHILD)
    time.sleep(job_after_s)
    res = proc.finish(b"{}\n", gates)
    assert not res.timed_out and res.returncode == 0, res.describe()
    age, startup = res.phase_s["slot_age"], res.phase_s["slot_startup"]
    assert res.warm_start is (job_after_s > 0)
    assert job_after_s <= age < job_after_s + 0.4, res.phase_s
    assert 0.5 <= startup < 2.0, res.phase_s
    assert 0.4 <= res.phase_s["exit_dying"] < 1.0, res.phase_s
