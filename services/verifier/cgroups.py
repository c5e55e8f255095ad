"""Per-candidate cgroup (v2, or v1 pids+memory) where /sys/fs/cgroup is writable.

Best effort: the verdict's isolation string says whether a cgroup was used.
Joining happens in the launcher shell (as root, before the uid drop), so the
whole process tree, threads included, counts against pids.max / memory.max.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
GROUP = "kz-verifier"


@dataclass
class Cgroup:
    """One candidate's cgroup directories (one for v2, one per controller for v1)."""

    dirs: list[Path]
    version: int

    @property
    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs]

    def events(self) -> list[str]:
        """Limit hits worth reporting (OOM kills, pid limit), read before removal."""
        notes = []
        for d in self.dirs:
            for name, key in (("memory.events", "oom_kill"), ("pids.events", "max")):
                try:
                    for line in (d / name).read_text().splitlines():
                        k, _, v = line.partition(" ")
                        if k == key and v.strip() not in ("", "0"):
                            notes.append(f"cgroup {name}: {k} {v.strip()}")
                except OSError:
                    pass
            try:
                if int((d / "memory.failcnt").read_text()) > 0:
                    notes.append("cgroup memory limit reached")
            except (OSError, ValueError):
                pass
        return notes

    def kill(self) -> None:
        if self.version == 2 and (self.dirs[0] / "cgroup.kill").exists():
            _write(self.dirs[0] / "cgroup.kill", "1")
        for d in self.dirs:
            for pid in _read_pids(d):
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass

    def remove(self) -> None:
        self.kill()
        for d in self.dirs:
            for _ in range(50):  # dying tasks linger for a few ms
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


STALE_S = 600.0  # an empty candidate cgroup this old belongs to no live sandbox
_SWEPT = threading.Event()


def create(name: str, pids_max: int, memory_bytes: int | None) -> Cgroup | None:
    """A fresh cgroup for one candidate, or None where cgroups are not writable. The
    first call in a process sweeps away cgroups left by verifiers that died."""
    if os.geteuid() != 0:
        return None
    if not _SWEPT.is_set():
        _SWEPT.set()
        sweep()
    try:
        if (ROOT / "cgroup.controllers").exists():
            return _create_v2(name, pids_max, memory_bytes)
        if (ROOT / "pids").is_dir():
            return _create_v1(name, pids_max, memory_bytes)
    except OSError:
        return None
    return None


def _create_v2(name: str, pids_max: int, memory_bytes: int | None) -> Cgroup | None:
    parent = ROOT / GROUP
    parent.mkdir(exist_ok=True)
    available = (ROOT / "cgroup.controllers").read_text().split()
    wanted = [c for c in ("pids", "memory") if c in available]
    if "pids" not in wanted:
        return None
    _write(ROOT / "cgroup.subtree_control", " ".join("+" + c for c in wanted))
    _write(parent / "cgroup.subtree_control", " ".join("+" + c for c in wanted))
    d = parent / name
    d.mkdir()
    _write(d / "pids.max", str(pids_max))
    if memory_bytes and "memory" in wanted:
        _write(d / "memory.max", str(memory_bytes))
        if (d / "memory.swap.max").exists():
            _write(d / "memory.swap.max", "0")
    return Cgroup([d], 2)


def _create_v1(name: str, pids_max: int, memory_bytes: int | None) -> Cgroup | None:
    pd = ROOT / "pids" / GROUP / name
    pd.mkdir(parents=True)
    _write(pd / "pids.max", str(pids_max))
    dirs = [pd]
    if memory_bytes and (ROOT / "memory").is_dir():
        md = ROOT / "memory" / GROUP / name
        try:
            md.mkdir(parents=True)
            _write(md / "memory.limit_in_bytes", str(memory_bytes))
            dirs.append(md)
        except OSError:
            pass
    return Cgroup(dirs, 1)


def other_procs(own: Cgroup, skip: Collection[object] = ()) -> list[int]:
    """Pids in every candidate cgroup on the host but `own` and those named in `skip`
    (every verifier's sandboxes share one parent group: v2's, or v1's pids hierarchy,
    where every sandbox has one)."""
    mine = own.dirs[0]
    try:
        dirs = [d for d in mine.parent.iterdir()
                if d.name.startswith("c-") and d != mine and d.name not in skip]
    except OSError:
        return []
    return [pid for d in dirs for pid in _read_pids(d)]


def sweep(max_age_s: float = STALE_S) -> int:
    """Remove empty candidate cgroups (c-*) not changed for `max_age_s`: a verifier that is
    killed never removes its sandboxes' cgroups (its candidates die with it, their groups
    stay, one per live sandbox). Shared by every verifier on the host, so the age spares
    a group another verifier has made and not yet joined. Returns how many went."""
    removed, now = 0, time.time()
    for parent in (ROOT / GROUP, ROOT / "pids" / GROUP, ROOT / "memory" / GROUP):
        try:
            dirs = [d for d in parent.iterdir() if d.name.startswith("c-") and d.is_dir()]
        except OSError:
            continue
        for d in dirs:
            try:
                if now - d.stat().st_mtime < max_age_s or _read_pids(d):
                    continue
                d.rmdir()  # fails (busy) if a process joined meanwhile
                removed += 1
            except OSError:
                pass
    return removed


def _write(path: Path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _read_pids(d: Path) -> list[int]:
    try:
        return [int(x) for x in (d / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []
