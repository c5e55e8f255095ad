"""Speed-of-light bound and roofline arithmetic (pure functions, CPU)."""

from __future__ import annotations

from services.verifier import perf

PEAK = {"copy_bytes_per_s": 4.0e12, "flops": {"float16": 8.0e14}, "device_name": "GPU"}
SHAPE = {"input_bytes": 4.0e9, "output_bytes": 4.0e9}  # 1 ms just to read the inputs


def test_speed_of_light_from_bytes_and_flops() -> None:
    b = perf.bounds(SHAPE, PEAK, flops=1.6e12, bytes_moved=None, dtype="float16")
    assert abs(b["sol_s"] - 2e-3) < 1e-12  # the flops bound (2 ms) dominates the bytes (1 ms)
    b = perf.bounds(SHAPE, PEAK, flops=None, bytes_moved=None, dtype="float16")
    assert abs(b["sol_s"] - 1e-3) < 1e-12 and b["bytes"] == 8.0e9


def test_roofline_fraction() -> None:
    b = perf.bounds(SHAPE, PEAK, flops=None, bytes_moved=8.0e9, dtype="float16")
    assert abs(perf.roofline_fraction(4e-3, b) - 0.5) < 1e-9  # 8 GB in 4 ms at 4 TB/s peak


def test_catalogue_costs_are_used_when_available() -> None:
    flops, moved = perf.op_costs("matmul", {"M": 64, "N": 32, "K": 16}, "float32")
    if flops is not None:  # the catalogue is optional; when present its cost model is used
        assert flops > 0 and moved and moved > 0
    assert perf.op_costs(None, {}, "float32") == (None, None)
    assert perf.op_costs("no_such_op", {}, "float32") == (None, None)


def test_holdout_runs_floor_the_time_and_reject_a_cache() -> None:
    assert perf.holdout_floor(1.0, [0.94, 0.99]) == (1.0, 0.94, None)  # honest: unchanged
    t, ratio, why = perf.holdout_floor(1.0, [1.2, 1.1])  # slower on new inputs: raised
    assert t == 1.1 / (1 + perf.HOLDOUT_SLACK) and ratio == 1.1 and why is None
    t, ratio, why = perf.holdout_floor(0.25, [1.0, 1.1])  # 4x: a cache, rejected
    assert why is not None and "cached by input contents" in why and ratio == 4.0
    # the content cache in a busy 476-candidate H200 batch read 2.16-2.97: rejected too
    assert perf.holdout_floor(0.5, [1.08, 1.2])[2] is not None


def test_baseline_summary_keeps_how_each_baseline_was_timed() -> None:
    timing = {"naive": {"median_ms": 1.5, "attempts": 2, "runs": 50, "times_ms": [1.5] * 50},
              "optimized": None, "shape_index": 0}
    summary = perf.baseline_summary({"timing": timing})
    assert summary is not None and set(summary) == {"naive"}  # no ModelOpt: no entry
    assert summary["naive"]["median_ms"] == 1.5 and summary["naive"]["runs"] == 50
    assert "times_ms" not in summary["naive"] and summary["naive"]["loop"] is None
    assert perf.baseline_summary({}) is None  # a bundle that was never timed (CPU)


def test_driver_version_from_either_kernel_module_flavour() -> None:
    open_km = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04"
               "  Release Build  (dvs-builder@U16-I3-B03-4-3)  Tue Sep 16 2025\n"
               "GCC version:  gcc version 13.3.0\n")
    proprietary = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.129.03"
                   "  Thu Oct 19 18:56:32 UTC 2023\n"
                   "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")
    arm = "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  550.54.15  Release Build\n"
    assert perf.parse_driver_version(open_km) == "580.159.04"
    assert perf.parse_driver_version(proprietary) == "535.129.03"
    assert perf.parse_driver_version(arm) == "550.54.15"
    assert perf.parse_driver_version("something else\n") == "something else"
    assert perf.parse_driver_version("") == "unknown"
