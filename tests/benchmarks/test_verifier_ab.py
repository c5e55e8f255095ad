"""benchmarks/verifier_ab.py on two saved GPU runs (one device call, both orders' first)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.verifier_ab import compare, load, read_saved, render

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
OLD = RESULTS / "verifier_bench_ab_judge_old_7ccbd47_NVIDIA_H100_2026-12-06i.json.gz"
NEW = RESULTS / "verifier_bench_ab_judge_new_8f286f7_NVIDIA_H100_2026-12-06i.json.gz"


def test_each_metric_is_read_and_divided_by_the_baseline() -> None:
    runs = [load(f"old={OLD}", "cold"), load(f"new={NEW}", "cold")]
    rows = {r["metric"]: r for r in compare(runs)}
    old, new = (read_saved(p)["cold"] for p in (OLD, NEW))
    rate = rows["rate /min"]
    assert rate["old"] == old["per_minute"] and rate["new"] == new["per_minute"]
    assert rate["new/old"] == round(new["per_minute"] / old["per_minute"], 3) == 1.012
    assert rows["lock drains s"]["new"] == new["lock"]["drain_s"]
    assert rows["harness C builds"]["new/old"] is None  # not recorded before 2289708
    assert rows["honest passed"]["new"] == "108/108"
    assert rows["cheats rejected"]["old"] == "99/99"
    table = render(list(rows.values()))
    assert table.splitlines()[0] == "| metric | old | new | new/old |"
    assert "| rate /min | 85.9 | 86.9 | 1.01 |" in table


def test_bad_input_gets_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no pass named 'warm'"):
        load(f"x={OLD}", "warm")
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "verifier_ab.py"
    res = subprocess.run([sys.executable, str(script), f"a={OLD}", f"a={NEW}"],
                         capture_output=True, text=True)
    assert res.returncode != 0 and "same label" in res.stderr
    res = subprocess.run([sys.executable, str(script), f"a={OLD}", f"b={NEW}", "--out",
                          str(tmp_path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "verifier_ab.csv").read_text().startswith("metric,a,b,b/a")
