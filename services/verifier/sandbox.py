"""Run one untrusted process, isolated as strongly as this host allows.

Chain (strongest first): bwrap+uid -> unshare+uid -> uid+rlimits -> rlimits.
The uid drop always comes first (root inside a user namespace still reads
root's files); rlimits are set by prlimit before the drop so RLIMIT_NPROC binds
afterwards; each concurrent slot gets its own uid so candidates cannot signal
or count against each other. Teardown kills the process group, the cgroup and
every process of the slot's uid. Nothing here interprets the child's output
beyond the one readiness line used for sequencing the GPU lock.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol
from functools import lru_cache
from pathlib import Path

from services.verifier import cgroups
from services.verifier import sandbox_mounts as M
from services.verifier.exceptions import SandboxError

MODES = ("bwrap+uid", "bwrap", "unshare+uid", "uid+rlimits", "rlimits")
SHARED, READY, DONE = "KZ-SHARED", "KZ-READY", "KZ-DONE"
UID_BASE = 61000
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"


@dataclass(frozen=True)
class Limits:
    wall_s: float
    cpu_s: int
    memory_bytes: int | None  # RLIMIT_AS on CPU; cgroup memory.max where available
    nproc: int = 256
    fsize_bytes: int = 1 << 30
    timing_wall_s: float = 60.0
    locked_wall_s: float = 60.0  # correctness calls under the shared GPU lock


@dataclass
class RunResult:
    """What happened to the process; never used to decide a pass."""

    returncode: int | None
    timed_out: bool
    wall_s: float
    stdout_tail: str
    stderr_tail: str
    isolation: str
    ready_seen: bool = False
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        if self.timed_out:
            return f"timed out after {self.wall_s:.1f}s (hang or runaway compute)"
        rc = self.returncode
        # Negative: we saw the signal; >128: a namespace init (bwrap/unshare) relayed it.
        sig = -rc if rc is not None and rc < 0 else rc - 128 if rc and 128 < rc < 160 else None
        if sig is not None:
            name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else sig
            hint = {"SIGKILL": " (memory/CPU limit or sandbox kill)", "SIGXCPU": " (CPU limit)",
                    "SIGSEGV": " (segfault)", "SIGABRT": " (abort)"}.get(str(name), "")
            return f"process killed by {name}{hint}" + "".join(f"; {n}" for n in self.notes)
        return f"process exited with code {rc}"


class UidPool:
    """Distinct unprivileged uids for concurrent slots."""

    def __init__(self, size: int = 64) -> None:
        self._free = list(range(UID_BASE, UID_BASE + size))
        self._cv = threading.Condition()

    def acquire(self) -> int:
        with self._cv:
            while not self._free:
                self._cv.wait()
            return self._free.pop(0)

    def release(self, uid: int) -> None:
        with self._cv:
            self._free.append(uid)
            self._cv.notify()


UIDS = UidPool()


@lru_cache(maxsize=4)
def available_modes(device: str) -> tuple[str, ...]:
    """Modes that work on this host, probed once per process, strongest first."""
    root = os.geteuid() == 0
    modes = []
    if shutil.which("bwrap") and _probe("bwrap+uid" if root else "bwrap", device):
        modes.append("bwrap+uid" if root else "bwrap")
    if root and shutil.which("unshare") and _probe("unshare+uid", device):
        modes.append("unshare+uid")
    if root and shutil.which("setpriv"):
        modes.append("uid+rlimits")
    modes.append("rlimits")
    return tuple(modes)


def choose_mode(requested: str, device: str) -> str:
    modes = available_modes(device)
    if requested == "auto":
        return modes[0]
    if requested not in modes:
        raise SandboxError(f"isolation {requested!r} unavailable here; available: {modes}")
    return requested


def _probe(mode: str, device: str) -> bool:
    base = Path(os.environ.get("KZ_VERIFIER_TMP", "/tmp")) / f"kzv-probe-{uuid.uuid4().hex[:8]}"
    try:
        work, inputs, cache = (base / n for n in ("work", "inputs", "cache"))
        for d in (work, inputs, cache):
            d.mkdir(parents=True)
        os.chmod(base, 0o711)
        view = M.View(str(work), str(inputs), str(cache), device)
        # Cheap probe: the interpreter starts and sees torch (importing it costs seconds).
        code = "import importlib.util as u, sys; sys.exit(0 if u.find_spec('torch') else 3)"
        res = run(mode, view, [sys.executable, "-I", "-c", code], {"PATH": "/usr/bin"},
                  Limits(60, 60, None), b"", base)
        return res.returncode == 0
    except (OSError, SandboxError):
        return False
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _paths_inside(mode: str, view: M.View) -> M.View:
    if mode.startswith(("bwrap", "unshare")):
        return M.View(M.WORK, M.INPUTS, M.CACHE, view.device)
    return view


def inside_view(mode: str, view: M.View) -> M.View:
    """Where work/inputs/cache appear from inside the sandbox."""
    return _paths_inside(mode, view)


def _prlimit(limits: Limits, device: str) -> list[str]:
    if not shutil.which("prlimit"):
        return []  # _rlimit_preexec applies them instead
    a = ["prlimit", f"--cpu={limits.cpu_s}:{limits.cpu_s + 5}", "--core=0",
         f"--fsize={limits.fsize_bytes}", f"--nproc={limits.nproc}", "--nofile=4096"]
    if device == "cpu" and limits.memory_bytes:
        a.append(f"--as={limits.memory_bytes}")  # CUDA needs huge virtual reservations
    return a + ["--"]


def _rlimit_preexec(limits: Limits, device: str) -> Callable[[], None]:
    """Fallback where prlimit is missing (preexec_fn: only resource calls, no imports)."""
    import resource

    pairs = [(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 5)),
             (resource.RLIMIT_CORE, (0, 0)),
             (resource.RLIMIT_FSIZE, (limits.fsize_bytes, limits.fsize_bytes)),
             (resource.RLIMIT_NPROC, (limits.nproc, limits.nproc)),
             (resource.RLIMIT_NOFILE, (4096, 4096))]
    if device == "cpu" and limits.memory_bytes:
        pairs.append((resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes)))

    def apply() -> None:
        for res, value in pairs:
            resource.setrlimit(res, value)

    return apply


def _setpriv(uid: int) -> list[str]:
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs",
            "--"]


def _command(mode: str, view: M.View, argv: list[str], uid: int, cg: cgroups.Cgroup | None,
             base: Path, limits: Limits) -> list[str]:
    join = "".join(f"echo $$ > {shlex.quote(p)}\n" for p in (cg.procs_files if cg else []))
    if mode == "rlimits":
        return _prlimit(limits, view.device) + argv
    if mode == "uid+rlimits":
        script = join + "exec " + shlex.join(_setpriv(uid) + argv)
        return _prlimit(limits, view.device) + ["sh", "-c", script]
    if mode == "bwrap":
        return _prlimit(limits, view.device) + M.bwrap_args(view, {}) + argv
    if mode == "bwrap+uid":
        staged = _stage_dirs(view.device, base)
        inner = shlex.join(_setpriv(uid) + M.bwrap_args(view, staged) + argv)
        if not staged:
            return _prlimit(limits, view.device) + ["sh", "-c", join + "exec " + inner]
        script = "set -e\n" + join + M.stage_script(staged) + "\nexec " + inner
        return _prlimit(limits, view.device) + ["unshare", "--mount", "--", "sh", "-c", script]
    if mode == "unshare+uid":
        root = base / f"root-{uuid.uuid4().hex[:8]}"
        root.mkdir()
        inner = shlex.join(["chroot", str(root)] + _setpriv(uid) + argv)
        script = join + M.chroot_script(view, str(root)) + "\nexec " + inner
        return _prlimit(limits, view.device) + [
            "unshare", "--mount", "--net", "--pid", "--ipc", "--uts", "--fork", "--kill-child",
            "--", "sh", "-c", script]
    raise SandboxError(f"unknown isolation mode {mode!r}")


def _stage_dirs(device: str, base: Path) -> dict[str, str]:
    """Blocked paths (e.g. a Python under /root) get a reachable staging mountpoint."""
    staged = {}
    for i, p in enumerate(M.system_ro_paths(device)):
        if M.blocked_for_others(p) and os.path.isdir(p):
            d = base / f"stage-{i}"
            d.mkdir(exist_ok=True)
            staged[p] = str(d)
    return staged


class Gates(Protocol):
    """GPU phases: shared while correctness calls run, exclusive for the timed runs."""

    def shared(self) -> AbstractContextManager[None]: ...

    def exclusive(self) -> AbstractContextManager[None]: ...



def run(mode: str, view: M.View, argv: list[str], env: dict[str, str], limits: Limits,
        stdin_data: bytes, base: Path, gates: Gates | None = None) -> RunResult:
    """Run `argv` isolated. With `gates`, the child's SHARED / READY control messages are
    answered with GO once the shared / exclusive GPU lock is held (released at READY / DONE)."""
    uid = UIDS.acquire() if mode.endswith("uid") or mode == "uid+rlimits" else os.getuid()
    cg = cgroups.create(f"c-{uuid.uuid4().hex[:12]}", limits.nproc,
                        limits.memory_bytes) if os.geteuid() == 0 else None
    try:
        _own(view, uid)
        cmd = _command(mode, view, argv, uid, cg, base, limits)
        iso = mode + ("+cgroup" if cg else "")
        env = {**env, "PATH": SAFE_PATH}  # launcher tools live in sbin too (chroot)
        res = _supervise(cmd, env, limits, stdin_data, view, iso, gates)
        res.notes.extend(cg.events() if cg else [])
        return res
    finally:
        _kill_uid(uid) if uid >= UID_BASE else None
        if cg:
            cg.remove()
        if uid >= UID_BASE:
            UIDS.release(uid)


def _own(view: M.View, uid: int) -> None:
    if os.geteuid() != 0 or uid == 0:
        return
    for d in (view.work, view.cache):
        for root, dirs, files in os.walk(d):
            for name in dirs + files:
                os.lchown(os.path.join(root, name), uid, uid)
        os.chown(d, uid, uid)
        os.chmod(d, 0o700)


def _supervise(cmd: list[str], env: dict[str, str], limits: Limits, stdin_data: bytes,
               view: M.View, iso: str, gates: Gates | None) -> RunResult:
    t0 = time.monotonic()
    err_path = Path(view.work) / ".stderr"
    # Control channel (READY/DONE) on its own pipe: the candidate's prints cannot forge it.
    ctrl_r, ctrl_w = os.pipe()
    with open(err_path, "wb") as err:
        preexec = None if shutil.which("prlimit") else _rlimit_preexec(limits, view.device)
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                env=env, start_new_session=True, close_fds=True, cwd=view.work,
                                pass_fds=(ctrl_w,), preexec_fn=preexec)  # cwd: never the verifier's
    os.close(ctrl_w)
    out, ctrl = _Drain(proc.stdout), _Control(ctrl_r)
    out.start()
    ctrl.start()
    timed_out = False
    try:
        _send(proc, f"{ctrl_w}\n".encode() + stdin_data)
        timed_out = not _phases(proc, ctrl, gates, limits)
        if not timed_out:
            proc.wait(timeout=60)  # writing results after the locked phases
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        _killpg(proc)
        proc.wait()
        out.join(timeout=2)
        ctrl.join(timeout=2)
    return RunResult(None if timed_out else proc.returncode, timed_out, time.monotonic() - t0,
                     out.tail(), _tail_file(err_path), iso, ctrl.ready.is_set())


def _phases(proc: subprocess.Popen, ctrl: _Control, gates: Gates | None,  # type: ignore[type-arg]
            limits: Limits) -> bool:
    """Answer the child's lock requests; False if a phase ran out of time."""
    if gates is None:
        return _wait(proc, None, limits.wall_s)
    if not _wait(proc, ctrl.any_request, limits.wall_s):
        return False
    if ctrl.shared.is_set() and not ctrl.ready.is_set() and proc.poll() is None:
        with gates.shared():  # bounded: a hang here would stall every timing on the host
            _send(proc, b"GO\n")
            if not _wait(proc, ctrl.ready, limits.locked_wall_s):
                return False
    if ctrl.ready.is_set() and proc.poll() is None:
        with gates.exclusive():
            _send(proc, b"GO\n")
            return _wait(proc, ctrl.done, limits.timing_wall_s)
    return True


def _send(proc: subprocess.Popen, data: bytes) -> None:  # type: ignore[type-arg]
    try:
        assert proc.stdin is not None
        if data:
            proc.stdin.write(data)
            proc.stdin.flush()
    except (BrokenPipeError, OSError):
        pass


def _wait(proc: subprocess.Popen, flag: threading.Event | None,  # type: ignore[type-arg]
          timeout: float) -> bool:
    """True once `flag` is set or the process exited; False on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None or (flag is not None and flag.wait(0.02)):
            return True
        if flag is None:
            time.sleep(0.02)
    return False


class _Drain(threading.Thread):
    """Drains stdout so a chatty child never blocks; keeps a tail for diagnostics."""

    def __init__(self, stream) -> None:  # type: ignore[no-untyped-def]
        super().__init__(daemon=True)
        self.stream, self._tail = stream, b""

    def run(self) -> None:
        for line in iter(self.stream.readline, b""):
            self._tail = (self._tail + line)[-4096:]

    def tail(self) -> str:
        return self._tail.decode("utf-8", "replace")


class _Control(threading.Thread):
    """Reads READY / DONE from the control pipe."""

    def __init__(self, fd: int) -> None:
        super().__init__(daemon=True)
        self.fd = fd
        self.shared, self.ready, self.done = threading.Event(), threading.Event(), threading.Event()
        self.any_request = threading.Event()

    def run(self) -> None:
        flags = {SHARED: self.shared, READY: self.ready, DONE: self.done}
        with os.fdopen(self.fd, "rb") as f:
            for line in iter(f.readline, b""):
                flag = flags.get(line.strip().decode("ascii", "replace"))
                if flag is not None:
                    flag.set()
                    self.any_request.set()


def _tail_file(path: Path, n: int = 4096) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - n))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _killpg(proc: subprocess.Popen) -> None:  # type: ignore[type-arg]
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def live_uid_processes(lo: int, hi: int) -> list[int]:
    """Pids of live processes whose real uid is in [lo, hi)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            u = _proc_uid(entry)
            if u is not None and lo <= u < hi:
                out.append(int(entry))
    return out


def _kill_uid(uid: int) -> None:
    """Kill every process still running as the slot's uid (escaped process groups)."""
    for _ in range(3):
        found = False
        for entry in os.listdir("/proc"):
            if entry.isdigit() and _proc_uid(entry) == uid:
                found = True
                try:
                    os.kill(int(entry), signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        if not found:
            return
        time.sleep(0.05)


def _proc_uid(pid: str) -> int | None:
    """Real uid of a live process (None for zombies: already dead, awaiting a reaper)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("State:") and line.split()[1] in ("Z", "X"):
                    return None
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None
