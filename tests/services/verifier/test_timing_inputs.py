"""What the timed runs are fed and what is kept of them: rotated input sets, holdouts,
output snapshots.

The cheats here memoise by input object or contents, or rewrite earlier outputs later."""

from __future__ import annotations

from services.verifier import harness_checks, timing, timing_stats
from tests.services.verifier.timer_fakes import FakeDevice, cpu_loop_timer, fake_timer


def test_each_synced_run_is_preceded_by_its_own_sets_load() -> None:
    log: list[tuple[str, int]] = []
    fns = [lambda k=k: log.append(("run", k)) for k in range(3)]
    loads = [lambda k=k: log.append(("load", k)) for k in range(3)]
    fake_timer(FakeDevice(kernel=0.02, host=0.03)).time(fns, warmup=3, runs=10,
                                                         prepare=loads)
    runs = [i for i, e in enumerate(log) if e[0] == "run"]
    assert len(runs) == 10 + timing.PROBE_RUNS  # the probe and the timed loop
    assert all(i > 0 and log[i - 1] == ("load", log[i][1]) for i in runs)


def test_rotating_inputs_share_objects_and_take_each_sets_contents() -> None:
    import torch

    sets = [[torch.full((4, 3), float(k)), 7, torch.arange(3) + k] for k in range(3)]
    args, loads = harness_checks.rotating(sets)
    assert loads is not None and all(a[1] == 7 for a in args)
    assert all(a[0] is args[0][0] and a[2] is args[0][2] for a in args)  # one object per slot
    assert args[0][0] is not sets[0][0] and bool((args[0][0] == 0).all())  # starts as set 0
    for k in (2, 1, 0):
        loads[k]()
        assert torch.equal(args[k][0], sets[k][0]) and torch.equal(args[k][2], sets[k][2])
    odd = [[torch.zeros(4)], [torch.zeros(5)]]  # the sets differ in layout: no rotation
    assert harness_checks.rotating(odd) == ([odd[0], odd[1]], None)
    views = [[torch.zeros(4, 6)[:, ::2]] for _ in range(2)]  # no buffer of the same strides
    assert harness_checks.rotating(views) == ([views[0], views[1]], None)
    t = [[torch.zeros(4, 6).t()] for _ in range(2)]  # transposed: empty_like keeps its strides
    assert harness_checks.rotating(t)[1] is not None


def test_sets_kept_on_another_device_reach_the_timed_objects_only_in_their_prepare() -> None:
    """The holdouts wait in host memory (here: the meta device stands for it) and are
    copied into the shared objects, or moved over where there is no rotation, only when
    their own prepare runs, after the timed runs."""
    import torch

    copies: list[tuple[object, object]] = []
    moved: list[object] = []

    def copy_(dst: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> None:
        copies.append((dst, src))
        assert non_blocking  # queued, as the runs are

    def to(x: torch.Tensor, device: object, non_blocking: bool = False) -> torch.Tensor:
        moved.append(x)
        return torch.zeros(x.shape)

    timed = [[torch.zeros(2, 3)] for _ in range(2)]
    held = [[torch.empty(2, 3, device="meta")] for _ in range(2)]
    args, loads = harness_checks.rotating(timed + held, copy_=copy_, to=to)
    assert loads is not None and len({id(a[0]) for a in args}) == 1  # rotated: one object
    assert args[0][0].device.type == "cpu" and [s for _, s in copies] == [timed[0][0]]
    loads[3]()
    assert copies[-1] == (args[0][0], held[1][0])
    odd = [[torch.zeros(4)], [torch.zeros(5)], [torch.empty(5, device="meta")]]
    args, loads = harness_checks.rotating(odd, copy_=copy_, to=to)  # no rotation
    assert loads is not None and loads[:2] == [None, None] and args[2][0] is odd[2][0]
    loads[2]()
    assert moved == [odd[2][0]] and args[2][0].device.type == "cpu"


def test_a_model_memoising_by_input_identity_returns_stale_timed_outputs() -> None:
    """The cheat: the first result per input object, then a do-nothing kernel. With one
    object per set, each set's last output was its own correct first result; rotated, the
    last output of every set but the first is set 0's."""
    import torch

    memo: dict[int, torch.Tensor] = {}

    def model(x: torch.Tensor) -> torch.Tensor:
        return memo.setdefault(id(x), x * 2)

    sets = [[torch.full((3,), float(k))] for k in range(3)]
    args, loads = harness_checks.rotating(sets)
    fns = [lambda a=a: model(*a) for a in args]
    st = fake_timer(FakeDevice(kernel=0.02, host=0.03)).time(fns, 3, 10, prepare=loads)
    assert [float(o[0]) for o in st["last_outputs"]] == [0.0, 0.0, 0.0]  # want 0, 2, 4
    memo.clear()
    plain = [lambda s=s: model(*s) for s in sets]  # one object per set: the cheat passes
    st = fake_timer(FakeDevice(kernel=0.02, host=0.03)).time(plain, 3, 10)
    assert [float(o[0]) for o in st["last_outputs"]] == [0.0, 2.0, 4.0]


def test_a_cache_by_input_contents_is_fast_on_seen_inputs_only() -> None:
    """The cheat the holdouts catch: outputs keyed on input contents. Every timed set was
    seen in a correctness call, so the timed runs (rotated or not) time the cache; each
    holdout's contents are new, so `once` times the real computation."""
    import torch

    from services.verifier import perf

    dev = FakeDevice(kernel=0.3, host=0.03)  # a hit: 0.3 ms; a miss: 1.0 ms
    memo: dict[tuple[float, ...], torch.Tensor] = {}

    def model(x: torch.Tensor) -> torch.Tensor:
        key = tuple(x.tolist())
        if key not in memo:
            dev.next_ms, memo[key] = 1.0, x * 2
        return memo[key]

    sets = [[torch.full((3,), float(k))] for k in range(5)]  # 3 timed sets, 2 holdouts
    for s in sets[:3]:
        model(*s)  # the correctness calls
    args, loads = harness_checks.rotating(sets)
    assert loads is not None
    fns = [lambda a=a: model(*a) for a in args]
    t = fake_timer(dev)
    st = t.time(fns[:3], warmup=3, runs=10, prepare=loads[:3])
    held_ms, held = t.once(fns[3:], loads[3:])
    assert st["median_ms"] == 0.3 and held_ms == [1.0, 1.0]
    assert [float(o[0]) for o in held] == [6.0, 8.0]  # correct: each computed once
    assert perf.holdout_floor(st["median_ms"], held_ms)[2] is not None
    memo.clear()
    dev.kernel = 1.0  # an honest kernel: as fast on new inputs as on seen ones
    st = t.time(fns[:3], warmup=3, runs=10, prepare=loads[:3])
    assert perf.holdout_floor(st["median_ms"], t.once(fns[3:], loads[3:])[0]) == (1.0, 1.0, None)


def test_each_runs_outputs_are_kept_as_they_were_when_it_returned() -> None:
    """The deferred-output cheat: return a tensor fast, write the right values into it in a
    later call. The timer keeps a copy of each run's outputs, made right after the run
    (outside the timed interval), so later calls change nothing that is checked."""
    import torch

    returned: list[torch.Tensor] = []

    def model() -> tuple[torch.Tensor, list[torch.Tensor]]:
        for old in returned:
            old.fill_(7.0)  # "fix up" every earlier output
        out = torch.zeros(4)
        returned.append(out)
        return out, [out * 0]

    t = cpu_loop_timer()
    _, _, last = t._loop([model, model], 4)
    model()  # a later call (the holdout runs, the echo) rewrites them all
    assert all(isinstance(o, tuple) and isinstance(o[1], list) for o in last)
    assert [float(o[0].sum()) for o in last] == [0.0, 0.0]  # as returned, not 7s
    assert all(float(r.sum()) == 28.0 for r in returned[:-1])  # the originals were rewritten


def test_a_snapshot_copies_plain_tensors_only() -> None:
    import torch

    class Sub(torch.Tensor):
        pass

    x = torch.ones(3)
    sub = torch.ones(3).as_subclass(Sub)
    snap = timing_stats.snapshot([x, (x, 2), sub, "s"], torch.Tensor.clone)
    assert snap[0] is not x and torch.equal(snap[0], x) and snap[1][0] is not x
    assert snap[1][1] == 2 and snap[2] is sub and snap[3] == "s"
    assert type(snap) is list and type(snap[1]) is tuple
