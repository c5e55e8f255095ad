"""Isolation of every sandbox mode this host offers, probed with small hostile scripts."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from services.verifier import sandbox
from services.verifier import sandbox_mounts as M
from services.verifier.gpu_lock import GpuLock

MODES = sandbox.available_modes("cpu")
UID_MODES = [m for m in MODES if m.endswith("uid") or m == "uid+rlimits"]
NS_MODES = [m for m in MODES if m.startswith(("bwrap", "unshare"))]
REPO = Path(__file__).resolve().parents[3]


def run(mode: str, base: Path, code: str, **limits: float) -> sandbox.RunResult:
    view = M.View(str(base / "work"), str(base / "inputs"), str(base / "cache"), "cpu")
    lim = sandbox.Limits(wall_s=limits.get("wall_s", 60), cpu_s=int(limits.get("cpu_s", 60)),
                         memory_bytes=int(limits.get("memory", 4 << 30)),
                         nproc=int(limits.get("nproc", 64)),
                         fsize_bytes=int(limits.get("fsize", 16 << 20)))
    argv = [sys.executable, "-I", "-c", code]
    return sandbox.run(mode, view, argv, {"KZ_TEST": "1"}, lim, b"", base)


def probe(mode: str, base: Path, code: str, **limits: float) -> dict:
    res = run(mode, base, code + "\nimport json; print('RESULT' + json.dumps(R))", **limits)
    line = [x for x in res.stdout_tail.splitlines() if x.startswith("RESULT")]
    assert line, (res.describe(), res.stdout_tail, res.stderr_tail)
    return json.loads(line[-1][6:])


def test_strongest_mode_is_preferred() -> None:
    assert MODES[-1] == "rlimits"
    if os.geteuid() == 0 and shutil.which("bwrap"):
        assert MODES[0] == "bwrap+uid"


@pytest.mark.parametrize("mode", UID_MODES)
def test_uid_is_dropped_and_root_files_unreadable(mode: str, base: Path) -> None:
    secret = base / "secret"
    secret.write_text("hunter2")
    os.chmod(secret, 0o600)
    r = probe(mode, base, f"""
import os
R = {{"uid": os.getuid(), "euid": os.geteuid()}}
for p in ("/etc/shadow", {str(secret)!r}):
    try:
        R[p] = open(p).read()
    except OSError as e:
        R[p] = type(e).__name__
""")
    assert r["uid"] != 0 and r["euid"] != 0
    assert r[str(secret)] != "hunter2" and r["/etc/shadow"] in ("PermissionError",
                                                               "FileNotFoundError")


@pytest.mark.parametrize("mode", NS_MODES)
def test_namespace_modes_hide_the_repo_and_the_network(mode: str, base: Path) -> None:
    r = probe(mode, base, f"""
import os, socket
R = {{"repo": os.path.exists({str(REPO / 'services')!r}),
     "root": sorted(os.listdir("/")), "ifaces": [n for _, n in socket.if_nameindex()],
     "env": sorted(os.environ)}}
try:
    socket.create_connection(("1.1.1.1", 53), timeout=1)
    R["net"] = "connected"
except OSError as e:
    R["net"] = type(e).__name__
for p in ("/usr/kz_probe", "/etc/kz_probe", "/kz/inputs/kz_probe"):
    try:
        open(p, "w").write("x")
        R[p] = "written"
    except OSError as e:
        R[p] = type(e).__name__
open("/kz/work/ok", "w").write("x")
""")
    assert r["repo"] is False
    assert r["net"] != "connected" and r["ifaces"] in ([], ["lo"])
    assert "work" not in r["root"] and "root" in r["root"] or "kz" in r["root"]
    assert all(r[p] != "written" for p in ("/usr/kz_probe", "/etc/kz_probe",
                                             "/kz/inputs/kz_probe"))
    assert (base / "work" / "ok").exists()
    assert set(r["env"]) <= {"KZ_TEST", "PATH", "PWD", "LC_CTYPE"}


@pytest.mark.parametrize("mode", MODES)
def test_hang_is_killed_at_the_wall_clock(mode: str, base: Path) -> None:
    res = run(mode, base, "while True: pass", wall_s=3)
    assert res.timed_out and res.wall_s < 15
    assert "timed out" in res.describe()


@pytest.mark.parametrize("mode", MODES)
def test_segfault_is_reported(mode: str, base: Path) -> None:
    res = run(mode, base, "import ctypes; ctypes.string_at(0)")
    assert not res.timed_out and "SIGSEGV" in res.describe(), res.describe()


@pytest.mark.parametrize("mode", MODES)
def test_memory_and_file_size_limits(mode: str, base: Path) -> None:
    big = run(mode, base, "x = bytearray(8 << 30); print('allocated')", memory=2 << 30)
    assert "allocated" not in big.stdout_tail and big.returncode != 0
    f = run(mode, base, "open('big', 'wb').write(b'x' * (32 << 20)); print('wrote')",
            fsize=1 << 20)
    assert "wrote" not in f.stdout_tail and f.returncode != 0


@pytest.mark.parametrize("mode", UID_MODES)
def test_fork_bomb_is_contained(mode: str, base: Path) -> None:
    r = probe(mode, base, """
import os, time
kids = 0
try:
    for _ in range(10000):
        pid = os.fork()
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        kids += 1
    R = {"kids": kids, "stopped": False}
except OSError as e:
    R = {"kids": kids, "stopped": type(e).__name__}
""", nproc=24, wall_s=40)
    assert r["stopped"] and r["kids"] < 24


@pytest.mark.parametrize("mode", UID_MODES)
def test_escaped_processes_are_killed_at_teardown(mode: str, base: Path) -> None:
    res = run(mode, base, """
import os, time
if os.fork() == 0:
    os.setsid()
    open("/proc/self/stat").read()
    time.sleep(300)
    os._exit(0)
print("parent done")
""")
    assert "parent done" in res.stdout_tail
    deadline = time.monotonic() + 3  # SIGKILLed processes take a moment to go
    assert res.uid is not None
    while sandbox.live_uid_processes(res.uid, res.uid + 1):
        assert time.monotonic() < deadline, "a sandboxed process survived teardown"
        time.sleep(0.05)


def test_uids_are_exclusive_across_pools(tmp_path: Path) -> None:
    """Two verifier processes on one host never hand out the same uid (flock per uid)."""
    from services.verifier.sandbox_uids import UidPool

    a, b = UidPool(size=3, lock_dir=str(tmp_path)), UidPool(size=3, lock_dir=str(tmp_path))
    got = [a.acquire(), b.acquire(), a.acquire()]
    assert len(set(got)) == 3
    a.release(got[0])
    assert b.acquire() == got[0]  # freed by one process, reusable by the other


@pytest.mark.skipif(os.geteuid() != 0, reason="raising a priority needs root")
def test_timing_boost_reaches_every_process_of_the_sandbox() -> None:
    from services.verifier.quiet import TIMING_NICE, renice

    # A launcher that forks its payload, as unshare --fork does: both must be boosted.
    proc = subprocess.Popen(["sh", "-c", "sleep 30 & wait"], start_new_session=True)
    try:
        time.sleep(0.2)
        renice(proc, TIMING_NICE)
        group = [int(p) for p in os.listdir("/proc") if p.isdigit() and _pgid(int(p)) == proc.pid]
        assert len(group) >= 2
        assert all(os.getpriority(os.PRIO_PROCESS, p) == TIMING_NICE for p in group)
        renice(proc, 0)
        assert all(os.getpriority(os.PRIO_PROCESS, p) == 0 for p in group)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


_DYING_VERIFIER = """
import sys, threading, time
sys.path.insert(0, {repo!r})
from services.verifier import sandbox
from services.verifier import sandbox_mounts as M
view = M.View({work!r}, {inputs!r}, {cache!r}, "cpu")
lim = sandbox.Limits(wall_s=300, cpu_s=300, memory_bytes=4 << 30, nproc=64, fsize_bytes=1 << 20)
procs = []
# Started from a thread that ends at once: the candidate must outlive the thread...
t = threading.Thread(target=lambda: procs.append(sandbox.Process(
    {mode!r}, view, [sys.executable, "-I", "-c", "import time; time.sleep(300)"], {{}}, lim,
    __import__("pathlib").Path({base!r}))))
t.start(); t.join()
print("UID", procs[0].uid, flush=True)
time.sleep(300)
"""


@pytest.mark.parametrize("mode", UID_MODES)
def test_candidates_die_with_a_killed_verifier(mode: str, base: Path) -> None:
    """...and die with the verifier process when that is SIGKILLed (no teardown runs)."""
    if not sandbox.S.pdeathsig_args():
        pytest.skip("setpriv without --pdeathsig on this host")
    code = _DYING_VERIFIER.format(repo=str(REPO), work=str(base / "work"),
                                  inputs=str(base / "inputs"), cache=str(base / "cache"),
                                  mode=mode, base=str(base))
    verifier = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        line = verifier.stdout.readline() if verifier.stdout else ""
        assert line.startswith("UID"), line
        uid = int(line.split()[1])
        deadline = time.monotonic() + 10
        while not sandbox.live_uid_processes(uid, uid + 1):
            assert time.monotonic() < deadline, "the candidate never started"
            time.sleep(0.05)
        time.sleep(0.5)
        assert sandbox.live_uid_processes(uid, uid + 1), "killed when its starting thread ended"
    finally:
        verifier.kill()
        verifier.wait()
    deadline = time.monotonic() + 5
    while sandbox.live_uid_processes(uid, uid + 1):
        assert time.monotonic() < deadline, f"{mode}: the candidate outlived its verifier"
        time.sleep(0.05)


def _spinning(base: Path, name: str, mode: str, pause_starting: bool = True
              ) -> sandbox.Process:
    """A sandboxed busy loop in its own dirs (a slot's dirs belong to its uid)."""
    lim = sandbox.Limits(wall_s=60, cpu_s=60, memory_bytes=4 << 30, nproc=64,
                         fsize_bytes=1 << 20)
    for d in ("work", "inputs", "cache"):
        (base / name / d).mkdir(parents=True)
    os.chmod(base / name, 0o711)
    view = M.View(*(str(base / name / d) for d in ("work", "inputs", "cache")), "cpu")
    spin = [sys.executable, "-I", "-c", "while True: pass"]
    return sandbox.Process(mode, view, spin, {}, lim, base, pause_starting)


def _running(*procs: sandbox.Process) -> None:
    deadline = time.monotonic() + 20
    while not all(sandbox.live_uid_processes(p.uid, p.uid + 1) for p in procs):
        assert time.monotonic() < deadline, "sandboxes did not start"
        time.sleep(0.05)


def _others_of(timed: sandbox.Process, by: str) -> sandbox.S.Others:
    """What `timed` pauses, listed by cgroup or by uid (UNPAUSED's keys left out)."""
    from services.verifier.quiet import UNPAUSED

    if by == "cgroup" and timed.cg is None:
        pytest.skip("no cgroups for sandboxes on this host")
    others = timed._others() if by == "cgroup" else sandbox.S.others_by_uid(
        timed.uid, UNPAUSED.keys)
    assert others is not None
    return others


def _stopped(uid: int) -> None:
    stop_by = time.monotonic() + 2  # SIGSTOP lands when the target is next scheduled
    while _states(uid) != {"T"}:
        assert time.monotonic() < stop_by, f"not stopped: {_states(uid)}"
        time.sleep(0.01)


def _states(uid: int) -> set[str]:
    out = set()
    for pid in sandbox.live_uid_processes(uid, uid + 1):
        try:
            out.add(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0])
        except OSError:
            pass
    return out


@pytest.mark.parametrize("mode", UID_MODES[:1])
@pytest.mark.parametrize("by", ["uid", "cgroup"])
def test_other_sandboxes_are_paused_while_one_is_timed(mode: str, by: str, base: Path) -> None:
    """The timing phase stops every other sandbox process (no CPU or GPU work of theirs
    lands inside a measurement) and resumes them after, also when the phase fails. The
    others are found by their cgroups where sandboxes have them, else by uid."""
    timed, other = _spinning(base, "a", mode), _spinning(base, "b", mode)
    try:
        _running(timed, other)
        others = _others_of(timed, by)
        with pytest.raises(RuntimeError), sandbox.S.others_paused(others) as info:
            assert info["stopped"] >= 1
            _stopped(other.uid)
            assert "T" not in _states(timed.uid)
            raise RuntimeError("a failing timed phase")
        go_by = time.monotonic() + 2
        while "T" in _states(other.uid):  # resumed after the failure too
            assert time.monotonic() < go_by, "the other sandbox was left stopped"
            time.sleep(0.01)
    finally:
        timed.discard()
        other.discard()


@pytest.mark.parametrize("mode", UID_MODES[:1])
@pytest.mark.parametrize("by", ["uid", "cgroup"])
def test_a_sandbox_marked_unpaused_keeps_running_while_another_is_timed(
        mode: str, by: str, base: Path) -> None:
    """VerifyOptions.pause_compiling False: a sandbox between its job and its first GPU
    request is in UNPAUSED, and the listers of the others (cgroup or uid) leave it out;
    the rest are stopped as before."""
    from services.verifier.quiet import UNPAUSED

    timed, other, compiling = (_spinning(base, n, mode) for n in "abc")
    keys = compiling._keys()
    try:
        _running(timed, other, compiling)
        others = _others_of(timed, by)
        UNPAUSED.add(keys)
        with sandbox.S.others_paused(others):
            _stopped(other.uid)
            assert "T" not in _states(compiling.uid)
        UNPAUSED.remove(keys)
        assert compiling.uid not in UNPAUSED.keys()
    finally:
        UNPAUSED.remove(keys)
        for p in (timed, other, compiling):
            p.discard()


@pytest.mark.parametrize("mode", UID_MODES[:1])
@pytest.mark.parametrize("by", ["uid", "cgroup"])
def test_a_sandbox_started_unpaused_runs_until_its_job(mode: str, by: str, base: Path) -> None:
    """VerifyOptions.pause_starting False: a pre-started sandbox keeps running through
    another's timed phase while it starts; from its job on it is paused like the others,
    and one discarded without a job leaves nothing in UNPAUSED."""
    from services.verifier.quiet import UNPAUSED

    timed = _spinning(base, "a", mode)
    starting, spare = (_spinning(base, n, mode, pause_starting=False) for n in "bc")
    try:
        _running(timed, starting, spare)
        others = _others_of(timed, by)
        assert starting.uid in UNPAUSED.keys()
        with sandbox.S.others_paused(others):
            time.sleep(0.2)
            assert "T" not in _states(starting.uid)
        starting._job_comes(paused=True)  # as finish() does before sending the job
        assert starting.uid not in UNPAUSED.keys()
        with sandbox.S.others_paused(others):
            _stopped(starting.uid)
        spare_keys = spare._keys()
        assert set(spare_keys) <= UNPAUSED.keys()
        spare.discard()
        assert not set(spare_keys) & UNPAUSED.keys()
    finally:
        for p in (timed, starting, spare):
            p.discard()


def test_no_sandbox_starts_while_one_is_timed() -> None:
    """A start (torch import, CUDA context) during a timed phase would land in its
    measurement: the spawner holds new processes until the phase ends, failed ones too."""
    import threading

    started: list[float] = []

    def start() -> None:
        p = sandbox.S.spawn(["true"])
        started.append(time.monotonic())
        p.wait()

    others = sandbox.S.others_by_uid(sandbox.U.UID_BASE)
    with pytest.raises(RuntimeError), sandbox.S.others_paused(others):
        t = threading.Thread(target=start)
        t.start()
        time.sleep(0.5)
        assert not started, "a sandbox process started inside a timed phase"
        ended = time.monotonic()
        raise RuntimeError("a failing timed phase")
    t.join(10)
    assert started and started[0] >= ended


# A child that asks for the GPU lock as the harness and the reference worker do.
GATED_CHILD = r"""
import os, sys, time
ctrl = os.fdopen(int(sys.stdin.readline()), "w", buffering=1)
sys.stdin.readline()  # the job
def gate(word):
    ctrl.write(word + "\n")
    assert sys.stdin.readline().strip() == "GO"
"""

YIELDING_CHILD = GATED_CHILD + r"""
gate("KZ-SHARED")
for trial in range(4):
    time.sleep(0.4)  # a reference trial's GPU work, under the shared lock
    gate("KZ-YIELD")
gate("KZ-READY")
ctrl.write("KZ-DONE\n")
"""


def _gated_process(base: Path, src: str) -> tuple[sandbox.Process, GpuLock]:
    """`src` as a started sandboxed process, and the GPU lock its phases go through."""
    view = M.View(str(base / "work"), str(base / "inputs"), str(base / "cache"), "cpu")
    lim = sandbox.Limits(wall_s=30, cpu_s=30, memory_bytes=4 << 30, nproc=64,
                         fsize_bytes=1 << 20, timing_wall_s=10, locked_wall_s=10)
    return (sandbox.Process("rlimits", view, [sys.executable, "-I", "-c", src], {}, lim, base),
            GpuLock(str(base / "cache")))


def test_a_yielding_shared_phase_lets_a_waiting_timed_phase_in(base: Path) -> None:
    """The reference worker yields the shared lock between trials: a timed phase that
    asks meanwhile runs after the current trial, not after the whole build (1.6 s)."""
    import threading

    proc, gates = _gated_process(base, YIELDING_CHILD)
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

    proc, gates = _gated_process(base, src)
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
    proc, gates = _gated_process(base, HOLDOUT_CHILD)
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
    proc, gates = _gated_process(base, IDLE_CHILD)
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
    proc, gates = _gated_process(base, WRITING_CHILD)
    t0 = time.monotonic()
    called: list[float] = []
    res = proc.finish(b"{}\n", gates, after_timed=lambda: called.append(time.monotonic() - t0))
    assert not res.timed_out and res.returncode == 0, res.describe()
    assert len(called) == 1 and called[0] < res.wall_s - 0.7, (called, res.wall_s)


def test_after_timed_is_not_called_without_a_timed_phase(base: Path) -> None:
    """DONE in the shared phase (the harness on a failed call): no timed phase ended."""
    src = GATED_CHILD + 'gate("KZ-SHARED")\nctrl.write("KZ-DONE\\n")\n'
    proc, gates = _gated_process(base, src)
    called: list[int] = []
    res = proc.finish(b"{}\n", gates, after_timed=lambda: called.append(1))
    assert not res.timed_out and not res.ready_seen, res.describe()
    assert not called


def test_cgroups_left_by_a_dead_verifier_are_swept_and_live_ones_kept() -> None:
    """A killed verifier leaves one cgroup per live sandbox (its candidates die with it);
    the next one removes those that are empty and old, never one with a process in it."""
    from services.verifier import cgroups

    left = cgroups.create(f"c-left-{uuid.uuid4().hex[:8]}", 64, None)
    if left is None:
        pytest.skip("no writable cgroups on this host")
    live = cgroups.create(f"c-live-{uuid.uuid4().hex[:8]}", 64, None)
    assert live is not None
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        for procs in live.procs_files:
            Path(procs).write_text(str(sleeper.pid))
        cgroups.sweep(max_age_s=3600)  # too young: another verifier may be about to join
        assert all(d.exists() for d in left.dirs + live.dirs)
        assert cgroups.sweep(max_age_s=0) >= 1
        assert not any(d.exists() for d in left.dirs)
        assert all(d.exists() for d in live.dirs)  # a process in it: kept
    finally:
        sleeper.kill()
        sleeper.wait()
        live.remove()
        left.remove()
