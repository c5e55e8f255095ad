"""A stateless core is not re-run for inputs whose outputs are already on the log.

After a restart (or on a broker restored from the archive) the verifier used to re-run
the sandbox for every committed extraction just to drop the result: minutes of GPU work.
A core that rebuilds state from its own outputs (`observe_output`, the curator) is handed
them by the same warm-up scan.
"""

from __future__ import annotations

from typing import Any

from kz_common.processing import BatchProcessor, InRecord
from schemas import Producer, decode, encode, make_event
from services.extractor.core import ExtractorCore
from tests.services.extractor.test_core import sampled

CODE = "```python\nimport triton\n```"


class CountingExtractor(ExtractorCore):
    """The real extractor, counting how often it does its work."""

    calls = 0

    def process(self, event: Any) -> list[Any]:
        self.calls += 1
        return super().process(event)


def _run(core: ExtractorCore) -> tuple[BatchProcessor, bytes, list[Any]]:
    processor = BatchProcessor(core, max_bytes=1_000_000, capacity=100)
    raw = encode(sampled(CODE))
    return processor, raw, processor.handle(InRecord("solutions", 0, 0, raw))


def test_stateless_core_skips_inputs_already_answered_on_the_log() -> None:
    _, raw, outs = _run(ExtractorCore())
    assert len(outs) == 1
    restarted = CountingExtractor()
    processor = BatchProcessor(restarted, max_bytes=1_000_000, capacity=100)
    processor.note_output(outs[0].value)  # the warm-up scan found it on the output topic
    assert processor.handle(InRecord("solutions", 0, 0, raw)) == []
    assert restarted.calls == 0 and processor.counts["on_log"] == 1


def test_stateful_core_without_observe_still_rebuilds_its_state() -> None:
    class StatefulExtractor(CountingExtractor):
        stateful = True

    _, raw, outs = _run(ExtractorCore())
    core = StatefulExtractor()
    processor = BatchProcessor(core, max_bytes=1_000_000, capacity=100)
    processor.note_output(outs[0].value)
    assert processor.handle(InRecord("solutions", 0, 0, raw)) == []  # output not repeated
    assert core.calls == 1  # but the core saw the event again


class OutputObserver(ExtractorCore):
    """The real extractor with an `observe_output` hook that records what it is handed."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.fail = fail
        self.seen: list[Any] = []

    def observe_output(self, event: Any) -> None:
        self.seen.append(event)
        if self.fail:
            raise RuntimeError("a bug in the hook")


def test_own_outputs_on_the_log_reach_observe_output_decoded() -> None:
    _, raw, outs = _run(ExtractorCore())
    foreign = make_event(decode(outs[0].value).payload, producer=Producer(service="someone-else", version="1"),
                         correlation_id="c")
    core = OutputObserver()
    processor = BatchProcessor(core, max_bytes=1_000_000, capacity=100)
    for value in (outs[0].value, encode(foreign), raw, b"\x00 not json", b'{"producer": {"service": "extractor"}}'):
        processor.note_output(value)
    assert [e.event_id for e in core.seen] == [outs[0].event_id]  # only its own, decodable events
    assert core.seen[0] == decode(outs[0].value)
    assert processor.handle(InRecord("solutions", 0, 0, raw)) == []  # and it is still known as on the log


def test_a_failing_observe_output_costs_the_event_not_the_warm_up() -> None:
    _, raw, outs = _run(ExtractorCore())
    core = OutputObserver(fail=True)
    processor = BatchProcessor(core, max_bytes=1_000_000, capacity=100)
    processor.note_output(outs[0].value)
    assert len(core.seen) == 1
    assert processor.handle(InRecord("solutions", 0, 0, raw)) == []  # its output was still noted
