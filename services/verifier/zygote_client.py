"""The verifier's side of the fork server (zygote.py): start it, ask it for sandboxes.

`spawn` returns a `ZygoteProc`, the part of subprocess.Popen the supervisor uses (pid,
stdin, stdout, poll, wait, returncode), so a sandbox forked by the zygote is supervised,
paused, reniced and killed exactly like one started by the `unshare` chain: its relay
leads its own session (killpg reaches the sandbox too), and its uid and cgroup are the
slot's. One zygote per distinct sandbox environment (torch reads some variables at
import), started on first use and kept for the life of the verifier process.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import IO, Any

from services.verifier import sandbox_supervise as S
from services.verifier.exceptions import SandboxError
from services.verifier.quiet import QUIET

SCRIPT = Path(__file__).with_name("zygote.py")
START_TIMEOUT_S = 180.0  # importing torch on a loaded host
SPAWN_TIMEOUT_S = 60.0


class ZygoteProc:
    """A sandbox forked by the zygote, seen as a Popen."""

    def __init__(self, server: Zygote, pid: int, done: threading.Event, status: list[int],
                 stdin: IO[bytes], stdout: IO[bytes]) -> None:
        self.pid, self.stdin, self.stdout = pid, stdin, stdout
        self._server, self._done, self._status = server, done, status
        self.returncode: int | None = None

    def release(self) -> None:
        """Done signalling it (after killpg and wait): the server may reap the pid now."""
        self._server.release(self.pid)

    def poll(self) -> int | None:
        if self.returncode is None and self._done.is_set():
            self.returncode = self._status[0]
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._done.wait(timeout):
            raise subprocess.TimeoutExpired("zygote sandbox", timeout or 0.0)
        rc = self.poll()
        assert rc is not None
        return rc


class Zygote:
    """One running fork server and the thread that reads its replies."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock = mine
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._pending: dict[int, Future[int]] = {}
        self._exits: dict[int, tuple[threading.Event, list[int]]] = {}
        outer = ["setpriv", *S.pdeathsig_args(), "--"] if S.pdeathsig_args() else []
        with open(log, "ab") as out:
            self.proc = S.spawn(
                outer + [sys.executable, "-I", "-B", "-u", str(SCRIPT)],
                env={**env, "KZ_ZYGOTE_FD": str(theirs.fileno())}, pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL, stdout=out, stderr=out, close_fds=True,
                cwd="/", start_new_session=True)
        theirs.close()
        self.sock.settimeout(START_TIMEOUT_S)
        try:
            hello = json.loads(self.sock.recv(1 << 16) or b"{}")
        except (OSError, ValueError) as exc:
            self.close()
            raise SandboxError(f"fork server did not start: {exc} (log: {log})") from exc
        if "ready" not in hello:
            self.close()
            raise SandboxError(f"fork server did not start (log: {log})")
        self.sock.settimeout(None)
        self._reader = threading.Thread(target=self._read, name="kz-zygote-reader",
                                        daemon=True)
        self._reader.start()

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None and self._reader.is_alive()

    def spawn(self, request: dict[str, Any], fds: list[int],
              stdin: IO[bytes], stdout: IO[bytes]) -> ZygoteProc:
        """Fork one sandbox; `fds` (stdin, stdout, stderr, control) go to it."""
        QUIET.wait()  # a start (CUDA context, imports) disturbs a timed phase: wait it out
        done: Future[int] = Future()
        with self._lock:
            rid = next(self._ids)
            self._pending[rid] = done
            try:
                socket.send_fds(self.sock, [json.dumps({**request, "id": rid}).encode()], fds)
            except OSError as exc:
                self._pending.pop(rid, None)
                raise SandboxError(f"fork server unreachable: {exc}") from exc
        try:
            pid = done.result(timeout=SPAWN_TIMEOUT_S)
        except TimeoutError as exc:
            # A late fork would run with a uid the caller is about to give back: end the
            # server (and whatever it forks) instead; the next request starts a new one.
            self.close()
            raise SandboxError("fork server did not answer in time") from exc
        except Exception as exc:  # the server's own error (the sandbox never ran)
            raise SandboxError(f"fork server: {exc}") from exc
        with self._lock:
            event, status = self._exits[pid]
        return ZygoteProc(self, pid, event, status, stdin, stdout)

    def release(self, pid: int) -> None:
        with self._lock:
            try:
                self.sock.send(json.dumps({"release": pid}).encode())
            except OSError:
                pass  # the server is gone, and its children with it

    def _read(self) -> None:
        while True:
            try:
                msg = self.sock.recv(1 << 16)
            except OSError:
                msg = b""
            if not msg:
                break
            self._dispatch(json.loads(msg))
        with self._lock:  # the server died: nothing pending will be answered
            for fut in self._pending.values():
                fut.set_exception(SandboxError("fork server exited"))
            self._pending.clear()
            for event, status in self._exits.values():
                if not event.is_set():
                    status[0] = -9
                    event.set()

    def _dispatch(self, msg: dict[str, Any]) -> None:
        if "exit" in msg:
            with self._lock:
                entry = self._exits.pop(msg["exit"], None)
            if entry is not None:
                entry[1][0] = int(msg["status"])
                entry[0].set()
            return
        with self._lock:
            fut = self._pending.pop(msg.get("id"), None)  # type: ignore[arg-type]
            if fut is None:
                return
            if "pid" in msg:
                self._exits[msg["pid"]] = (threading.Event(), [0])  # before any exit notice
                fut.set_result(int(msg["pid"]))
            else:
                fut.set_exception(SandboxError(str(msg.get("error"))))

    def close(self) -> None:
        try:
            self.sock.close()  # the server kills its children and exits
        finally:
            S.killpg(self.proc)
            self.proc.wait()


_ZYGOTES: dict[frozenset[tuple[str, str]], Zygote] = {}
_GUARD = threading.Lock()


def get(env: dict[str, str]) -> Zygote:
    """The zygote for this sandbox environment, started on first use (or after it died)."""
    key = frozenset(env.items())
    with _GUARD:
        z = _ZYGOTES.get(key)
        if z is None or not z.alive:
            logs = Path(os.environ.get("KZ_VERIFIER_TMP", tempfile.gettempdir()))
            log = logs / f"kz-zygote-{os.getpid()}-{len(_ZYGOTES)}.log"
            z = _ZYGOTES[key] = Zygote(env, log)
        return z
