"""Sandbox uids: one unprivileged uid per live sandbox, exclusive host-wide, and the
process scans that find (and kill) whatever still runs as one.

Split from sandbox_supervise.py: a uid outlives the supervision of one child (the
pool hands it out before the child starts and takes it back after the teardown).
"""

from __future__ import annotations

import fcntl
import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Collection
from pathlib import Path

UID_BASE = 61000
UID_RANGE = 1024  # host-wide: every verifier process on the host shares it


class UidPool:
    """Distinct unprivileged uids for concurrent slots, exclusive host-wide.

    Several verifier processes on one host (workers of one consumer group) draw from the
    same uid range; a uid in use by another process would let candidates of the two
    signal or read each other, and one teardown's kill-by-uid would kill the other's
    candidate. So each uid is held by an flock on a file under a shared lock dir
    (the kernel drops it when the holder dies: a crashed verifier leaks no uid).
    Containers sharing a kernel but not this dir must mount one dir in common.
    A uid is handed out only with nothing running as it: what a crashed verifier's
    candidates left behind, or a teardown could not end, is killed first (a uid whose
    processes will not die is passed over), so a new candidate never shares its uid.
    """

    def __init__(self, size: int = UID_RANGE, lock_dir: str | None = None) -> None:
        self.size = size
        self.lock_dir = Path(lock_dir or os.environ.get("KZ_VERIFIER_UID_LOCKS",
                                                        "/tmp/kz-verifier-uids"))
        self._held: dict[int, int] = {}  # uid -> fd of its lock file
        self._cv = threading.Condition()

    def acquire(self) -> int:
        with self._cv:
            while True:
                uid = self._try_lock()
                if uid is not None:
                    return uid
                self._cv.wait(0.1)  # another process may free one: poll, bounded

    def release(self, uid: int) -> None:
        with self._cv:
            fd = self._held.pop(uid, None)
            if fd is not None:
                os.close(fd)  # closing drops the flock
            self._cv.notify()

    def _try_lock(self) -> int | None:
        self.lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        start = random.randrange(self.size)  # spread processes over the range
        for i in range(self.size):
            uid = UID_BASE + (start + i) % self.size
            if uid in self._held:
                continue
            fd = os.open(self.lock_dir / str(uid), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            if not kill_uid(uid):  # a process left as this uid would share it
                os.close(fd)
                continue
            self._held[uid] = fd
            return uid
        return None


UIDS = UidPool()


def live_uid_processes(lo: int, hi: int, skip: Collection[object] = ()) -> list[int]:
    """Pids of live processes whose real uid is in [lo, hi) and not in `skip`."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            u = _proc_uid(entry)
            if u is not None and lo <= u < hi and u not in skip:
                out.append(int(entry))
    return out


def kill_uid(uid: int, timeout: float = 5.0) -> bool:
    """Kill every process still running as the slot's uid (escaped process groups, a fork
    bomb, a verifier's leftovers); True once none is left. A scan-then-kill misses what
    forks between the scan and the kill, so the kill comes from the uid itself where the
    host lets us switch to it: kill(-1) signals every process of the uid in one pass, and
    a fork racing with it is aborted by the kernel. The scans confirm, until `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        pids = live_uid_processes(uid, uid + 1)
        if not pids:
            return True
        if time.monotonic() > deadline:
            return False
        if not _kill_all_as(uid):
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        time.sleep(0.01)


def _kill_all_as(uid: int) -> bool:
    """kill(-1, SIGKILL) run as `uid` (the kill binary, dropped to the uid by subprocess:
    no Python code runs in the forked child); False where that cannot run."""
    if os.geteuid() != 0:
        return False
    try:
        subprocess.run(["kill", "-9", "-1"], user=uid, group=uid, extra_groups=[],
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return True


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
