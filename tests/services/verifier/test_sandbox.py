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


@pytest.mark.parametrize("mode", MODES)
def test_a_scratch_run_runs_its_argv_and_leaves_no_dirs(mode: str, base: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KZ_VERIFIER_TMP", str(base))  # under /tmp: a sandbox uid reaches it
    before = set(base.iterdir())
    argv = [sys.executable, "-I", "-c", "import sys; print('ran', sys.argv[1])", "arg"]
    res = sandbox.run_scratch(mode, "cpu", argv, {}, sandbox.Limits(60, 60, 4 << 30))
    assert res.returncode == 0 and res.stdout_tail.strip() == "ran arg", res.describe()
    assert res.isolation.startswith(mode)
    assert not [p for p in set(base.iterdir()) - before if p.name.startswith("kzv-probe-")]


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
