"""Filesystem views for the sandbox: what a candidate may see, as bwrap args or a mount script.

A candidate sees read-only: /usr (and the /bin, /lib* links), the Python
installation and its site-packages, the dynamic-linker config, on GPU hosts the
driver libraries and /dev/nvidia*; read-write: its private work dir, its own
Triton cache dir and a tmpfs /tmp; read-only: the trial inputs. Not the repo,
not the verifier, not /root or /home, not other candidates' dirs.
"""

from __future__ import annotations

import glob
import os
import shlex
import site
import stat
import sys
from dataclasses import dataclass

WORK, INPUTS, CACHE = "/kz/work", "/kz/inputs", "/kz/cache"
_ETC_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
              "/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/localtime")
_TOP_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty")


@dataclass(frozen=True)
class View:
    """Host paths a sandbox binds; sandbox paths are the same except work/inputs/cache."""

    work: str
    inputs: str
    cache: str
    device: str


def python_paths() -> list[str]:
    """The interpreter, stdlib and site-packages directories the harness needs."""
    paths = {sys.base_prefix, sys.prefix, sys.exec_prefix, os.path.dirname(
        os.path.realpath(sys.executable))}
    for p in list(site.getsitepackages()) + sys.path:
        if p and ("site-packages" in p or "dist-packages" in p) and os.path.isdir(p):
            paths.add(p)
    return _minimal(sorted(p for p in paths if os.path.exists(p)))


def system_ro_paths(device: str) -> list[str]:
    """Read-only host paths besides /usr: linker config, Python, GPU driver libraries."""
    paths = [p for p in _ETC_FILES if os.path.exists(p)] + python_paths()
    if device == "cuda":
        paths += [p for p in ("/usr/local/nvidia", "/usr/local/cuda", "/sys", "/opt/nvidia")
                  if os.path.exists(p)]
        paths += glob.glob("/usr/local/cuda-*")
        for p in os.environ.get("LD_LIBRARY_PATH", "").split(":"):
            if p and os.path.isdir(p):
                paths.append(os.path.realpath(p))
    return [p for p in _minimal(sorted(set(paths))) if not p.startswith("/usr/")]


def gpu_nodes() -> list[str]:
    """Device nodes CUDA needs (the driver control/uvm nodes and every GPU)."""
    nodes = glob.glob("/dev/nvidia*") + glob.glob("/dev/nvidia-caps/*") + glob.glob("/dev/dri/*")
    return sorted(n for n in nodes if os.path.exists(n) and not os.path.isdir(n))


def _minimal(paths: list[str]) -> list[str]:
    """Drop paths already covered by a listed ancestor."""
    out: list[str] = []
    for p in sorted(paths, key=len):
        if not any(p == q or p.startswith(q.rstrip("/") + "/") for q in out):
            out.append(p)
    return sorted(out)


def blocked_for_others(path: str) -> bool:
    """Whether an unprivileged uid cannot traverse to `path` (an ancestor lacks o+x)."""
    parts = os.path.realpath(path).split("/")
    for i in range(2, len(parts)):
        d = "/".join(parts[:i])
        try:
            if not os.stat(d).st_mode & stat.S_IXOTH:
                return True
        except OSError:
            return True
    return False


def bwrap_args(view: View, staged: dict[str, str]) -> list[str]:
    """bwrap arguments (run after the uid drop). `staged` maps blocked paths to reachable ones."""
    # The private /tmp goes first: a later tmpfs would hide a venv or clone that lives under /tmp.
    a = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
         "--ro-bind", "/usr", "/usr", "--tmpfs", "/tmp"]
    a += _link_args(lambda src, dst: ["--symlink", src, dst], lambda p: ["--ro-bind", p, p])
    for p in system_ro_paths(view.device):
        a += ["--ro-bind", staged.get(p, p), p]
    a += ["--proc", "/proc", "--dev", "/dev",
          "--bind", view.work, WORK, "--ro-bind", view.inputs, INPUTS, "--bind", view.cache, CACHE]
    if view.device == "cuda":
        for n in gpu_nodes():
            a += ["--dev-bind", n, n]
    # The root is bwrap's own tmpfs (dirs it made for the binds): read-only too.
    return a + ["--remount-ro", "/", "--chdir", WORK, "--"]


def _link_args(link, bind) -> list[str]:  # type: ignore[no-untyped-def]
    out: list[str] = []
    for top in _TOP_LINKS:
        if os.path.islink(top):
            out += link(os.readlink(top), top)
        elif os.path.isdir(top):
            out += bind(top)
    return out


def stage_script(staged: dict[str, str]) -> str:
    """Root-side shell lines binding blocked paths to reachable staging dirs (private mount ns)."""
    lines = ["mount --make-rprivate /"]
    for src, dst in staged.items():
        lines.append(f"mount --rbind {shlex.quote(src)} {shlex.quote(dst)}")
    return "\n".join(lines)


def chroot_script(view: View, root: str) -> str:
    """Root-side shell building a minimal root at `root` (inside unshare), bwrap-like."""
    early, late = chroot_parts(view, root)
    return early + "\n" + late


def chroot_parts(view: View, root: str) -> tuple[str, str]:
    """`chroot_script` in two: the binds (run in the new mount namespace) and what must run
    inside the new pid namespace: its /proc, then the whole root read-only."""
    q = shlex.quote
    R = q(root)
    lines = ["set -e", "mount --make-rprivate /",
             f"mount -t tmpfs -o mode=0755,size=16m kzroot {R}"]

    def ro(p: str, dst: str | None = None) -> None:
        d = R + q(dst or p)
        lines.append(f"mkdir -p {d}" if os.path.isdir(p) else
                     f"mkdir -p $(dirname {d}) && touch {d}")
        lines.append(f"mount --rbind {q(p)} {d} && mount -o remount,bind,ro {d}")

    ro("/usr")
    # The private /tmp before the other binds, so it cannot hide a venv that lives under /tmp.
    lines += [f"mkdir -p {R}/tmp", f"mount -t tmpfs -o mode=1777,size=1g kztmp {R}/tmp"]
    for top in _TOP_LINKS:
        if os.path.islink(top):
            lines.append(f"ln -s {q(os.readlink(top))} {R}{top}")
        elif os.path.isdir(top):
            ro(top)
    for p in system_ro_paths(view.device):
        ro(p)
    lines += [f"mkdir -p {R}/dev {R}/proc {R}{WORK} {R}{INPUTS} {R}{CACHE}",
              f"mount -t tmpfs -o mode=0755,size=1m kzdev {R}/dev",
              f"mount --bind {q(view.work)} {R}{WORK}",
              f"mount --bind {q(view.inputs)} {R}{INPUTS} && "
              f"mount -o remount,bind,ro {R}{INPUTS}",
              f"mount --bind {q(view.cache)} {R}{CACHE}",
              f"ln -s /proc/self/fd {R}/dev/fd", f"mkdir -p {R}/dev/shm",
              f"mount -t tmpfs -o mode=1777,size=256m kzshm {R}/dev/shm"]
    nodes = [f"/dev/{n}" for n in _DEV_NODES if os.path.exists(f"/dev/{n}")]
    nodes += gpu_nodes() if view.device == "cuda" else []
    for n in nodes:
        lines.append(f"mkdir -p $(dirname {R}{q(n)}) && touch {R}{q(n)} && "
                     f"mount --bind {q(n)} {R}{q(n)}")
    late = ["set -e", f"mount -t proc proc {R}/proc", f"mount -o remount,bind,ro {R}"]
    return "\n".join(lines), "\n".join(late)
