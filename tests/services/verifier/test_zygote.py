"""What is particular to sandboxes forked by the fork server (zygote.py). The isolation
contract itself runs against it in test_sandbox.py, and the verdict suites in
test_cheats.py / test_correct.py (conftest.BACKENDS)."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from services.verifier import sandbox, zygote_client
from services.verifier import sandbox_mounts as M
from services.verifier.sandbox import ZYGOTE_MODE

pytestmark = pytest.mark.skipif(ZYGOTE_MODE not in sandbox.available_modes("cpu"),
                                reason="needs root and unshare")
ENV = {"KZ_TEST": "zygote"}


def _process(base: Path, code: str) -> sandbox.Process:
    for d in ("work", "inputs", "cache"):
        (base / d).mkdir(parents=True, exist_ok=True)
    os.chmod(base, 0o711)
    view = M.View(str(base / "work"), str(base / "inputs"), str(base / "cache"), "cpu")
    lim = sandbox.Limits(wall_s=60, cpu_s=60, memory_bytes=4 << 30, nproc=64,
                         fsize_bytes=1 << 20)
    return sandbox.Process(ZYGOTE_MODE, view, [sys.executable, "-I", "-c", code], ENV, lim,
                           base)


def test_the_sandbox_holds_only_its_own_fds_and_already_has_torch(tmp_path: Path) -> None:
    code = ("import os, sys, json; print('R' + json.dumps({'fds': sorted(int(f) for f in "
            "os.listdir('/proc/self/fd')), 'torch': 'torch' in sys.modules, "
            "'pid': os.getpid()}))")
    res = _process(tmp_path, code).finish(b"")
    line = next(x for x in res.stdout_tail.splitlines() if x.startswith("R"))
    r = json.loads(line[1:])
    assert r["torch"]  # imported by the server before the fork
    assert r["pid"] == 1  # pid 1 of its own pid namespace
    assert len(r["fds"]) <= 5, r["fds"]  # 0-2, the control pipe, listdir's own
    assert res.isolation.startswith(ZYGOTE_MODE)


def test_the_sandbox_inherits_tritons_key(tmp_path: Path) -> None:
    """Triton's key (a hash of its files and its libtriton, ~0.5 s) is computed by the
    server before the fork: a sandbox's first compile or cache lookup does not pay it."""
    code = ("import triton.runtime.cache as c; "
            "print('R', c.triton_key.cache_info().currsize)")
    res = _process(tmp_path, code).finish(b"")
    assert "R 1" in res.stdout_tail, res.stdout_tail + res.stderr_tail


def test_an_exited_sandbox_keeps_its_pid_until_the_verifier_lets_go(tmp_path: Path) -> None:
    """Its pid cannot be reused (and killed by our killpg) before teardown is done."""
    p = _process(tmp_path, "pass")
    pid = p.proc.pid
    p.proc.wait(timeout=30)
    assert _state(pid) == "Z"  # exited, reported, not reaped
    p.discard()
    deadline = time.monotonic() + 5
    while _state(pid) is not None:
        assert time.monotonic() < deadline, "never reaped after release"
        time.sleep(0.02)


def test_a_dead_server_is_replaced(tmp_path: Path) -> None:
    first = _process(tmp_path / "a", "pass")
    first.finish(b"")
    server = zygote_client.get({**ENV, "PATH": sandbox.SAFE_PATH})
    os.kill(server.proc.pid, signal.SIGKILL)
    server.proc.wait()
    res = _process(tmp_path / "b", "print('again')").finish(b"")
    assert "again" in res.stdout_tail
    assert zygote_client.get({**ENV, "PATH": sandbox.SAFE_PATH}) is not server


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def test_without_a_fork_server_the_same_sandbox_starts_the_classic_way(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(env: dict[str, str]) -> zygote_client.Zygote:
        raise sandbox.SandboxError("fork server did not start")

    monkeypatch.setattr(zygote_client, "get", broken)
    res = _process(tmp_path, "import os; print('uid', os.getuid())").finish(b"")
    assert "uid 6" in res.stdout_tail  # dropped to a sandbox uid all the same
    assert res.isolation.startswith("unshare+uid")


@pytest.mark.parametrize("modes, expect", [
    (("bwrap+uid", "unshare+uid", ZYGOTE_MODE, "uid+rlimits", "rlimits"), "bwrap+uid"),
    (("unshare+uid", ZYGOTE_MODE, "uid+rlimits", "rlimits"), ZYGOTE_MODE),
    (("uid+rlimits", "rlimits"), "uid+rlimits"),
])
def test_auto_takes_the_fork_server_only_where_unshare_is_the_strongest_mode(
        monkeypatch: pytest.MonkeyPatch, modes: tuple[str, ...], expect: str) -> None:
    monkeypatch.setattr(sandbox, "available_modes", lambda device: modes)
    assert sandbox.choose_mode("auto", "cuda") == expect
