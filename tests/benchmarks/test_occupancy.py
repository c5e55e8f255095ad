from benchmarks.occupancy import occupancy, slot_clock, stopped


def _row(start: float, end: float, sandboxed: bool = True) -> dict:
    return {"batch_s": [start, end], "sandbox_batch_s": [start, end] if sandboxed else []}


def test_two_always_busy_sandboxes_read_two_and_the_ideal_rate() -> None:
    # two sandboxes back to back, 2 s each, plus one static reject in every five
    rows = [_row(2.0 * k, 2.0 * k + 2.0) for k in range(20) for _ in range(2)]
    rows += [_row(1.0, 1.0, sandboxed=False) for _ in range(10)]
    got = occupancy(rows, workers=2)
    assert got["sandboxed"] == 40 and got["sandboxed_share"] == 0.8
    assert got["mean_sandbox_s"] == 2.0
    assert got["busy_mid"] == 2.0
    assert got["ideal_per_minute"] == 75.0  # 60 * 2 / 2 s / 0.8


def test_idle_gaps_lower_the_busy_reading() -> None:
    # one sandbox busy 1 s of every 2 s
    rows = [_row(2.0 * k, 2.0 * k + 1.0) for k in range(20)]
    # p10 and p90 completions at 5 s and 35 s: busy 15 of those 30 s
    assert occupancy(rows, workers=1)["busy_mid"] == 0.5


def test_too_few_verdicts_give_no_reading() -> None:
    assert occupancy([_row(0.0, 1.0)], workers=1) == {"sandboxed": 1}


def test_a_rerun_counts_both_runs_of_its_candidate() -> None:
    # every candidate ran 1 s, was run again after an out-of-memory failure, 1 s more
    rows = [{"batch_s": [2.0 * k, 2.0 * k + 2.0],
             "sandbox_batch_s": [2.0 * k, 2.0 * k + 1.0, 2.0 * k + 1.0, 2.0 * k + 2.0]}
            for k in range(20)]
    got = occupancy(rows, workers=1)
    assert got["mean_sandbox_s"] == 2.0 and got["busy_mid"] == 1.0


def test_a_phase_inside_another_candidates_timed_runs_reads_as_stopped() -> None:
    # A is timed from 3 to 4 s; B compiles ("start") from 2.5 to 5.5 s: 1 s of it stopped
    a = {"sandbox_batch_s": [0.0, 5.0],
         "phase_s": {"start": 1.0, "shared": 2.0, "exclusive": 1.0}}
    b = {"sandbox_batch_s": [2.5, 7.0], "phase_s": {"start": 3.0, "shared": 1.0}}
    got = stopped([a, b])
    assert got["start"] == {"mean_s": 2.0, "stopped_s": 0.5}  # (1 + 3) / 2 s; (0 + 1) / 2
    assert got["shared"]["stopped_s"] == 0.0
    assert got["after"] == {"mean_s": 0.75, "stopped_s": 0.0}  # A 1 s, B 0.5 s


def test_no_laps_give_no_reading() -> None:
    assert stopped([{"sandbox_batch_s": [0.0, 1.0]}]) == {}


def test_gpu_busy_counts_from_the_granted_place_to_the_last_lap() -> None:
    # one sandbox after another, 4 s each: 1 s start, 1 s waiting for a GPU place,
    # 1 s shared, then 1 s after its last lap (writing, exiting): on the GPU 1 s of 4
    rows = [{"batch_s": [4.0 * k, 4.0 * k + 4.0], "sandbox_batch_s": [4.0 * k, 4.0 * k + 4.0],
             "phase_s": {"start": 1.0, "gpu_place_wait": 1.0, "shared": 1.0}}
            for k in range(20)]
    got = occupancy(rows, workers=1)
    assert got["busy_mid"] == 1.0 and got["gpu_busy_mid"] == 0.25
    assert stopped(rows)["gpu_place_wait"] == {"mean_s": 1.0, "stopped_s": 0.0}


def test_the_slot_clock_splits_warm_and_cold_starts() -> None:
    rows = [{"warm_start": True, "phase_s": {"slot_age": 9.0, "slot_startup": 4.0}},
            {"warm_start": True, "phase_s": {"slot_age": 11.0, "slot_startup": 6.0}},
            {"warm_start": False, "phase_s": {"slot_age": 2.0, "slot_startup": 5.0}},
            {"warm_start": None, "phase_s": {}}]  # a static reject: no sandbox
    assert slot_clock(rows) == {"warm_slot_age_s": 10.0, "warm_slot_startup_s": 5.0,
                                "warm_n": 2, "cold_slot_age_s": 2.0,
                                "cold_slot_startup_s": 5.0, "cold_n": 1}
