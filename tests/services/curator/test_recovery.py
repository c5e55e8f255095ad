"""A restarted CuratorCore (observe_output + observe) decides as an uninterrupted one would.

The oracle is the same core never stopped. A restart hands the new core its predecessors'
outputs in a scan's order (each partition in order, partitions in any order), then the
consumed verdicts partition by partition, as kz_common.runner does; every later decision
and the state it leads to must be the oracle's.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta

from pydantic import BaseModel

from kz_common.processing import BatchProcessor, InRecord
from schemas import (
    AnyEnvelope,
    ChallengeContext,
    PreferenceRecorded,
    Producer,
    SampleCurated,
    decode,
    encode,
    make_event,
)
from services.curator.config import CuratorConfig
from services.curator.core import CuratorCore
from services.curator.decisions import reason_key
from services.curator.recovery import CLOSE_REASONS
from tests.services.curator.samples import CLEAN, context, envelope, verdict
from tests.services.curator.test_core import CHEAT, distinct

CURATOR = Producer(service="curator", version="1")
OPS = ("add", "gelu", "silu", "row_sum", "row_max", "softmax")
PARTS = 3


def part(cid: str) -> int:
    return int(cid[1:]) % PARTS  # challenge "c<n>" lives on partition n % 3


def ctx_of(n: int, *, round_: int = 0, purpose: str = "train") -> ChallengeContext:
    side = 2 ** (n % 8 + 1)
    return context(op=OPS[n % len(OPS)], shape_range={"rows": (side, side), "cols": (3, 3)},
                   round=round_, purpose=purpose)


def passing(n: int, index: int = 0, *, version: str = "1", round_: int = 0, code: str | None = None) -> AnyEnvelope:
    v = verdict(code or distinct(n), challenge_id=f"c{n}", sample_index=index, ctx=ctx_of(n, round_=round_))
    return envelope(v.model_copy(update={"verifier_version": version}))


def failing(n: int, index: int = 0, *, version: str = "1", round_: int = 0) -> AnyEnvelope:
    v = verdict(distinct(n), challenge_id=f"c{n}", sample_index=index, passed=False, ctx=ctx_of(n, round_=round_))
    return envelope(v.model_copy(update={"verifier_version": version}))


class Log:
    """The curator's outputs as the processor publishes them: enveloped, caused by their input,
    stamped with the time they were produced (1 ms apart: the order is the test's, not the clock's)."""

    def __init__(self) -> None:
        self.events: list[AnyEnvelope] = []
        self._clock = datetime(2025, 1, 1, tzinfo=UTC)

    def run(self, core: CuratorCore, inputs: Iterable[AnyEnvelope]) -> list[list[BaseModel]]:
        outs = []
        for e in inputs:
            out = core.process(e)
            outs.append(out)
            for i, p in enumerate(out):
                self._clock += timedelta(milliseconds=1)
                env = make_event(p, producer=CURATOR, correlation_id=getattr(p, "challenge_id", None)
                                 or e.correlation_id, parent=e, index=i)
                self.events.append(env.model_copy(update={"produced_at": self._clock}))
        return outs

    def scan(self) -> list[AnyEnvelope]:
        """What a warm-up scan reads: decoded, partition by partition (last partition first)."""
        return [decode(encode(e)) for e in sorted(self.events, key=lambda e: -part(e.correlation_id))]


def restart(cfg: CuratorConfig, log: Log, consumed: list[AnyEnvelope]) -> CuratorCore:
    core = CuratorCore(cfg)
    for e in log.scan():
        core.observe_output(e)
    for e in sorted(consumed, key=lambda e: part(e.payload.challenge_id)):  # type: ignore[union-attr]
        core.observe(e)
    return core


def state(core: CuratorCore) -> dict[str, object]:
    return {
        "window": sorted(c.sample_id for c in core.window), "count": core.window_verdicts,
        "round": core.window_round, "kept": sorted(core.kept), "paired": sorted(core.paired),
        "new": list(core.new_pool), "history": list(core.history), "fresh": core.fresh_kept,
        "last_round": core.last_round, "answers": core.answers, "index": sorted(core.index._entries),
        "counts": core.counts,
    }


def check(cfg: CuratorConfig, stream: list[AnyEnvelope], cuts: list[int]) -> Log:
    """Run `stream` through a curator restarted at each cut; compare with the oracle throughout."""
    oracle, log = CuratorCore(cfg), Log()
    core = CuratorCore(cfg)
    for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        if start:
            core = restart(cfg, log, stream[:start])
        expected = [oracle.process(e) for e in stream[start:end]]
        assert log.run(core, stream[start:end]) == expected, f"after a restart at {start}"
    assert state(core) == state(oracle)
    return log


def test_window_across_partitions_closes_as_it_did_live() -> None:
    # The fault test's scenario: a@p0, b@p1, c@p0 consumed, then a restart; replayed a, c, b.
    cfg = CuratorConfig(window_verdicts=2, keep_fraction=1.0, require_perf=False, train_threshold=100)
    a, b, c, d = passing(0), passing(1), passing(3), passing(4)
    log = check(cfg, [a, b, c, d], cuts=[3])
    closed_by = {e.payload.verdict_event_id: e.causation_id for e in log.events}  # type: ignore[union-attr]
    assert closed_by == {a.event_id: b.event_id, b.event_id: b.event_id, c.event_id: d.event_id,
                         d.event_id: d.event_id}


def test_through_the_processor_as_the_runner_drives_it() -> None:
    """Bytes on the log, BatchProcessor.note_output and replay: the runner's warm-up without a broker."""
    cfg = CuratorConfig(window_verdicts=2, keep_fraction=1.0, require_perf=False, train_threshold=100)
    stream = [passing(0), passing(1), passing(3), passing(4)]
    recs = [InRecord("verified", part(e.payload.challenge_id), i, encode(e))  # type: ignore[union-attr]
            for i, e in enumerate(stream)]
    live = BatchProcessor(CuratorCore(cfg), max_bytes=1_000_000, capacity=100)
    published = [o.value for r in recs[:3] for o in live.handle(r)]
    restarted = BatchProcessor(CuratorCore(cfg), max_bytes=1_000_000, capacity=100)
    for value in reversed(published):
        restarted.note_output(value)
    for r in sorted(recs[:3], key=lambda r: r.partition):
        restarted.replay(r)
    def sent(outs: list) -> list:  # type: ignore[type-arg]
        return [(o.event_id, decode(o.value).payload) for o in outs]  # produced_at differs, of course

    assert sent(restarted.handle(recs[3])) == sent(live.handle(recs[3])) != []
    assert restarted.handle(recs[2]) == []  # a redelivery is still recognised


def test_held_losers_and_windows_closed_without_a_decision_come_back() -> None:
    # Window of 4: a close with a passing verdict, then a window of losers only (it closes with no
    # decision: nothing on the log), then a loser of c9 that waits; after the restart c9's passing
    # verdict closes the window with a pair against it, as live.
    cfg = CuratorConfig(window_verdicts=4, keep_fraction=1.0, require_perf=False, train_threshold=100)
    stream = [passing(0), failing(1), failing(2), failing(4),
              failing(5), failing(6), failing(7), failing(8),
              failing(9), passing(9, 1), passing(10), passing(11)]
    log = check(cfg, stream, cuts=[9])
    pairs = [e.payload for e in log.events if isinstance(e.payload, PreferenceRecorded)]
    assert [(p.chosen_sample_id, p.rejected_sample_id) for p in pairs] == [(stream[9].event_id, stream[8].event_id)]


def test_pools_rounds_and_reverified_samples_come_back() -> None:
    # Requests every two kept samples; re-verified samples replace their predecessors in the pool
    # they were in (history after a request), and a re-verified failure retracts a kept sample.
    cfg = CuratorConfig(window_verdicts=1, keep_fraction=1.0, require_perf=False, train_threshold=2,
                        new_fraction=0.5)
    stream = [passing(0), passing(1), passing(2), passing(0, version="2"), passing(4),
              failing(1, version="2"), passing(5), passing(2, version="2"), passing(7), passing(8)]
    for cut in range(1, len(stream)):
        check(cfg, stream, cuts=[cut])


def test_a_held_loser_superseded_before_the_restart_stays_out_of_the_window() -> None:
    # c3's failed v1 waits as a loser for pairs; its v2 (passing) supersedes it with no decision on
    # the log (a held loser is decided already). After the restart c3's second sample closes the
    # window: its pairs must not name the v1 verdict.
    cfg = CuratorConfig(window_verdicts=5, keep_fraction=1.0, require_perf=False, train_threshold=100)
    stream = [passing(0), passing(1), failing(3), passing(3, version="2"), passing(3, 1, code=CLEAN),
              passing(4)]
    log = check(cfg, stream, cuts=[4])
    rejected = {e.payload.rejected_sample_id for e in log.events if isinstance(e.payload, PreferenceRecorded)}
    assert rejected and stream[2].event_id not in rejected


def test_a_redelivery_after_going_live_still_takes_its_predecessor_out_of_the_window() -> None:
    # v2 of c3 was processed before the kill (its decision is on the log) but not committed; it
    # comes back after the first live verdict. The loser it superseded must leave the window then.
    cfg = CuratorConfig(window_verdicts=10, keep_fraction=1.0, require_perf=False, train_threshold=100)
    old, new = failing(3), failing(3, version="2")
    log = Log()
    log.run(CuratorCore(cfg), [old, new])
    core = restart(cfg, log, [old])
    assert [c.sample_id for c in core.window] == []  # not live yet: the window opens at the first live verdict
    core.process(passing(0))
    assert old.event_id in [c.sample_id for c in core.window]  # as far as the replay knew, it waits
    core.observe(new)  # the processor knows the redelivery by its output on the log
    assert old.event_id not in [c.sample_id for c in core.window]
    assert core.ledger.get(("c3", 0)).sample_id == new.event_id  # type: ignore[union-attr]


def test_a_rescan_adds_nothing() -> None:
    cfg = CuratorConfig(window_verdicts=3, keep_fraction=1.0, require_perf=False, train_threshold=1)
    stream = [passing(n) for n in range(5)]
    log = Log()
    log.run(CuratorCore(cfg), stream[:4])
    once, twice = restart(cfg, log, stream[:4]), restart(cfg, log, stream[:4])
    for e in log.scan():  # a second warm-up before any live verdict (a rebalance) sees them again
        twice.observe_output(e)
    assert once.process(stream[4]) == twice.process(stream[4])
    assert state(once) == state(twice)


def test_verdict_decided_at_a_close_and_redelivered_is_not_decided_again() -> None:
    # Its batch was published but not committed before the kill: it is not replayed, and its
    # decision's causation is the verdict that closed the window, so only the core knows it.
    cfg = CuratorConfig(window_verdicts=2, keep_fraction=1.0, require_perf=False, train_threshold=100)
    a, b = passing(0), passing(1)
    log = Log()
    log.run(CuratorCore(cfg), [a, b])
    core = restart(cfg, log, [])
    assert core.process(a) == [] and core.process(b) == []
    assert core.window == [] and core.window_verdicts == 0
    assert {a.event_id, b.event_id} <= core.on_log


def test_eval_contamination_and_stale_verdicts_across_a_restart() -> None:
    cfg = CuratorConfig(window_verdicts=3, keep_fraction=1.0, require_perf=False, train_threshold=100)
    ev = envelope(verdict(distinct(3), challenge_id="c30", ctx=ctx_of(3, purpose="eval")))
    stream = [passing(0, version="2"), ev, passing(0, version="1"), passing(1), passing(3),
              passing(0, version="3"), failing(4), passing(6)]
    for cut in range(1, len(stream)):
        check(cfg, stream, cuts=[cut])


def random_stream(seed: int, n: int = 36) -> list[AnyEnvelope]:
    """Passing, failing, rule-hit, code-less, re-verified and eval verdicts; rounds never go back."""
    rng = random.Random(seed)
    out: list[AnyEnvelope] = []
    seen: list[tuple[int, int]] = []  # (challenge number, sample index) of train verdicts so far
    version, round_ = 1, 0
    for i in range(n):
        round_ += rng.random() < 0.08
        kind = rng.choices(["pass", "fail", "cheat", "none", "again", "eval"], [6, 4, 1, 1, 3, 1])[0]
        num, index = (rng.choice(seen) if kind == "again" and seen else (rng.randrange(12), i))
        if kind == "again":
            version += 1
        ctx = ctx_of(num, round_=round_, purpose="eval" if kind == "eval" else "train")
        code = {"cheat": CHEAT, "none": None}.get(kind, distinct(num) if rng.random() < 0.8 else CLEAN)
        passed = kind != "fail" and not (kind == "again" and rng.random() < 0.4)
        v = verdict(code or "", challenge_id=f"c{num}", sample_index=index, passed=passed, ctx=ctx)
        out.append(envelope(v.model_copy(update={"code": code, "verifier_version": str(version)})))
        if kind != "eval":
            seen.append((num, index))
    return out


def test_random_streams_restarted_anywhere_decide_as_an_uninterrupted_curator() -> None:
    for seed in range(12):
        rng = random.Random(seed)
        cfg = CuratorConfig(window_verdicts=rng.choice([1, 2, 3, 5]), keep_fraction=rng.choice([0.5, 1.0]),
                            require_perf=False, train_threshold=rng.choice([1, 2, 3]), new_fraction=0.5,
                            pairs_with_failed=rng.random() < 0.7)
        stream = random_stream(seed)
        cuts = sorted(rng.sample(range(1, len(stream)), 3))
        check(cfg, stream, cuts)


def test_close_reasons_are_exactly_the_reasons_a_close_gives() -> None:
    """recovery.CLOSE_REASONS recognises a window close on the log: it must name every reason
    close_window gives, and no reason a verdict gets on arrival."""
    closing: set[str] = set()
    arriving: set[str] = set()
    for seed in range(12):
        core = CuratorCore(CuratorConfig(window_verdicts=3, keep_fraction=0.5, require_perf=False))
        closes: list[list[BaseModel]] = []

        def close(live_close: Callable[[], list[BaseModel]] = core.close_window,
                  closes: list[list[BaseModel]] = closes) -> list[BaseModel]:
            out = live_close()
            closes.append(out)
            return out

        core.close_window = close  # type: ignore[method-assign]
        for e in random_stream(seed):
            closes.clear()
            out = core.process(e)
            closed = [p for c in closes for p in c]
            closing.update(reason_key(p.reason) for p in closed if isinstance(p, SampleCurated))
            arriving.update(reason_key(p.reason) for p in out
                            if isinstance(p, SampleCurated) and not any(p is q for q in closed))
    assert closing == CLOSE_REASONS
    assert not arriving & CLOSE_REASONS
    assert {"failed", "no_code", "rule", "superseded_by", "eval_contamination"} <= arriving
