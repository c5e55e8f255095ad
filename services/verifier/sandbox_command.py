"""The command line that starts a sandboxed child in each isolation mode (all but the fork
server's, which forks its children itself: zygote.py), and the rlimits every mode applies.

Split from sandbox.py, which runs and supervises what this builds.
"""

from __future__ import annotations

import os
import shlex
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from services.verifier import cgroups
from services.verifier import sandbox_mounts as M
from services.verifier import sandbox_supervise as S
from services.verifier.exceptions import SandboxError
from services.verifier.zygote import LIMITS

if TYPE_CHECKING:  # sandbox imports this module
    from services.verifier.sandbox import Limits


def _prlimit(limits: Limits, device: str) -> list[str]:
    if not shutil.which("prlimit"):
        return []  # rlimit_preexec applies them instead
    return ["prlimit", *(f"--{name}={soft}:{hard}"
                         for name, (soft, hard) in rlimits(limits, device).items()), "--"]


def rlimits(limits: Limits, device: str) -> dict[str, tuple[int, int]]:
    """Every sandbox's rlimits, named as prlimit's options: applied by prlimit, by
    rlimit_preexec where it is missing, or by the sandbox itself (the zygote's children).
    No address-space limit on CUDA: it needs huge virtual reservations."""
    out = {"cpu": (limits.cpu_s, limits.cpu_s + 5), "core": (0, 0),
           "fsize": (limits.fsize_bytes, limits.fsize_bytes),
           "nproc": (limits.nproc, limits.nproc), "nofile": (4096, 4096)}
    if device == "cpu" and limits.memory_bytes:
        out["as"] = (limits.memory_bytes, limits.memory_bytes)
    return out


def rlimit_preexec(limits: Limits, device: str) -> Callable[[], None]:
    """Fallback where prlimit is missing (preexec_fn: only resource calls, no imports)."""
    import resource

    pairs = [(LIMITS[k], v) for k, v in rlimits(limits, device).items()]

    def apply() -> None:
        for res, value in pairs:
            resource.setrlimit(res, value)

    return apply


def _setpriv(uid: int) -> list[str]:
    # --pdeathsig again after the drop: changing the uid clears the parent-death signal.
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs",
            *S.pdeathsig_args(), "--"]


def command(mode: str, view: M.View, argv: list[str], uid: int, cg: cgroups.Cgroup | None,
             base: Path, limits: Limits) -> list[str]:
    """The launcher chain, first killed if the verifier dies (its parent: the spawner)."""
    outer = ["setpriv", *S.pdeathsig_args(), "--"] if S.pdeathsig_args() else []
    return outer + _chain(mode, view, argv, uid, cg, base, limits)


def _chain(mode: str, view: M.View, argv: list[str], uid: int, cg: cgroups.Cgroup | None,
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
