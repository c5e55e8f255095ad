"""The GPU lock's phases as a sandboxed child walks them: shared, paused, idle, holdouts,
timed, done."""

from __future__ import annotations

import os
import time
from pathlib import Path

from services.verifier import sandbox
from tests.services.verifier.gated_child import GATED_CHILD, gated_process

YIELDING_CHILD = GATED_CHILD + r"""
gate("KZ-SHARED")
for trial in range(4):
    time.sleep(0.4)  # a reference trial's GPU work, under the shared lock
    gate("KZ-YIELD")
gate("KZ-READY")
ctrl.write("KZ-DONE\n")
"""


def test_a_yielding_shared_phase_lets_a_waiting_timed_phase_in(base: Path) -> None:
    """The reference worker yields the shared lock between trials: a timed phase that
    asks meanwhile runs after the current trial, not after the whole build (1.6 s)."""
    import threading

    proc, gates = gated_process(base, YIELDING_CHILD)
    got: list[float] = []
    res: list[sandbox.RunResult] = []
    t0 = time.monotonic()
    child = threading.Thread(target=lambda: res.append(proc.finish(b"{}\n", gates)))
    child.start()
    time.sleep(0.2)  # the child holds the shared lock, inside its first trial
    with gates.exclusive():
        got.append(time.monotonic() - t0)
    child.join(30)
    assert res and res[0].ready_seen and not res[0].timed_out, res and res[0].describe()
    assert got[0] < 1.2, f"the timed phase waited {got[0]:.2f} s: for every trial"
    assert res[0].wall_s > 1.6  # the child's trials all ran (and the lock came back)


PAUSING_CHILD = GATED_CHILD + r"""
gate("KZ-SHARED")
time.sleep(0.2)  # a trial's GPU work, under the shared lock
ctrl.write("KZ-PAUSE\n")
time.sleep(1.0)  # its host copies and file writes, without the lock
gate("KZ-YIELD")  # the next trial's GPU work: the lock again
time.sleep(0.2)
ctrl.write("KZ-PAUSE\n")
ctrl.write("KZ-IDLE\n")  # ends the shared phase while paused (the worker publishes)
time.sleep(0.2)
gate("KZ-READY")
ctrl.write("KZ-DONE\n")
"""


def test_a_paused_child_holds_no_lock_until_it_yields(base: Path) -> None:
    """PAUSE lets the shared lock go inside a shared phase: a timed phase that asks while
    the child copies and writes runs at once; the child gets the lock back with YIELD and
    may end its shared phase while paused."""
    res, waited = _timed_phase_meanwhile(base, PAUSING_CHILD, 0.6)  # paused after 0.2 s
    assert waited < 0.3, f"the timed phase waited {waited:.2f} s for a paused child"
    assert res.phase_s["shared"] > 1.2 and "exclusive" in res.phase_s


def _timed_phase_meanwhile(base: Path, src: str, after_s: float) -> tuple[sandbox.RunResult,
                                                                         float]:
    """Run the gated child `src`; `after_s` into it, a timed phase of another candidate
    asks for the lock. The child's result (it must have had its own timed phase) and how
    long that other timed phase waited."""
    import threading

    proc, gates = gated_process(base, src)
    res: list[sandbox.RunResult] = []
    child = threading.Thread(target=lambda: res.append(proc.finish(b"{}\n", gates)))
    child.start()
    time.sleep(after_s)
    t0 = time.monotonic()
    with gates.exclusive():
        waited = time.monotonic() - t0
    child.join(30)
    assert res and res[0].ready_seen and not res[0].timed_out, res and res[0].describe()
    return res[0], waited


IDLE_CHILD = GATED_CHILD + r"""
gate("KZ-SHARED")
time.sleep(0.2)  # the correctness calls, under the shared lock
ctrl.write("KZ-IDLE\n")
time.sleep(1.5)  # reading the timed inputs (the reference worker: writing its files)
gate("KZ-READY")
ctrl.write("KZ-DONE\n")
"""


def test_an_idle_child_holds_no_lock_until_it_asks_for_its_timed_phase(base: Path) -> None:
    """IDLE ends the shared phase early: a timed phase that asks while the child reads its
    inputs runs at once, not after them; the child's own timed phase still comes."""
    res, waited = _timed_phase_meanwhile(base, IDLE_CHILD, 0.8)  # idle after 0.2 s
    assert waited < 0.3, f"the timed phase waited {waited:.2f} s for an idle child"
    assert res.phase_s["idle"] > 1.0 and "exclusive" in res.phase_s


# The harness's way with its holdouts: it asks for them after IDLE and reads them before
# READY; it reports what its inputs dir holds at each step.
HOLDOUT_CHILD = GATED_CHILD + r"""
def seen(step, *extra):
    names = sorted(os.listdir(os.path.join(os.getcwd(), "..", "inputs")))
    print(step, names, *extra, flush=True)
seen("calls")
gate("KZ-SHARED")
seen("shared")
ctrl.write("KZ-IDLE\n")
seen("idle")
gate("KZ-HOLDOUTS")
with open(os.path.join(os.getcwd(), "..", "inputs", "holdout_0.pt")) as f:
    seen("asked", f.read())
gate("KZ-READY")
seen("timed")
ctrl.write("KZ-DONE\n")
"""


def test_holdouts_are_seen_only_between_the_request_and_ready(base: Path) -> None:
    """A candidate could precompute holdout outputs in its untimed calls if it could read
    their files: they are linked in at the harness's request (after IDLE: only harness code
    runs) and gone before GO for the timed runs."""
    from services.verifier.pool import Withheld

    bundle = base / "bundle"
    bundle.mkdir()
    (bundle / "holdout_0.pt").write_text("new-inputs")
    proc, gates = gated_process(base, HOLDOUT_CHILD)
    res = proc.finish(b"{}\n", gates, Withheld((bundle / "holdout_0.pt",), base / "inputs"))
    assert not res.timed_out and res.returncode == 0, res.describe()
    assert res.stdout_tail.splitlines() == [
        "calls []", "shared []", "idle []", "asked ['holdout_0.pt'] new-inputs", "timed []"]
    # the timed phase's laps: its lock, stopping the other sandboxes, the runs, resuming
    assert {"idle", "exclusive_wait", "exclusive_pause", "exclusive",
            "exclusive_resume"} <= set(res.phase_s)


def test_a_child_that_never_asks_gets_no_holdouts(base: Path) -> None:
    """The reference worker (and a harness without holdouts) goes from IDLE to READY."""
    from services.verifier.pool import Withheld

    (base / "bundle").mkdir()
    (base / "bundle" / "holdout_0.pt").write_text("new-inputs")
    proc, gates = gated_process(base, IDLE_CHILD)
    res = proc.finish(b"{}\n", gates, Withheld((base / "bundle" / "holdout_0.pt",),
                                               base / "inputs"))
    assert not res.timed_out and res.ready_seen, res.describe()
    assert not os.listdir(base / "inputs")


# The harness after its timed runs: DONE, then its outputs written before it exits.
WRITING_CHILD = GATED_CHILD + r"""
gate("KZ-SHARED")
ctrl.write("KZ-IDLE\n")
gate("KZ-READY")
ctrl.write("KZ-DONE\n")
time.sleep(1.0)  # writing its outputs, no lock held
"""


def test_after_timed_comes_at_done_not_at_exit(base: Path) -> None:
    """`after_timed` (how a batch gives a sandbox's place back early, `permit_at_done`) is
    called when the timed phase ends, while the child still writes its outputs."""
    proc, gates = gated_process(base, WRITING_CHILD)
    t0 = time.monotonic()
    called: list[float] = []
    res = proc.finish(b"{}\n", gates, after_timed=lambda: called.append(time.monotonic() - t0))
    assert not res.timed_out and res.returncode == 0, res.describe()
    assert len(called) == 1 and called[0] < res.wall_s - 0.7, (called, res.wall_s)


def test_after_timed_is_not_called_without_a_timed_phase(base: Path) -> None:
    """DONE in the shared phase (the harness on a failed call): no timed phase ended."""
    src = GATED_CHILD + 'gate("KZ-SHARED")\nctrl.write("KZ-DONE\\n")\n'
    proc, gates = gated_process(base, src)
    called: list[int] = []
    res = proc.finish(b"{}\n", gates, after_timed=lambda: called.append(1))
    assert not res.timed_out and not res.ready_seen, res.describe()
    assert not called
