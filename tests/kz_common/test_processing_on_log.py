"""A stateless core is not re-run for inputs whose outputs are already on the log.

After a restart (or on a broker restored from the archive) the verifier used to re-run
the sandbox for every committed extraction just to drop the result: minutes of GPU work.
"""

from __future__ import annotations

from typing import Any

from kz_common.processing import BatchProcessor, InRecord
from schemas import encode
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
