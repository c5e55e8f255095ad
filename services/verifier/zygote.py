"""Fork server: imports torch and triton ONCE, then forks each sandbox from that state.

A fresh sandboxed Python spends 4-6 CPU-s importing torch before it can look at a
candidate (the H200 host: benchmarks/verifier_notes.md), on every candidate. This
process pays it once. It is trusted: started by the verifier (as root, in the host's
namespaces, with the sandboxes' own scrubbed environment), it never runs candidate
code, never makes a CUDA context (a context does not survive fork) and holds no
secrets, because nothing but torch, triton and the standard library is imported.

For each request it forks a child that builds the same sandbox the `unshare+uid`
chain builds, in this order, before any candidate code can run:
  new session; join the cgroup; unshare mount/net/ipc/uts namespaces; the mount script
  (a minimal read-only root, sandbox_mounts.chroot_parts); unshare the pid namespace and
  fork: the grandchild is pid 1 there (the child only relays its exit status, like
  `unshare --fork --kill-child`); mount /proc; chroot; rlimits; drop every group and
  the uid; no_new_privs; parent-death signal; only the passed fds left open; the scrubbed
  environment; then the harness runs in-process (runpy), its imports already done.

Protocol (SOCK_SEQPACKET on fd `KZ_ZYGOTE_FD`): a request is one JSON message with four
fds (stdin, stdout, stderr, control pipe); the reply `{"id", "pid"}` or `{"id",
"error"}`; later `{"exit": pid, "status": rc}` (rc < 0: killed by that signal); the
verifier answers `{"release": pid}` once it is done signalling that pid. When the
verifier's end closes, every child is killed and the server exits.
Standalone on purpose (stdlib + torch + triton): it runs from the verifier's package dir.
"""

from __future__ import annotations

import os  # both already loaded by the interpreter itself: nothing on sys.path is read
import sys

if __name__ == "__main__" and sys.path and sys.path[0] == os.path.dirname(
        os.path.abspath(__file__)):
    # Run as a script, Python puts this file's directory (the verifier package) first on
    # sys.path: a sibling module named like a stdlib one would shadow it in every sandbox.
    sys.path.pop(0)

import ctypes
import json
import resource
import select
import signal
import socket
import subprocess

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWNET, CLONE_NEWPID = 0x40000000, 0x20000000
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
LIMITS = {"cpu": resource.RLIMIT_CPU, "core": resource.RLIMIT_CORE,
          "fsize": resource.RLIMIT_FSIZE, "nproc": resource.RLIMIT_NPROC,
          "nofile": resource.RLIMIT_NOFILE, "as": resource.RLIMIT_AS}
_libc = ctypes.CDLL(None, use_errno=True)


PRELOAD = ("torch", "torch.utils._python_dispatch", "triton", "triton.language")


def preload(interpret: bool) -> None:
    """What every sandbox imports first; no CUDA context (it would not survive a fork)."""
    import importlib

    for name in PRELOAD + (("triton.runtime.interpreter",) if interpret else ()):
        importlib.import_module(name)
    if not interpret:
        _triton_key()


def _triton_key() -> None:
    """Triton keys every compile and cache lookup with a hash of its own files and its
    ~0.5 GB libtriton, computed once per process (an lru_cache): 0.48 s on the dev box,
    likely most of the 0.45 s a sandbox's first Triton launch took on an H100 with
    everything cached (benchmarks/launcher_probe.py). Computed here, every sandbox forked
    from this process has it. Files only: no CUDA, no candidate."""
    import importlib

    for name in ("triton.runtime.cache", "triton.compiler.compiler"):  # 3.3+, older
        try:
            key = getattr(importlib.import_module(name), "triton_key", None)
        except ImportError:
            continue
        if callable(key):
            key()
            return


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _prctl(option: int, value: int) -> None:
    _check(_libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0), f"prctl({option})")


def _sh(script: str) -> None:
    subprocess.run(["sh", "-c", script], check=True, env={"PATH": SAFE_PATH},
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)


def child(req: dict, fds: list[int], server: int) -> None:
    """In the forked child (root, host namespaces): build the sandbox, run the payload."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the server dies (with the verifier): so do we
    if os.getppid() != server:  # it died before the line above
        os._exit(1)
    os.setsid()
    for path in req["cgroup_procs"]:
        with open(path, "w") as f:
            f.write(str(os.getpid()))
    _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS), "unshare")
    _sh(req["mounts"])
    _check(_libc.unshare(CLONE_NEWPID), "unshare(pid)")
    pid = os.fork()
    if pid:  # relay pid 1's fate, like unshare --fork --kill-child
        for fd in fds:
            os.close(fd)
        _, raw = os.waitpid(pid, 0)
        os._exit(128 + os.WTERMSIG(raw) if os.WIFSIGNALED(raw) else os.WEXITSTATUS(raw))
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the relay dies: so does the sandbox
    _sh(req["late_mounts"])  # /proc of the new pid namespace, the root read-only
    os.chroot(req["root"])
    os.chdir(req["cwd"])
    for name, (soft, hard) in req["rlimits"].items():
        resource.setrlimit(LIMITS[name], (soft, hard))
    uid = req["uid"]
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # a credential change cleared it
    _install_fds(fds, req["ctrl_fd"])
    os.environ.clear()
    os.environ.update(req["env"])
    _run(req["argv"])


def _install_fds(fds: list[int], ctrl_fd: int) -> None:
    """stdin, stdout, stderr, the control pipe at the number the parent announces; no other."""
    moved = [os.dup(fd) for fd in fds]  # out of the way of the targets first
    for fd in fds:
        os.close(fd)
    for src, dst in zip(moved, (0, 1, 2, ctrl_fd)):  # ctrl last: it may clobber no source
        if src != dst:
            os.dup2(src, dst)
            os.close(src)
    os.closerange(3, ctrl_fd)
    os.closerange(ctrl_fd + 1, 1 << 16)


def _run(argv: list[str]) -> None:
    """The payload in this interpreter: `script.py args` or `-c code` (after our flags)."""
    import runpy

    rest = [a for a in argv[1:] if a not in ("-I", "-B", "-u", "-S", "-E", "-s")]
    if not rest or (rest[0].startswith("-") and rest[0] != "-c"):
        # this interpreter already runs with -I -B -u: other flags cannot apply any more
        print(f"kz-zygote: unsupported interpreter arguments {argv[1:]}", file=sys.stderr)
        _flush()
        os._exit(2)
    try:
        if rest and rest[0] == "-c":
            sys.argv = ["-c"] + rest[2:]
            sys.path.insert(0, "")
            # the sandbox's own payload, as `python -c` would run it (already isolated)
            exec(compile(rest[1], "<string>", "exec"), {"__name__": "__main__"})  # noqa: S102
        else:
            sys.argv = rest
            sys.path.insert(0, os.path.dirname(rest[0]))
            runpy.run_path(rest[0], run_name="__main__")
    except SystemExit as e:
        code = e.code
        _flush()
        os._exit(code if isinstance(code, int) else (0 if code is None else 1))
    except BaseException:  # noqa: BLE001 - reported like an uncaught exception
        import traceback

        traceback.print_exc()
        _flush()
        os._exit(1)
    _flush()
    os._exit(0)


def _flush() -> None:
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except (OSError, ValueError):
            pass


def serve(sock: socket.socket) -> None:
    """One request at a time (a fork takes ~10-30 ms); report children's exits between.

    An exited child stays a zombie until the verifier sends `{"release": pid}` (after its
    own killpg of the child's group), as with a Popen child: its pid cannot be reused by
    an unrelated process while the verifier may still signal it."""
    kids: set[int] = set()
    reported: set[int] = set()
    while True:
        ready, _, _ = select.select([sock], [], [], 0.02)
        _report_exits(sock, kids, reported)
        if not ready:
            continue
        try:
            msg, fds, _, _ = socket.recv_fds(sock, 1 << 16, 4)
        except OSError:
            msg, fds = b"", []
        if not msg:  # the verifier is gone: so are its sandboxes
            for pid in kids:
                _kill(pid)
            return
        try:
            req = json.loads(msg)
            if "release" in req:
                _release(int(req["release"]), kids, reported)
                continue
            if len(fds) != 4 or not isinstance(req.get("id"), int):
                raise ValueError(f"want an id and 4 fds, got {len(fds)} fds")
        except (ValueError, TypeError, AttributeError) as exc:
            _reply(sock, {"id": None, "error": f"bad request: {exc}"})
            for fd in fds:
                os.close(fd)
            continue
        server = os.getpid()
        try:
            pid = os.fork()
        except OSError as exc:
            _reply(sock, {"id": req["id"], "error": f"fork failed: {exc}"})
            for fd in fds:
                os.close(fd)
            continue
        if pid == 0:
            try:
                sock.close()
                child(req, fds, server)
            except BaseException as exc:  # noqa: BLE001 - the sandbox never ran
                try:
                    os.write(fds[2], f"kz-zygote: sandbox set-up failed: {exc!r}\n".encode())
                except (OSError, IndexError):
                    pass
            os._exit(127)
        for fd in fds:
            os.close(fd)
        kids.add(pid)
        _reply(sock, {"id": req["id"], "pid": pid})


def _report_exits(sock: socket.socket, kids: set[int], reported: set[int]) -> None:
    """Tell the verifier about each newly exited child, leaving it unreaped (WNOWAIT)."""
    for pid in kids - reported:
        try:
            info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            info = None
        if info is None:
            continue
        status = -info.si_status if info.si_code in (os.CLD_KILLED, os.CLD_DUMPED) \
            else info.si_status
        reported.add(pid)
        _reply(sock, {"exit": pid, "status": status})


def _release(pid: int, kids: set[int], reported: set[int]) -> None:
    if pid in kids:
        _kill(pid)  # a child released before it exited is not left running
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
        kids.discard(pid)
        reported.discard(pid)


def _kill(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _reply(sock: socket.socket, obj: dict) -> None:
    try:
        sock.send(json.dumps(obj).encode())
    except OSError:
        pass


def main() -> None:
    sock = socket.socket(fileno=int(os.environ.pop("KZ_ZYGOTE_FD")))
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    preload(interpret)
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # never outlive the verifier's spawner thread
    sock.send(json.dumps({"ready": os.getpid()}).encode())
    serve(sock)


if __name__ == "__main__":
    main()
