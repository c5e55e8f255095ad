"""Run the Triton case suites (cases.py) in worker subprocesses, sharded over the CPU cores.

Triton picks interpreter-or-compiler when it is first imported, so the interpreter
checks (TRITON_INTERPRET=1) and the sm_90 compile checks (TRITON_INTERPRET unset)
each get fresh processes with the environment set before anything imports triton.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
N_SHARDS = max(1, min(4, os.cpu_count() or 1))


def run_suite(suite: str, interpret: bool, timeout: float = 900) -> tuple[dict[str, dict], list[str]]:
    """{case id: result} from all shards of `suite`, plus stderr tails of shards that failed."""
    env = dict(os.environ)
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    else:
        env.pop("TRITON_INTERPRET", None)
    cmd = [sys.executable, "-m", "tests.kz_common.kernels.worker", suite]
    procs = [
        subprocess.Popen(cmd + [str(i), str(N_SHARDS)], cwd=REPO, env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for i in range(N_SHARDS)
    ]
    results: dict[str, dict] = {}
    problems: list[str] = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            problems.append(f"shard timed out after {timeout}s")
        for line in out.splitlines():
            if line.startswith("KZCASE "):
                record = json.loads(line[len("KZCASE "):])
                results[record["id"]] = record
        if proc.returncode:
            problems.append(f"shard exited {proc.returncode}: {err[-3000:]}")
    return results, problems


def check_case(results: tuple[dict[str, dict], list[str]], case_id: str) -> None:
    """Turn a worker's record for `case_id` into a pytest outcome."""
    records, problems = results
    record = records.get(case_id)
    if record is None:
        pytest.fail(f"worker never reported {case_id}; {problems}")
    if record["status"] == "skipped":
        pytest.skip(record["detail"])
    if record["status"] != "passed":
        pytest.fail(record["detail"], pytrace=False)


@pytest.fixture(scope="session")
def interp_results() -> tuple[dict[str, dict], list[str]]:
    return run_suite("interp", interpret=True)


@pytest.fixture(scope="session")
def sm90_results() -> tuple[dict[str, dict], list[str]]:
    return run_suite("sm90", interpret=False)
