"""A deliberately naive, KernelBench-style check: what the cheats are designed to fool.

It execs the problem and the solution in ONE process, seeds torch with 42,
computes `ref = Model(*inputs)` then `out = ModelNew(*inputs)`, compares with
torch.allclose(atol=rtol=1e-2), and trusts the process: the verdict is the
first JSON line on stdout and the exit code. On CUDA it also times both with
torch.cuda.Event on the current stream (no L2 flush, no device sync inside the
timed region), as naive harnesses do.

`variant="exceed_count"` is the other common hand-written comparison,
`((out - ref).abs() > atol + rtol * |ref|).sum() == 0`, which NaN slips through.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

_SCRIPT = r'''
import json, sys, types, torch
variant, device = sys.argv[3], sys.argv[4]
def load(path, name):
    mod = types.ModuleType(name); mod.__file__ = path
    sys.modules[name] = mod
    exec(compile(open(path).read(), path, "exec"), mod.__dict__)
    return mod
prob = load(sys.argv[1], "problem")
prob.KZ_DEVICE = device
sol = load(sys.argv[2], "solution")
torch.manual_seed(42)
init = prob.get_init_inputs() if hasattr(prob, "get_init_inputs") else []
torch.manual_seed(42); model = prob.Model(*init).to(device)
torch.manual_seed(42); new = sol.ModelNew(*init).to(device)
if model.state_dict() and set(model.state_dict()) == set(new.state_dict()):
    new.load_state_dict(model.state_dict())
torch.manual_seed(42)
inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in prob.get_inputs()]
with torch.no_grad():
    ref = model(*inputs).cpu()   # reference moved off the device, as many harnesses do
    out = new(*inputs)
    if device == "cuda":
        torch.cuda.synchronize()
    out = out.cpu()
if variant == "exceed_count":
    ok = bool(((out - ref).abs() > 1e-2 + 1e-2 * ref.abs()).sum() == 0)
else:
    ok = bool(torch.allclose(out.to(ref.dtype), ref, atol=1e-2, rtol=1e-2))
speedup = None
if device == "cuda":
    def t(f):
        for _ in range(3): f()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(20): f()
        e.record(); e.synchronize()
        return s.elapsed_time(e) / 20
    with torch.no_grad():
        speedup = t(lambda: model(*inputs)) / max(t(lambda: new(*inputs)), 1e-9)
print(json.dumps({"passed": ok, "speedup": speedup}))
'''


@dataclass(frozen=True)
class NaiveResult:
    passed: bool
    speedup: float | None
    stdout: str
    returncode: int | None


def naive_check(problem_path: Path, solution_src: str, device: str = "cpu",
                variant: str = "allclose", timeout_s: float = 120.0) -> NaiveResult:
    """Run the naive check; `passed` is what a naive harness would conclude."""
    with tempfile.TemporaryDirectory(prefix="kz-naive-") as d:
        sol = Path(d) / "solution.py"
        sol.write_text(solution_src)
        script = Path(d) / "naive.py"
        script.write_text(_SCRIPT)
        env = {**os.environ, "TRITON_INTERPRET": "1"} if device == "cpu" else dict(os.environ)
        try:
            p = subprocess.run([sys.executable, str(script), str(problem_path), str(sol), variant,
                                device], capture_output=True, text=True, timeout=timeout_s,
                               env=env, cwd=d)
        except subprocess.TimeoutExpired:
            return NaiveResult(False, None, "", None)
    verdict = _first_verdict(p.stdout)
    passed = p.returncode == 0 and bool(verdict.get("passed"))
    speed = verdict.get("speedup")
    return NaiveResult(passed, float(speed) if speed else None, p.stdout, p.returncode)


_DRIVER = r'''
import json, os, select, signal, sys, time
import torch, triton  # imported once; each check runs in a fresh forked child
script, jobs_path, out_path, timeout = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
code = compile(open(script).read(), script, "exec")
results = []
for job in json.load(open(jobs_path)):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r); os.dup2(w, 1); os.dup2(w, 2)
        sys.argv = [script] + job
        try:
            exec(code, {"__name__": "__main__"})
            rc = 0
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 1
        except BaseException:
            rc = 1
        sys.stdout.flush(); os._exit(rc)
    os.close(w)
    buf, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([r], [], [], 0.1)
        if ready:
            chunk = os.read(r, 65536)
            if not chunk:
                break
            buf += chunk
    else:
        os.kill(pid, signal.SIGKILL)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    rc = os.waitstatus_to_exitcode(status)
    results.append({"stdout": buf.decode("utf-8", "replace"), "rc": rc})
json.dump(results, open(out_path, "w"))
'''


def naive_check_many(jobs: list[tuple[Path, str, str]], device: str = "cpu",
                     timeout_s: float = 60.0) -> list[NaiveResult]:
    """Many naive checks, each in its own forked process (torch imported once, for speed).

    jobs: (problem_path, solution_src, variant). Semantics per job equal naive_check's.
    """
    with tempfile.TemporaryDirectory(prefix="kz-naive-") as d:
        argvs = []
        for k, (problem, src, variant) in enumerate(jobs):
            sol = Path(d) / f"solution_{k}.py"
            sol.write_text(src)
            argvs.append([str(problem), str(sol), variant, device])
        (Path(d) / "naive.py").write_text(_SCRIPT)
        (Path(d) / "driver.py").write_text(_DRIVER)
        (Path(d) / "jobs.json").write_text(json.dumps(argvs))
        env = {**os.environ, "TRITON_INTERPRET": "1"} if device == "cpu" else dict(os.environ)
        subprocess.run([sys.executable, str(Path(d) / "driver.py"), str(Path(d) / "naive.py"),
                        str(Path(d) / "jobs.json"), str(Path(d) / "out.json"), str(timeout_s)],
                       check=True, env=env, cwd=d, capture_output=True,
                       timeout=timeout_s * (len(jobs) + 2))
        raw = json.loads((Path(d) / "out.json").read_text())
    out = []
    for r in raw:
        verdict = _first_verdict(r["stdout"])
        speed = verdict.get("speedup")
        out.append(NaiveResult(r["rc"] == 0 and bool(verdict.get("passed")),
                               float(speed) if speed else None, r["stdout"], r["rc"]))
    return out


def _first_verdict(stdout: str) -> dict:
    """A naive harness takes the first JSON verdict line it sees."""
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict) and "passed" in value:
                return value
    return {}
