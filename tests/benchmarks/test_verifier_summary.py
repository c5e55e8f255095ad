"""The verifier benchmark's summaries, checked on CPU against a saved GPU run: its rows must add
up to the summary it saved, and render the table line it printed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.verifier_ab import read_saved
from benchmarks.verifier_summary import PASS_COLS, pass_row, summarize, table, timing_diag

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
RUN = RESULTS / "verifier_bench_ab_pausestart_e03ddbe_NVIDIA_H100_2026-12-06"
# A run printed by the current table's columns (lock_steps came after RUN)
PRINTED = RESULTS / "verifier_bench_repeat7_7ccbd47_NVIDIA_H100_2026-12-06h"


@pytest.fixture(scope="module")
def saved() -> dict:
    return _saved(RUN)


def _saved(run: Path) -> dict:
    return read_saved(run.with_suffix(".json.gz"))


def _close(a: object, b: object) -> bool:
    """Equal, numbers to the last place the summary rounds to (its sums land on .005 edges)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, (int, float)):
        return abs(a - b) <= 0.0100001
    return a == b


def _bundle_keys(rows: list[dict]) -> list[str]:
    # The JSON keeps no problem sources; candidates of one bundle carry its one phase record.
    return [json.dumps(x.get("reference_phase_s"), sort_keys=True) for x in rows]


@pytest.mark.parametrize("name", ["cold", "ps0"])
def test_the_rows_add_up_to_the_saved_summary(saved: dict, name: str) -> None:
    v = saved[name]
    got = summarize(v["rows"], _bundle_keys(v["rows"]), v["wall_s"], v["workers"])
    assert got["no_verdict"] == []  # newer than the run: every verdict was on the kernel
    got = {k: got[k] for k in got if k != "no_verdict"}
    assert _close(got, {k: v[k] for k in got}), [k for k in got if not _close(got[k], v[k])]
    assert got["warm_starts"] == {"cold": 57, "ps0": 80}[name]
    assert got["exclusive_s"]["bundles_n"] == 38


def test_rows_with_no_verdict_are_counted_apart(saved: dict) -> None:
    v = saved["cold"]
    rows = [dict(r) for r in v["rows"]]
    honest = next(r for r in rows if not r["label"].startswith("cheat_"))
    honest.update(passed=False, stage="internal")  # e.g. the device short in every run
    got = summarize(rows, _bundle_keys(rows), v["wall_s"], v["workers"])
    assert got["no_verdict"] == [honest["label"]]
    assert got["honest_passed"] == v["honest_passed"] - 1
    line = table("", [pass_row("cold", {**v, **got})], PASS_COLS).splitlines()[-1]
    assert f"| {got['honest_passed']}/{got['honest_total']} (1 no verdict) |" in line


def test_a_pass_renders_the_line_it_printed() -> None:
    saved = _saved(PRINTED)
    printed = [line for line in PRINTED.with_suffix(".log").read_text().splitlines()
               if line.startswith("cold | ")]
    rendered = table("", [pass_row("cold", saved["cold"])], PASS_COLS).splitlines()[-1]
    assert printed and printed[-1] == rendered
    assert "steps_reference=" in rendered  # the lock's step profile is in the line


def test_timing_diag_keeps_the_named_diagnostics_and_derives_two() -> None:
    st = {"flush_ms": 0.1, "host_ms": None, "loop": "back_to_back", "b2b_median_ms": 1.1,
          "stream_median_ms": 1.0, "median_ms": 1.1}
    assert timing_diag(st) == {"flush_ms": 0.1, "back_to_back": 1, "b2b_over_synced": pytest.approx(1.1),
                               "stream_median_ms": 1.0}


def test_a_pass_too_short_for_a_mid_rate_reports_none() -> None:
    rows = [{"label": "a", "passed": True, "stage": "passed", "wall_s": 1.0, "spread": 0.01,
             "timing_diag": {}, "phase_s": {}, "steps_s": {}, "harness_steps_s": {},
             "harness_cpu_s": {}, "reference_steps_s": {}, "warm_start": True,
             "batch_s": [0.0, 2.0], "sandbox_batch_s": [0.0, 2.0]}]
    got = summarize(rows, ["p"], wall=2.0, workers=1)
    assert got["mid_per_minute"] is None and got["first_done_s"] == 2.0
    assert (got["honest_passed"], got["honest_total"], got["cheats_total"]) == (1, 1, 0)


def test_timed_phases_begun_before_every_stop_landed_are_counted(saved: dict) -> None:
    """Runs since quiet's wait for SIGSTOPs to land count the phases that began with some
    stopped process not yet stopped (and those in uninterruptible sleep); older runs have
    no such key."""
    v = saved["cold"]
    rows = [dict(r, phase_s=dict(r.get("phase_s") or {})) for r in v["rows"]]
    keys = _bundle_keys(rows)
    assert "unsettled" not in summarize(rows, keys, v["wall_s"], v["workers"])["exclusive_s"]
    timed = [r for r in rows if "exclusive" in r["phase_s"]]
    for r in timed:
        r["phase_s"].update(exclusive_unsettled=0, exclusive_unsettled_d=0)
    timed[0]["phase_s"].update(exclusive_unsettled=3, exclusive_unsettled_d=2)
    timed[1]["phase_s"].update(exclusive_unsettled=1)
    got = summarize(rows, keys, v["wall_s"], v["workers"])["exclusive_s"]
    assert (got["unsettled"], got["unsettled_d"]) == (2, 2)
    assert "settled_threads" not in got  # runs before the thirty-seventh session
    timed[2]["phase_s"].update(exclusive_settled_threads=4)
    timed[3]["phase_s"].update(exclusive_settled_threads=1)
    got = summarize(rows, keys, v["wall_s"], v["workers"])["exclusive_s"]
    assert got["settled_threads"] == 5
