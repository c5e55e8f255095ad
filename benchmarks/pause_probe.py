"""Does any paused process run its own code while another sandbox is timed? (CPU; no GPU)

    python benchmarks/pause_probe.py [--trials 600] [--out DIR] [QUIET_PY ...]

A process forks children in a loop, each living 50 ms; every process writes a
CLOCK_MONOTONIC stamp to a pipe each time it runs its own code. `others_paused` (of this
checkout's services/verifier/quiet.py, or of each QUIET_PY given: e.g. an older one from
`git show REV:services/verifier/quiet.py`) pauses the loop's process group `--trials`
times for 5 ms; a pause in which any stamp lands (after 1 ms of grace for a write already
under way) let code run. Prints a table; writes DIR/pause_probe.json. The pause's entry
time here is mostly the lister's own scan of /proc, not what a sandbox lister costs.
"""

from __future__ import annotations

import argparse
import bisect
import importlib.util
import json
import os
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

FORKER = r'''
import os, signal, struct, sys, time
w = int(sys.argv[1])
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the children reap themselves
while True:
    if os.fork() == 0:
        end = time.monotonic() + 0.05
        while time.monotonic() < end:
            os.write(w, struct.pack("d", time.monotonic()))
            time.sleep(0.002)
        os._exit(0)
    os.write(w, struct.pack("d", time.monotonic()))
'''


def group(pgid: int) -> list[int]:
    """The live processes of a process group (the forking loop's)."""
    out = []
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(stat[3]) == pgid and stat[0] not in "ZX":
            out.append(int(d))
    return out


def _read_stamps(r: int, into: list[float]) -> None:
    buf = b""
    while chunk := os.read(r, 1 << 16):
        buf += chunk
        n = len(buf) // 8 * 8
        into.extend(struct.unpack(f"{n // 8}d", buf[:n]))
        buf = buf[n:]


def probe(others_paused: Callable[..., Any], trials: int) -> dict[str, Any]:
    """Pause a forking loop `trials` times with `others_paused`: how many pauses let a
    process of it run code, how many stamps came at all, and the pause's entry times."""
    r, w = os.pipe()
    stamps: list[float] = []
    reader = threading.Thread(target=_read_stamps, args=(r, stamps), daemon=True)
    reader.start()
    forker = subprocess.Popen([sys.executable, "-I", "-c", FORKER, str(w)],
                              start_new_session=True, pass_fds=(w,))
    os.close(w)
    windows, entry = [], []
    try:
        time.sleep(0.3)
        for _ in range(trials):
            t0 = time.monotonic()
            with others_paused(lambda: group(forker.pid)):
                t1 = time.monotonic()
                time.sleep(0.005)
                windows.append((t1 + 0.001, time.monotonic()))
            entry.append(t1 - t0)
            time.sleep(0.005)
    finally:
        os.killpg(forker.pid, signal.SIGKILL)
        forker.wait()
    reader.join(5)  # the last children die within 50 ms, closing the pipe
    os.close(r)
    seen = sorted(stamps)
    ran = sum(bisect.bisect_left(seen, b) > bisect.bisect_right(seen, a) for a, b in windows)
    entry.sort()
    return {"trials": trials, "pauses_with_code_running": ran, "stamps": len(seen),
            "entry_ms_median": round(1e3 * entry[len(entry) // 2], 2),
            "entry_ms_p90": round(1e3 * entry[int(0.9 * len(entry))], 2)}


def _load(path: Path) -> Callable[..., Any]:
    spec = importlib.util.spec_from_file_location(f"quiet_{abs(hash(path))}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.others_paused  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("quiet", nargs="*", type=Path, help="quiet.py files (default: this one)")
    ap.add_argument("--trials", type=int, default=600)
    ap.add_argument("--out", type=Path, default=Path("pause-probe-out"))
    args = ap.parse_args(argv)
    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root))
    paths = args.quiet or [root / "services" / "verifier" / "quiet.py"]
    rows = [{"quiet": str(p), **probe(_load(p), args.trials)} for p in paths]
    print("| quiet.py | trials | pauses with code running | stamps | entry ms median | p90 |")
    print("| --- | --- | --- | --- | --- | --- |")
    for x in rows:
        print(f"| {x['quiet']} | {x['trials']} | {x['pauses_with_code_running']} | "
              f"{x['stamps']} | {x['entry_ms_median']} | {x['entry_ms_p90']} |")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "pause_probe.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
