"""`handle_many`: the same outputs as `handle` record by record, with the core in parallel.

The verifier spends seconds per event in `process`; a batch of extractions is verified
concurrently (one shared Session), while dedupe, dead letters and wrapping stay in input
order. Checked against the real extractor core on a mixed batch.
"""

from __future__ import annotations

import threading
from typing import Any

from kz_common.core import ProcessingError
from kz_common.processing import BatchProcessor, InRecord
from schemas import encode
from services.extractor.core import ExtractorCore
from tests.services.extractor.test_core import sampled

CODE = "```python\nimport triton\n```"


class Picky(ExtractorCore):
    """The real extractor, failing on purpose for two sample indices; records its threads."""

    def __init__(self, barrier: threading.Barrier | None = None) -> None:
        super().__init__()
        self.barrier, self.threads = barrier, set[int]()

    def process(self, event: Any) -> list[Any]:
        self.threads.add(threading.get_ident())
        if self.barrier is not None:
            self.barrier.wait()  # returns only once `parties` calls run at the same time
        index = event.payload.sample_index
        if index == 3:
            raise ProcessingError("sample 3 is unusable")
        if index == 4:
            raise RuntimeError("a bug in the core")
        return super().process(event)


def _batch() -> list[InRecord]:
    raws = [encode(sampled(CODE, index=i)) for i in range(6)]
    values = raws[:3] + [raws[1], b"not an event"] + raws[3:]  # a duplicate and garbage
    return [InRecord("solutions", 0, offset, v) for offset, v in enumerate(values)]


def _summary(outs: list[Any]) -> list[tuple[str, str, str]]:
    """Topic, reason and (derived, so deterministic) event id of each output; a letter for
    bytes that are no event has a fresh id (no input id to derive one from): its kind counts."""
    return [(o.topic, o.reason or "", "" if o.reason == "decode" else o.event_id)
            for o in outs]


def test_outputs_and_counts_match_one_by_one_handling() -> None:
    batch = _batch()
    one = BatchProcessor(Picky(), max_bytes=1_000_000, capacity=100)
    expected = [o for rec in batch for o in one.handle(rec)]
    many = BatchProcessor(Picky(), max_bytes=1_000_000, capacity=100)
    got = many.handle_many(batch, workers=4)
    assert _summary(got) == _summary(expected)
    assert many.counts == one.counts == {"in": 8, "out": 4, "dead": 3, "duplicate": 1,
                                         "redelivered": 0, "on_log": 0}


def test_the_core_really_runs_in_parallel() -> None:
    core = Picky(threading.Barrier(3, timeout=20))  # three at once, or BrokenBarrierError
    processor = BatchProcessor(core, max_bytes=1_000_000, capacity=100)
    recs = [InRecord("solutions", 0, i, encode(sampled(CODE, index=i))) for i in (0, 1, 2)]
    outs = processor.handle_many(recs, workers=3)
    assert [o.topic for o in outs] == ["extracted"] * 3 and len(core.threads) == 3


def test_one_worker_is_plain_handling() -> None:
    core = Picky()
    processor = BatchProcessor(core, max_bytes=1_000_000, capacity=100)
    assert len(processor.handle_many(_batch(), workers=1)) == 7  # 8 records, one duplicate
    assert core.threads == {threading.get_ident()}  # every call on the caller's thread


class Planner(Picky):
    """Picky with `process_many`: the whole batch in one call (the verifier's bundles are
    planned across it), each event's result or exception in its place."""

    def __init__(self, fail: BaseException | None = None, short: bool = False) -> None:
        super().__init__()
        self.fail, self.short, self.batches = fail, short, list[list[int]]()

    def process_many(self, events: list[Any]) -> list[Any]:
        self.batches.append([e.payload.sample_index for e in events])
        if self.fail is not None:
            raise self.fail
        results: list[Any] = []
        for e in events:
            try:
                results.append(self.process(e))
            except Exception as exc:  # noqa: BLE001  returned in its place, as the protocol says
                results.append(exc)
        return results[:-1] if self.short else results


def test_a_core_with_process_many_gets_the_batch_in_one_call_with_the_same_outputs() -> None:
    batch = _batch()
    one = BatchProcessor(Picky(), max_bytes=1_000_000, capacity=100)
    expected = [o for rec in batch for o in one.handle(rec)]
    core = Planner()
    many = BatchProcessor(core, max_bytes=1_000_000, capacity=100)
    got = many.handle_many(batch, workers=4)
    assert core.batches == [[0, 1, 2, 3, 4, 5]]  # no duplicate, no garbage: in input order
    assert _summary(got) == _summary(expected) and many.counts == one.counts


def test_a_failing_or_short_process_many_dead_letters_the_whole_batch() -> None:
    for core in (Planner(fail=RuntimeError("the batch planner broke")), Planner(short=True)):
        processor = BatchProcessor(core, max_bytes=1_000_000, capacity=100)
        outs = processor.handle_many(_batch(), workers=4)
        assert [o.topic for o in outs] == ["dead-letters"] * 7  # 6 events + the garbage
        assert processor.counts["dead"] == 7 and processor.counts["out"] == 0
