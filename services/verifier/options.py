"""Verifier options and version."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import Literal

from services.verifier.policy import DEFAULT_POLICY, POLICIES

# Bump whenever a rule changes: verdicts of different versions are not comparable.
VERIFIER_VERSION = "1.15.1"  # 1.1: float64 reference accepted too; 1.2: compare on the GPU;
# 1.3: times from the adaptive shadow and the back-to-back loop (up to 6% above 1.2's);
# 1.4: slow kernels get ~0.25 s of runs per loop (>= 10), a 25 ms warm-up, a host late by
# under 1% of the run is no retry, no retry after 0.5 s; outputs up to 4 MiB compared on the
# CPU; timed runs share one set of input objects whose contents rotate, then one traced call
# per set (memoised outputs and library compute in the timed runs are rejected); 1.5: two
# holdouts (new inputs) timed once after the timed runs floor the reported time; one 3x
# slower than it is a cache of outputs by input contents, rejected; 1.6: holdout runs under
# a shadow of at least 2 ms (a late host launch read honest holdouts up to 2.4x slow); a
# side-stream flag needs a second synced loop to agree before the strict re-time; 1.7: each
# timed run's outputs are copied as it returns (a model cannot write them in later, untimed);
# 1.8: a holdout 1.5x (was 3x) slower than the timed runs is a cache, rejected; holdout inputs
# wait in host memory until their runs; 1.9: holdout files appear in the sandbox only while
# the harness reads them, between its correctness calls and its timed runs; 1.10: no
# candidate kernel runs without a GPU lock: the lock-free build and warm-up compile kernels
# without launching them, autotuners choose their config and constructors that launch are
# run again under the shared lock; 1.11: a candidate or reference build that failed with a
# CUDA out-of-memory error is run once more when the device has room (on an 80 GB H100,
# honest kernels were rejected because the batch's other processes held the memory); 1.12:
# the allocator poisoning fills every free cached block (it filled one fresh 256 MB block a
# call, and freed blocks of earlier calls kept their values); 1.13: "CUDA error: unknown
# error", which a full device also gives, gets the same rerun, and a reference rebuild runs
# on a worker started after the wait for room (an 80 GB H100 lost three problems of a batch);
# 1.14: up to three such reruns, each waiting for twice the room of the last, and a run or
# build short of device memory every time is no verdict ("internal"), not a rejection of the
# kernel at "runtime" or of the problem (an H100 beside a 16 GB hog rejected an honest one);
# 1.14.1: a problem whose baselines' timing ran short is built and timed anew up to three
# times too, each after twice the room of the last (it was once, at the smallest room);
# 1.14.2: a rerun short again after its wait for room ran out is the last (memory held
# outside the batch), and later waits are brief until room is seen again; 1.14.3: a wait
# for room closes the idle warm sandboxes (their CUDA contexts), so a run short of memory
# is less often left with no verdict; a pause stops the other sandboxes' process groups
# too and waits (up to 20 ms) for its stops to land: a child forked meanwhile is stopped
# 1.14.4: a wait for room that sees the device's free memory stand still for 20 s ends
# as one that ran out (memory held outside the batch), not after its whole 300 s; 1.15.0:
# forward may read at most 8 tensor values back to the host (.item(), float(), copies to the
# CPU): past that it is stopped and rejected (host_compute: arithmetic in Python passed);
# unbound tensor methods (torch.Tensor.tolist(x)) follow the bound methods' allow-list
# 1.15.1: reruns after an out-of-memory failure run side by side while the device has room
# for all their rooms (they went one at a time), so fewer wait out their limit; a pause
# counts a process whose stop is under way (one thread stopped) or that is exiting as settled


def _default_cache() -> str:
    return os.environ.get("KZ_VERIFIER_CACHE",
                          os.path.join(tempfile.gettempdir(), "kz-verifier-cache"))


@dataclass(frozen=True)
class VerifyOptions:
    """How to verify. Defaults are production settings; tests shrink timeouts and shapes."""

    device: Literal["cpu", "cuda"] = "cpu"
    trials: int = 3  # per shape, each with fresh os.urandom seeds
    max_shapes: int = 3  # of KZ_SHAPES (spread over the list)
    wall_timeout_s: float = 300.0  # candidate correctness phase (import, compile, trials)
    timing_timeout_s: float = 60.0  # timed runs, under the exclusive GPU lock
    locked_timeout_s: float = 60.0  # correctness calls, under the shared GPU lock
    reference_timeout_s: float = 300.0
    cpu_seconds: int = 600  # RLIMIT_CPU of each sandboxed process
    memory_limit_mb: int = 16384  # RLIMIT_AS on CPU; cgroup memory.max where available
    nproc: int = 512  # RLIMIT_NPROC / pids.max (threads count too)
    fsize_mb: int = 2048  # RLIMIT_FSIZE: largest file a candidate may write
    n_timing_runs: int = 50  # median of this many (randomly up to +25%) runs
    warmup: int = 3
    flush_mb: int = 256  # L2 flush buffer (>= 2x L2)
    adaptive_shadow: bool = True  # flush for as long as the host takes to launch (timing.py)
    # a shared epoch of the GPU lock runs at least this long before a timed phase closes it;
    # timed phases that arrive meanwhile share one drain (gpu_lock.py); 0: close at once
    shared_epoch_s: float = 0.5
    # new inputs of the timed shape, each timed once after the timed runs and checked: a
    # time faster than theirs came from inputs seen before (caching; candidate.py)
    holdouts: int = 2
    sol_margin: float = 0.75  # reject times below margin * speed-of-light bound
    policy: str = DEFAULT_POLICY
    isolation: str = "auto"  # or a mode from sandbox.MODES
    cache_dir: str = ""  # empty: $KZ_VERIFIER_CACHE or <tmp>/kz-verifier-cache
    tmp_dir: str = ""  # where private dirs live (empty: system temp)
    # sandboxes started ahead (torch imported while idle); 0 = start per candidate
    warm_slots: int = 1
    # every other sandbox is stopped while one is timed; False leaves a candidate's sandbox
    # running from its job to its first GPU request (import, build, compile-only warm-up:
    # no Triton launch, but its constructor and import may still run torch ops): its compile
    # is then not stretched by the timed phases (~32% of an H100 batch's wall). H100, 207
    # candidates: 1.02x the rate, timing quality unchanged (one pass; eighteenth session).
    pause_compiling: bool = True
    # False leaves a pre-started sandbox running through other sandboxes' timed phases until
    # its job comes (only trusted start-up runs then: imports, the CUDA context): paused, it
    # starts only in the ~42% of an H100 batch's wall that no timed phase holds, and 60% of
    # the candidates found their sandbox still starting (verifier_notes.md, eighteenth session).
    # H100, primed A/B at 207: warm starts 50% -> 88%, timing unchanged, rate 1.02x whole
    # pass and 1.00x mid-pass; with permit_at_done 0.93x (the card's memory filled: 9 OOM
    # reruns). Off: the start is not what limits the rate (twenty-first session)
    pause_starting: bool = True
    # reference bundles built at once ahead of verify_many's workers (H200, side by side:
    # 4 builders 53.5 and 58.7/min against 2 builders 51.0 and 48.8/min; with the fork
    # server 8 builders gave 61.5 vs 56.2/min in one call and 52.6 vs 57.8 in the next: noise;
    # on an 80 GB H100 8 gave 0.99x the rate and came within 2.5 GB of the device's memory)
    bundle_builders: int = 4
    # candidates the verifier service checks at once (threads sharing one Session, like
    # verify_many's workers; the H200 benchmark runs 12); 1 = one at a time
    workers: int = 1
    # candidates a batch judges (the parent's compare of their outputs, ~1.4 s median on
    # the H200) while its `workers` sandboxes already run the next ones; -1: half the
    # workers, rounded up; 0: each worker judges its own candidate before the next
    judges: int = -1
    # give a sandbox's place to the next candidate when its timed runs end, not when it
    # exits (it then only writes its outputs: 0.84 s mean of an 8.6 s run on the H200,
    # no GPU lock); off: on the H200 it held a place 7.6 s instead of 8.8 s but the rate
    # did not move (verifier_notes.md, fifteenth session); with pause_starting off, on an
    # H100, 0.93x: exiting and starting CUDA contexts together filled the card's memory
    permit_at_done: bool = False
    # sandboxes of a batch past their first GPU request at once (the rest of `workers` may
    # only start: import, build, compile-only warm-up); 0: no cap beyond `workers`. Off:
    # on an H100, workers=16 with 12 GPU places gave 0.95x the rate of 12 workers; only
    # 4-5 sandboxes were ever past their first request, and 16 processes slowed every
    # phase (verifier_notes.md, eighteenth session)
    gpu_places: int = 0
    # runs made again after a CUDA out-of-memory failure, once the device has room: the
    # sandboxes share its memory and have no quota each (oom_reruns.py); 0: none. One was
    # too few: beside a 16 GB hog on an H100 an honest kernel ran short twice (thirty-first
    # session), and each rerun waits for twice the room of the one before
    oom_reruns: int = 3
    max_redraws: int = 3  # non-discriminating trial redraws before rejecting the problem
    keep_artifacts: bool = False

    def __post_init__(self) -> None:
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"device must be 'cpu' or 'cuda', got {self.device!r}")
        if self.trials < 3:
            raise ValueError("trials must be >= 3")
        if self.policy not in POLICIES:
            raise ValueError(f"unknown policy {self.policy!r}; known: {POLICIES}")
        if self.warm_slots < 0:
            raise ValueError("warm_slots must be >= 0")
        if self.bundle_builders < 1:
            raise ValueError("bundle_builders must be >= 1")
        if self.workers < 1:
            raise ValueError("workers must be >= 1")
        if self.judges < -1:
            raise ValueError("judges must be >= 0, or -1 for half the workers")
        if self.gpu_places < 0:
            raise ValueError("gpu_places must be >= 0 (0: as many as the workers)")
        if self.oom_reruns < 0:
            raise ValueError("oom_reruns must be >= 0")
        if self.holdouts < 0:
            raise ValueError("holdouts must be >= 0")
        if not 0 <= self.shared_epoch_s <= 10:
            raise ValueError("shared_epoch_s must be within [0, 10]")
        if self.warmup < 2 or self.n_timing_runs < 5:
            raise ValueError("need warmup >= 2 and n_timing_runs >= 5")

    @property
    def cache(self) -> str:
        return self.cache_dir or _default_cache()
