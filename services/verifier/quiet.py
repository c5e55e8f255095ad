"""Keeping the host quiet while a candidate is timed.

A timed phase holds the exclusive GPU lock, but the lock only keeps other candidates'
correctness kernels off the device. Everything else a busy verifier host does (other
sandboxes' imports, compiles and warm-up kernels, new sandboxes starting) can still land
inside a measured interval, so while one candidate is timed: every other sandbox is
SIGSTOPped, no new sandbox starts, and the timed process outranks the rest on the CPU.
`CpuMeter` measures how busy the host was meanwhile (diagnostics for the benchmark).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager

TIMING_NICE = -10  # the exclusive timing phase outranks every other sandbox (nice 0)
QUIET_WAIT_S = 90.0  # longer than a timed phase may last (timing_timeout_s, 60 s)
STOP_SETTLE_S = 0.02  # most a pause waits for its SIGSTOPs to land (one in D state may not)
PF_EXITING = 0x4  # a thread's flags (/proc/PID/task/TID/stat, field 9): it is in do_exit


@contextmanager
def others_paused(others: Callable[[], list[int]] | None) -> Iterator[dict[str, int]]:
    """SIGSTOP every process `others()` lists (the other sandboxes on the host) while one
    is timed; yields a dict that ends up holding how many were stopped, how many of them
    were not yet seen to stop as the timing began (`unsettled`, after a bounded wait; of
    which `unsettled_d` in uninterruptible sleep; `settled_threads`: how many counted as
    settled only by their threads, see `threads_settled`), how many process groups were
    stopped as a whole (`groups`), and how many were gone by the end (exited or killed
    meanwhile: a CUDA context torn down).

    On the H200 with 12 workers the within-run spread of short kernels was 30-280% in
    batches against ~1% on a quiet host. Stopped for the ~0.1-0.5 s of a timed phase, they
    lose only that time (their wall clocks are generous). Without a sandbox uid
    (rlimits-only mode, `others` None) nothing is paused."""
    info = {"stopped": 0, "gone": 0, "unsettled": 0, "unsettled_d": 0, "groups": 0,
            "settled_threads": 0}
    if others is None:
        yield info
        return
    stopped: list[int] = []
    groups: set[int] = set()  # process groups stopped as a whole
    moving: list[int] = []  # stopped but not yet seen to stop
    settle_by = time.monotonic() + STOP_SETTLE_S
    QUIET.begin()  # and no new sandbox starts (imports, CUDA context) until it is timed
    try:
        for _ in range(5):  # again until a pass finds nobody new (children forked meanwhile)
            listed = others()
            new = [pid for pid in listed if pid not in stopped]
            if not new:
                break
            groups |= _stop_groups(_groups_of(new, listed) - groups)
            for pid in new:
                if _signal(os.kill, pid, signal.SIGSTOP):
                    stopped.append(pid)
                    moving.append(pid)
            moving, by_threads = _settle(moving, groups, settle_by)
            info["settled_threads"] += by_threads
        info.update(stopped=len(stopped), unsettled=len(moving), groups=len(groups))
        info["unsettled_d"] = sum(_stat(pid)[0] == "D" for pid in moving)  # diagnostics
        yield info
    finally:
        QUIET.end()
        info["gone"] = sum(_stat(pid)[0] in (None, "Z", "X") for pid in stopped)
        for pid in stopped:
            _signal(os.kill, pid, signal.SIGCONT)
        for g in groups:  # children forked as their group was stopped are stopped too
            _signal(os.killpg, g, signal.SIGCONT)


def _groups_of(pids: list[int], listed: list[int]) -> set[int]:
    """The process groups that listed processes lead (a sandbox starts in a session of its
    own: its group holds its processes only). Never this process's own group."""
    led = set(listed) - {os.getpgrp()}
    return {g for g in map(_pgid, pids) if g in led}


def _pgid(pid: int) -> int | None:
    """The process's group (a syscall: cheaper than reading /proc on the timed path)."""
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


def _stop_groups(groups: set[int]) -> set[int]:
    """SIGSTOP each group as a whole; the ones it reached. A signal to a group reaches a
    child its parent is forking meanwhile too (the kernel delays it to both), where one to
    the parent's pid alone does not: the child, not yet listed, would run on."""
    return {g for g in groups if _signal(os.killpg, g, signal.SIGSTOP)}


def _signal(send: Callable[[int, int], None], target: int, sig: int) -> bool:
    """`send(target, sig)` (os.kill or os.killpg); False if the target is gone or not ours."""
    try:
        send(target, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _settle(pids: list[int], groups: set[int], deadline: float) -> tuple[list[int], int]:
    """Wait (until `deadline`) for each of `pids` to stop; the ones that have not by then,
    and how many of the rest only their threads showed settled (diagnostics)."""
    by_threads = 0
    while True:
        moving = []
        for pid in pids:
            how = _still(pid, groups)
            if how is None:
                moving.append(pid)
            by_threads += how == "threads"
        pids = moving
        if not pids or time.monotonic() >= deadline:
            return pids, by_threads
        time.sleep(0.0002)


def _still(pid: int, groups: set[int]) -> str | None:
    """How the process is settled, or None if it may run its own code yet: stopped or
    gone; holding a SIGSTOP sent to its whole group (runnable but not yet run: it stops
    before it runs its own code again, and a child it forks gets the stop too); or its
    threads show it (`threads_settled`)."""
    state, group = _stat(pid)
    if state in ("T", "t", "Z", "X", None):  # stopped (by a signal, traced), zombie, reaped
        return "stopped"
    if group in groups and _stop_pending(pid):
        return "pending"
    return "threads" if threads_settled(_thread_stats(pid)) else None


def threads_settled(threads: list[tuple[str, int]]) -> bool:
    """Will a process whose threads are in these (state letter, flags) run none of its own
    code again before a SIGCONT? Yes if one thread is in a job-control stop (the thread
    that took the SIGSTOP stops the whole process: the rest stop on their way back to user
    mode, e.g. a main thread in D inside a driver call, whose /proc/PID/stat shows D), or
    if every thread is exiting (PF_EXITING, or a zombie: a process exiting drops a
    SIGSTOP, so no wait stops it, yet it runs no user code again). On an H100 (thirty-
    seventh session) 15 of 147 pauses waited the whole settle time for some process, 22
    of the 28 in D; which of these two cases they were is what `settled_threads` shows."""
    if not threads:
        return False  # unreadable: no proof
    if any(state == "T" for state, _ in threads):
        return True
    return all(state in ("Z", "X") or flags & PF_EXITING for state, flags in threads)


def _thread_stats(pid: int) -> list[tuple[str, int]]:
    """Each of the process's threads' state letter and flags (/proc/PID/task/*/stat);
    empty if the process is gone or its threads cannot be read."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    out = []
    for tid in tids:
        fields = _stat_fields(f"/proc/{pid}/task/{tid}/stat")
        if len(fields) > 6 and fields[6].isdigit():  # else that thread is gone: the rest decide
            out.append((fields[0], int(fields[6])))
    return out


def _stop_pending(pid: int) -> bool:
    """Is a SIGSTOP pending for the process as a whole (/proc/PID/status ShdPnd)?"""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("ShdPnd:"):
                    return bool(int(line.split()[1], 16) >> (signal.SIGSTOP - 1) & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def _stat(pid: int) -> tuple[str | None, int | None]:
    """The process's state letter and process group (/proc/PID/stat); None once reaped."""
    fields = _stat_fields(f"/proc/{pid}/stat")
    if len(fields) > 2 and fields[2].lstrip("-").isdigit():
        return fields[0], int(fields[2])
    return None, None


def _stat_fields(path: str) -> list[str]:
    """A /proc stat file's fields after the command name (the state letter first); empty
    if it cannot be read (the process or thread is gone)."""
    try:
        with open(path) as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


class _Quiet:
    """Counts timed phases in progress; sandbox starts wait for none (bounded)."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._timing = 0

    def begin(self) -> None:
        with self._cv:
            self._timing += 1

    def end(self) -> None:
        with self._cv:
            self._timing -= 1
            self._cv.notify_all()

    def wait(self, timeout: float = QUIET_WAIT_S) -> bool:
        with self._cv:
            return self._cv.wait_for(lambda: self._timing == 0, timeout)


QUIET = _Quiet()


class _Unpaused:
    """Sandboxes a timed phase leaves running, each known by its uid and its cgroup's name
    (VerifyOptions.pause_compiling False: a candidate's sandbox from its job until its first
    GPU request). The listers of the others (cgroups.other_procs, others_by_uid) skip them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._keys: set[int | str] = set()

    def add(self, keys: Collection[int | str]) -> None:
        with self._lock:
            self._keys.update(keys)

    def remove(self, keys: Collection[int | str]) -> None:
        with self._lock:
            self._keys.difference_update(keys)

    def keys(self) -> frozenset[int | str]:
        with self._lock:
            return frozenset(self._keys)


UNPAUSED = _Unpaused()


def renice(proc: subprocess.Popen, nice: int) -> None:  # type: ignore[type-arg]
    """Set the whole sandbox's scheduling priority (its process group; root only).

    The timed runs launch each kernel from the host between two CUDA events: a timed
    process that other sandboxes' torch imports and compiles push off its core idles
    the GPU inside the measured interval (spreads of 30-100% in a busy H200 batch).
    Waking first is all the boost buys: the device lock is exclusive anyway.
    """
    if os.geteuid() != 0:
        return
    try:
        os.setpriority(os.PRIO_PGRP, proc.pid, nice)
    except (ProcessLookupError, PermissionError, OSError):
        pass


class CpuMeter:
    """Fraction of the host's CPU time that was busy between construction and `busy()`
    (/proc/stat; None where there is none)."""

    def __init__(self) -> None:
        self._t0 = cpu_times()

    def busy(self) -> float | None:
        t1 = cpu_times()
        if self._t0 is None or t1 is None or t1[1] <= self._t0[1]:
            return None
        busy, total = t1[0] - self._t0[0], t1[1] - self._t0[1]
        return round(busy / total, 3)


def cpu_times() -> tuple[int, int] | None:
    """(busy, total) jiffies over all CPUs since boot (busy: all but idle and iowait), or
    None off Linux. Also read by benchmarks/host_load.py."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)
