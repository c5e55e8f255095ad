"""Sandbox uids: a uid is handed out only with nothing left running as it, and a teardown
ends everything of its uid, a process that keeps forking included."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable

import pytest

from services.verifier import sandbox_uids as U

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="sandbox uids need root")

# Each process of it forks copies of itself without end; RLIMIT_NPROC (which binds a
# non-root uid) keeps the host safe, and the children refill every slot a kill frees.
# bash, not dash: dash exits when a fork fails, bash retries.
FORK_BOMB = "f() { while :; do f & done; }; f"


def _as_uid(uid: int, script: str, nproc: int = 64) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["prlimit", f"--nproc={nproc}:{nproc}", "--", "bash", "-c", script],
                            user=uid, group=uid, extra_groups=[], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _live(uid: int) -> list[int]:
    return U.live_uid_processes(uid, uid + 1)


def _wait_for(ok: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_kill_uid_ends_a_fork_bomb() -> None:
    """A scan-and-kill misses the children forked between its scan and its kills; the
    kill from the uid itself (kill(-1)) takes every process of it at once."""
    uid = U.UIDS.acquire()
    proc = _as_uid(uid, FORK_BOMB)
    try:
        _wait_for(lambda: len(_live(uid)) >= 32)  # the bomb fills its slots
        assert U.kill_uid(uid)
        assert _live(uid) == []
        time.sleep(0.3)  # nothing forked in flight comes back
        assert _live(uid) == []
    finally:
        proc.wait(timeout=10)
        U.UIDS.release(uid)


def test_a_uid_is_handed_out_only_with_nothing_left_running_as_it() -> None:
    """A process left behind as a uid (stopped, as by a timed phase, and escaped from its
    sandbox's teardown) must not share that uid with the next candidate: acquiring the
    uid kills it first. The uid is held host-wide (its flock) while the leftover starts,
    so no live sandbox has it."""
    pool = U.UidPool(size=1)  # always UID_BASE, under the host-wide locks
    uid = pool._try_lock()
    if uid is None:
        pytest.skip(f"uid {U.UID_BASE} is in use on this host")
    leftover = _as_uid(uid, "sleep 60")
    try:
        _wait_for(lambda: bool(_live(uid)))
        for pid in _live(uid):
            os.kill(pid, signal.SIGSTOP)
        pool.release(uid)  # a verifier that died: its lock goes, its process stays
        assert pool.acquire() == uid
        assert _live(uid) == []
    finally:
        leftover.kill()
        leftover.wait(timeout=10)
        pool.release(uid)
