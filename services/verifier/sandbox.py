"""Run one untrusted process, isolated as strongly as this host allows.

Chain (strongest first): bwrap+uid -> unshare+uid -> uid+rlimits -> rlimits.
The uid drop always comes first (root inside a user namespace still reads
root's files); rlimits are set by prlimit before the drop so RLIMIT_NPROC binds
afterwards; each concurrent slot gets its own uid so candidates cannot signal
or count against each other. Teardown kills the process group, the cgroup and
every process of the slot's uid. Nothing here interprets the child's output
beyond the control words used for sequencing the GPU lock (sandbox_supervise.py).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from services.verifier import cgroups, zygote_client
from services.verifier.zygote import SAFE_PATH  # one copy: the server is standalone
from services.verifier import sandbox_command as C
from services.verifier import sandbox_mounts as M
from services.verifier import sandbox_supervise as S
from services.verifier import sandbox_uids as U
from services.verifier.quiet import QUIET, UNPAUSED
from services.verifier.sandbox_supervise import (  # noqa: F401  re-exported for callers
    DONE, READY, SHARED, WARM, Gates, Handover)
from services.verifier.sandbox_uids import UID_BASE, live_uid_processes  # noqa: F401
from services.verifier.exceptions import SandboxError

MODES = ("bwrap+uid", "bwrap", "unshare+uid", "uid+rlimits", "rlimits")
# The unshare+uid sandbox, forked from a server that has torch imported (zygote.py) instead
# of a fresh interpreter per sandbox. "auto" takes it where unshare+uid is the strongest
# mode (GPU hosts without bwrap): on the H200 it cut a candidate's CPU from 9.9 to 5.5 s and
# passed the same GPU contract (benchmarks/verifier_notes.md, "Fifth session").
ZYGOTE_MODE = "unshare+zygote+uid"


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
    phase_s: dict[str, float] = field(default_factory=dict)  # parent-side clock per phase
    warm_start: bool = False  # the job found the interpreter's start-up already done
    uid: int | None = None  # the slot's uid (None: the caller's own)

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


@lru_cache(maxsize=4)
def available_modes(device: str) -> tuple[str, ...]:
    """Modes that work on this host, probed once per process, strongest first."""
    root = os.geteuid() == 0
    modes = []
    if shutil.which("bwrap") and _probe("bwrap+uid" if root else "bwrap", device):
        modes.append("bwrap+uid" if root else "bwrap")
    if root and shutil.which("unshare") and _probe("unshare+uid", device):
        modes.append("unshare+uid")
        modes.append(ZYGOTE_MODE)  # the same primitives, set up in-process
    if root and shutil.which("setpriv"):
        modes.append("uid+rlimits")
    modes.append("rlimits")
    return tuple(modes)


def choose_mode(requested: str, device: str) -> str:
    modes = available_modes(device)
    if requested == "auto":
        best = next(m for m in modes if m != ZYGOTE_MODE)
        return ZYGOTE_MODE if best == "unshare+uid" and ZYGOTE_MODE in modes else best
    if requested not in modes:
        raise SandboxError(f"isolation {requested!r} unavailable here; available: {modes}")
    return requested


def _probe(mode: str, device: str) -> bool:
    # Cheap probe: the interpreter starts and sees torch (importing it costs seconds).
    code = "import importlib.util as u, sys; sys.exit(0 if u.find_spec('torch') else 3)"
    try:
        res = run_scratch(mode, device, [sys.executable, "-I", "-c", code],
                          {"PATH": "/usr/bin"}, Limits(60, 60, None))
        return res.returncode == 0
    except (OSError, SandboxError):
        return False


def run_scratch(mode: str, device: str, argv: list[str], env: dict[str, str],
                limits: Limits) -> RunResult:
    """Run trusted `argv` in a sandbox of `mode` with empty work/inputs/cache dirs, removed
    after (the modes' probe; benchmarks that measure what the sandbox itself costs)."""
    base = Path(os.environ.get("KZ_VERIFIER_TMP", "/tmp")) / f"kzv-probe-{uuid.uuid4().hex[:8]}"
    try:
        work, inputs, cache = (base / n for n in ("work", "inputs", "cache"))
        for d in (work, inputs, cache):
            d.mkdir(parents=True)
        os.chmod(base, 0o711)
        view = M.View(str(work), str(inputs), str(cache), device)
        return run(mode, view, argv, env, limits, b"", base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _paths_inside(mode: str, view: M.View) -> M.View:
    if mode.startswith(("bwrap", "unshare")):
        return M.View(M.WORK, M.INPUTS, M.CACHE, view.device)
    return view


def inside_view(mode: str, view: M.View) -> M.View:
    """Where work/inputs/cache appear from inside the sandbox."""
    return _paths_inside(mode, view)


def run(mode: str, view: M.View, argv: list[str], env: dict[str, str], limits: Limits,
        stdin_data: bytes, base: Path, gates: Gates | None = None) -> RunResult:
    """Run `argv` isolated. With `gates`, the child's SHARED / READY control messages are
    answered with GO once the shared / exclusive GPU lock is held (released at READY / DONE)."""
    return Process(mode, view, argv, env, limits, base).finish(stdin_data, gates)


class Process:
    """One isolated process, started now and fed its job later (`finish`).

    Between the two the child may run only trusted code (the harness imports torch and
    triton while it waits), so a pre-started Process hides the interpreter's start-up
    behind another candidate's run. The child's first stdin line is its control-pipe fd;
    the job follows in `finish`. Wall-clock limits count from `finish`.
    """

    def __init__(self, mode: str, view: M.View, argv: list[str], env: dict[str, str],
                 limits: Limits, base: Path, pause_starting: bool = True) -> None:
        """`pause_starting` False: other sandboxes' timed phases leave this one running
        until its job (VerifyOptions.pause_starting)."""
        self.view, self.limits = view, limits
        self.started_at = time.monotonic()  # for the slot's clock (finish: diagnostics)
        self.uid = (U.UIDS.acquire() if mode.endswith("uid") or mode == "uid+rlimits"
                    else os.getuid())
        self.cg = cgroups.create(f"c-{uuid.uuid4().hex[:12]}", limits.nproc,
                                 limits.memory_bytes) if os.geteuid() == 0 else None
        self.isolation = mode + ("+cgroup" if self.cg else "")
        self._done = False
        self._starting = () if pause_starting else self._keys()  # left running until its job
        UNPAUSED.add(self._starting)
        try:
            self.own()
            env = {**env, "PATH": SAFE_PATH}  # launcher tools live in sbin (chroot)
            if mode == ZYGOTE_MODE:
                try:
                    self._fork(argv, env, base)
                    return
                except SandboxError as exc:  # the same sandbox, the classic way
                    logging.getLogger(__name__).warning("fork server failed (%s): using "
                                                        "unshare+uid", exc)
                    mode = "unshare+uid"
                    self.isolation = mode + ("+cgroup" if self.cg else "")
            self._start(C.command(mode, view, argv, self.uid, self.cg, base, limits), env)
        except BaseException:
            UNPAUSED.remove(self._starting)
            self._teardown()
            raise

    def own(self) -> None:
        """Hand the work and cache dirs to the slot's uid (again after the parent adds files)."""
        _own(self.view, self.uid)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    @property
    def warm(self) -> bool:
        """The child reported its trusted start-up done (never used to decide a pass)."""
        return self.ctrl.warm.is_set()

    def wait_warm(self, timeout_s: float) -> bool:
        """Wait for the trusted start-up's end: False if the child died or time ran out."""
        return S.wait(self.proc, self.ctrl.warm, timeout_s) and self.warm

    def _start(self, cmd: list[str], env: dict[str, str]) -> None:
        self.err_path = Path(self.view.work) / ".stderr"
        # Control channel (READY/DONE) on its own pipe: the candidate's prints cannot forge it.
        ctrl_r, ctrl_w = os.pipe()
        with open(self.err_path, "wb") as err:
            preexec = None if shutil.which("prlimit") else C.rlimit_preexec(self.limits,
                                                                          self.view.device)
            self.proc = S.spawn(  # cwd: never the verifier's; forked by the spawner thread
                cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=env,
                start_new_session=True, close_fds=True, cwd=self.view.work, pass_fds=(ctrl_w,),
                preexec_fn=preexec)
        os.close(ctrl_w)
        self._attach(ctrl_r, ctrl_w)

    def _fork(self, argv: list[str], env: dict[str, str], base: Path) -> None:
        """The same sandbox as unshare+uid, forked by the zygote (zygote.py has the steps)."""
        self.err_path = Path(self.view.work) / ".stderr"
        root = base / f"root-{uuid.uuid4().hex[:8]}"
        root.mkdir()
        mounts, late = M.chroot_parts(self.view, str(root))
        inside = _paths_inside(ZYGOTE_MODE, self.view)
        request = {"uid": self.uid, "cgroup_procs": self.cg.procs_files if self.cg else [],
                   "mounts": mounts, "late_mounts": late, "root": str(root),
                   "cwd": inside.work, "rlimits": C.rlimits(self.limits, self.view.device),
                   "env": env, "argv": argv}
        ctrl_r, ctrl_w = os.pipe()
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        stdin, stdout = os.fdopen(in_w, "wb"), os.fdopen(out_r, "rb")  # our ends
        request["ctrl_fd"] = ctrl_w
        try:
            with open(self.err_path, "wb") as err:
                self.proc = zygote_client.get(env).spawn(  # type: ignore[assignment]
                    request, [in_r, out_w, err.fileno(), ctrl_w], stdin, stdout)
        except BaseException:
            os.close(ctrl_r)
            stdin.close()
            stdout.close()
            raise
        finally:
            for fd in (in_r, out_w, ctrl_w):  # the child's ends: it holds its own copies
                os.close(fd)
        self._attach(ctrl_r, ctrl_w)

    def _attach(self, ctrl_r: int, ctrl_w: int) -> None:
        """Start reading the child's stdout and control pipe; tell it the pipe's number."""
        self.out, self.ctrl = S.Drain(self.proc.stdout), S.Control(ctrl_r)
        self.out.start()
        self.ctrl.start()
        S.send(self.proc, f"{ctrl_w}\n".encode())

    def finish(self, stdin_data: bytes, gates: Gates | None = None,
               handover: Handover | None = None,
               after_timed: Callable[[], None] | None = None,
               pause_compiling: bool = True,
               gpu_place: Callable[[], AbstractContextManager[Any]] | None = None,
               ) -> RunResult:
        """Send the job, supervise the phases, tear everything down; once only. `handover`:
        files the child sees only between IDLE and READY, if it asks (the holdouts);
        `after_timed` is called when its timed phase has ended (DONE), before it exits.
        `pause_compiling` False: other sandboxes' timed phases leave this one running
        until its first GPU request (VerifyOptions.pause_compiling). `gpu_place`: held
        from that request to the end of its GPU phases (VerifyOptions.gpu_places)."""
        if self._done:
            raise SandboxError("sandboxed process already used")
        self._done = True
        t0 = time.monotonic()
        timed_out, warm, uid = False, self.warm, self.uid
        clock: dict[str, float] = {}
        unpaused = () if pause_compiling else self._keys()
        clock["slot_age"] = round(t0 - self.started_at, 3)  # its start to its job
        try:
            self._job_comes(paused=pause_compiling)
            UNPAUSED.add(unpaused)
            S.send(self.proc, stdin_data)
            timed_out = not S.phases(self.proc, self.ctrl, gates, self.limits, clock,
                                     self._others(), handover, after_timed,
                                     lambda: UNPAUSED.remove(unpaused), gpu_place)
            t1 = time.monotonic()
            if not timed_out:
                self.proc.wait(timeout=60)  # writing results after the locked phases
            ended = time.monotonic()
            clock["exit"] = round(ended - t1, 3)  # diagnostics, as the laps
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            UNPAUSED.remove(unpaused)
            t1 = time.monotonic()
            self._stop()
            notes = self.cg.events() if self.cg else []
            self._teardown()
            clock["teardown"] = round(time.monotonic() - t1, 3)
            heard = self.ctrl.heard_at
            if WARM in heard:  # its start to WARM: start-up, waits included
                clock["slot_startup"] = round(heard[WARM] - self.started_at, 3)
            if "exit" in clock and S.SAVED in heard:
                # its last word to its end: the process's own exit (its CUDA context's
                # teardown, its files closed), nothing of the harness's left to run
                clock["exit_dying"] = round(ended - heard[S.SAVED], 3)
        res = RunResult(None if timed_out else self.proc.returncode, timed_out,
                        time.monotonic() - t0, self.out.tail(), S.tail_file(self.err_path),
                        self.isolation, self.ctrl.ready.is_set(), phase_s=clock,
                        warm_start=warm, uid=uid if uid >= U.UID_BASE else None)
        res.notes.extend(notes)
        return res

    def _others(self) -> S.Others | None:
        """Every other sandbox's processes on the host (paused while this one is timed):
        from their cgroups where this host gives sandboxes cgroups (one file per sandbox),
        else by uid (a scan of /proc); None without a sandbox uid."""
        if self.uid < U.UID_BASE:
            return None
        cg = self.cg
        if cg is not None:
            return lambda: cgroups.other_procs(cg, UNPAUSED.keys())
        return S.others_by_uid(self.uid, UNPAUSED.keys)

    def _job_comes(self, paused: bool) -> None:
        """A sandbox left running while it started is listed with the others from now on;
        if it is to be `paused`, a timed phase under way, which never listed it, ends
        before its job goes in."""
        if self._starting:
            UNPAUSED.remove(self._starting)
            self._starting = ()
            if paused:
                QUIET.wait()

    def _keys(self) -> tuple[int | str, ...]:
        """How the listers of the others know this sandbox: its uid, its cgroup's name."""
        if self.uid < U.UID_BASE:
            return ()
        return (self.uid,) + ((self.cg.dirs[0].name,) if self.cg else ())

    def discard(self) -> None:
        """Kill an unused process and free its uid and cgroup."""
        if not self._done:
            self._done = True
            UNPAUSED.remove(self._starting)
            self._stop()
            self._teardown()

    def _stop(self) -> None:
        S.killpg(self.proc)
        self.proc.wait()
        if isinstance(self.proc, zygote_client.ZygoteProc):
            self.proc.release()  # only now may its pid be reaped (and reused)
        self.out.join(timeout=2)
        self.ctrl.join(timeout=2)

    def _teardown(self) -> None:
        clean = U.kill_uid(self.uid) if self.uid >= U.UID_BASE else True
        if self.cg:
            self.cg.remove()
            self.cg = None
        if self.uid >= U.UID_BASE:
            if clean:  # else kept, never handed out again by this process
                U.UIDS.release(self.uid)
            self.uid = -1


def _own(view: M.View, uid: int) -> None:
    if os.geteuid() != 0 or uid == 0:
        return
    for d in (view.work, view.cache):
        for root, dirs, files in os.walk(d):
            for name in dirs + files:
                os.lchown(os.path.join(root, name), uid, uid)
        os.chown(d, uid, uid)
        os.chmod(d, 0o700)


