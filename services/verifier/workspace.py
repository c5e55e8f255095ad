"""Private directories, scrubbed environments and safe loading of sandbox-written tensors."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import torch

from services.verifier import sandbox_mounts as M

PKG = Path(__file__).resolve().parent
MAX_CACHE_COPY_BYTES = 256 << 20  # a candidate cannot grow the compile cache without bound
MAX_CACHE_COPY_FILES = 4096
# Variables passed through from the verifier's environment (device selection, driver
# paths, the multi-GPU safety switches); everything else is scrubbed.
PASSTHROUGH = ("CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "TRITON_LIBCUDA_PATH",
               "TRITON_PTXAS_PATH", "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
               "NVSHMEM_DISABLE_NVLS", "CUDA_HOME", "NVIDIA_VISIBLE_DEVICES")


def new_dir(base: Path, prefix: str) -> Path:
    d = base / f"{prefix}-{uuid.uuid4().hex[:12]}"
    d.mkdir(mode=0o700)
    return d


def make_base(tmp_dir: str) -> Path:
    """A per-session root: traversable (0711) but not listable by sandboxed uids."""
    root = Path(tmp_dir or os.environ.get("KZ_VERIFIER_TMP", "/tmp"))
    base = root / f"kzv-{uuid.uuid4().hex[:12]}"
    base.mkdir(parents=True, mode=0o711)
    os.chmod(base, 0o711)
    return base


def populate(work: Path, files: dict[str, str | Path]) -> None:
    """Write text files / copy package modules into a private work dir."""
    (work / "home").mkdir(exist_ok=True)
    (work / "tmp").mkdir(exist_ok=True)
    for name, content in files.items():
        if isinstance(content, Path):
            shutil.copyfile(content, work / name)
        else:
            (work / name).write_text(content)


def env_for(device: str, inside: M.View, interpret: bool) -> dict[str, str]:
    env = {
        "HOME": f"{inside.work}/home", "TMPDIR": f"{inside.work}/tmp",
        "TRITON_CACHE_DIR": f"{inside.cache}/triton",
        "TORCHINDUCTOR_CACHE_DIR": f"{inside.cache}/inductor",
        "PYTHONHASHSEED": "0", "LANG": "C.UTF-8",
    }
    # Threads for torch's CPU ops. On CUDA the sandbox's CPU work is I/O and launches, and
    # every OpenMP thread costs CPU at `import torch`: 3.95 CPU-s with 1 against 4.23 with
    # 2 and 6.07 with the H200 host's 16 (results/import_probe_NVIDIA_H200_2026-12-03c.json).
    threads = "1" if device == "cuda" else "2"
    env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = threads
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    for k in PASSTHROUGH:
        if k in os.environ and k not in env:
            env[k] = os.environ[k]
    return env


def make_readable(d: Path) -> None:
    """Inputs are world-readable (files 0644, dirs 0755) so any sandbox uid can load them."""
    root_owned = os.geteuid() == 0  # the slot uid that wrote them is recycled for candidates
    for root, dirs, files in os.walk(d):
        for n in dirs + files:
            p = os.path.join(root, n)
            if root_owned:
                os.lchown(p, 0, 0)
            os.chmod(p, 0o755 if n in dirs else 0o644)
    if root_owned:
        os.chown(d, 0, 0)
    os.chmod(d, 0o755)


def link_or_copy(src: Path, dst: Path) -> None:
    """Hard link (inputs are root-owned 0644 and mounted read-only) or copy across devices."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def copy_tree(src: Path, dst: Path, skip: Path | None = None,
              budget: int = MAX_CACHE_COPY_BYTES, max_files: int = MAX_CACHE_COPY_FILES) -> None:
    """Copy regular files and dirs only (never symlinks), within a byte and file budget,
    atomically per file (write then rename), so readers never see a half-written entry.
    Files whose relative path exists under `skip` (the shared stubs) are not copied."""
    dst.mkdir(parents=True, exist_ok=True)
    for root, dirs, files in os.walk(src, followlinks=False):
        rel = Path(root).relative_to(src)
        (dst / rel).mkdir(parents=True, exist_ok=True)
        for name in files:
            s = Path(root) / name
            if s.is_symlink() or not s.is_file() or (skip and (skip / rel / name).exists()):
                continue
            size = s.stat().st_size
            max_files -= 1
            if size > budget or max_files < 0:
                return
            budget -= size
            d = dst / rel / name
            tmp = d.with_name(f".{name}.kzcopy")
            shutil.copyfile(s, tmp, follow_symlinks=False)
            os.replace(tmp, d)
        dirs[:] = [d for d in dirs if not (Path(root) / d).is_symlink()]


def load_tensors(path: Path, max_bytes: int) -> Any:
    """torch.load(weights_only=True) of an untrusted file, size-capped, never raising."""
    try:
        if path.is_symlink() or not path.is_file():
            return None
        with open(path, "rb", opener=_nofollow) as f:
            # Size of the file actually opened (no swap after the checks above); torch.load
            # reads straight from it: a BytesIO copy first made loads ~6x slower.
            if os.fstat(f.fileno()).st_size > max_bytes:
                return None
            return torch.load(f, weights_only=True, map_location="cpu")
    except Exception:  # noqa: BLE001 - malformed candidate output is a rejection, not a crash
        return None


def load_json(path: Path, max_bytes: int = 4 << 20) -> dict | None:
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > max_bytes:
            return None
        with open(path, "rb", opener=_nofollow) as f:
            value = json.loads(f.read(max_bytes))
        return value if isinstance(value, dict) else None
    except (OSError, ValueError):
        return None


def _nofollow(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW)
