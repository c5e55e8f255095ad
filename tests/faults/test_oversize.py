"""Oversized messages through the real extractor, verifier and curator services.

- records over max_message_bytes on an input topic (one not even an event, one a
  valid SolutionSampled): dead-lettered as `oversize`, truncated so the letter fits;
- an input that fits whose output would not (a ~990 KB extraction: its verdict carries
  the code plus the verdict): the input is dead-lettered, nothing else is lost;
- a curator input whose window close emits a preference pair of two ~520 KB kernels
  (over the limit) next to decisions that fit: the pair is dead-lettered, every
  curation decision and the training request are still published.

Tansu accepts records larger than 1 MB (it does not enforce message.max.bytes), so the
services' own limit is what every one of these cases meets.
"""

from __future__ import annotations

import base64
from collections import Counter
from pathlib import Path

import orjson
import pytest

from kz_common.config import Settings
from schemas import AnyEnvelope, encode
from tests.faults import candidates as C
from tests.faults.conftest import curator_section, verifier_section
from tests.faults.pipeline import (
    Services,
    dead_letters,
    drained,
    events,
    extracted,
    fenced,
    publish,
    publish_events,
    sampled,
    summary,
)

pytestmark = [pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(150)]


def extraction_of_size(cid: str, index: int, code: str, size: int, fill: str = "x") -> AnyEnvelope:
    """An accepted extraction of `code` padded with comments to `size` encoded bytes (+-2)."""
    n = size - len(encode(extracted(cid, index, code)))
    for _ in range(6):
        event = extracted(cid, index, C.padded(code, n, fill))
        got = len(encode(event))
        if abs(got - size) <= 2:
            return event
        n += size - got
    raise AssertionError(f"could not pad an extraction to {size} bytes (got {got})")


def test_oversized_inputs_and_outputs_are_dead_lettered_and_nothing_else_is_lost(
        fault_settings: Settings, verifier_cache: Path, tmp_path: Path) -> None:
    s = fault_settings
    limit = s.kafka.max_message_bytes

    # ---- over the limit on the extractor's input topic
    garbage = b"\x07" * (limit + 200_000)
    huge_sample = sampled("big-in", 0, fenced(C.HONEST) + "\n" + "y" * (limit + 100_000))
    assert len(encode(huge_sample)) > limit
    small = sampled("small", 0, fenced(C.HONEST))
    publish(s, "solutions", [garbage], [b"garbage"])
    publish_events(s, "solutions", [huge_sample, small])

    # ---- fits, but its verdict would not: static rejection (cheap), the verdict carries the code
    # (a verdict adds far more than 150 bytes: version, stage, reasons, device, isolation, ...)
    near_limit = extraction_of_size("big-out", 0, C.STATIC_CHEAT, limit - 150)
    # ---- two passing kernels whose preference pair is over the limit, decisions are not
    pair_a = extraction_of_size("big-pair", 0, C.HONEST, 520_000, fill="a")
    pair_b = extraction_of_size("big-pair", 1, C.HONEST, 520_000, fill="b")
    publish_events(s, "extracted", [near_limit, pair_a, pair_b])

    services = {
        "verifier": verifier_section(verifier_cache),
        # three verdicts reach the curator (small, pair_a, pair_b): the third closes the window
        "curator": curator_section(window_verdicts=3),
    }
    with Services(s, tmp_path, services) as svc:
        svc.start("extractor", "verifier", "curator")
        svc.wait(lambda: len(events(s, "curated", "sample.curated")) >= 3 and drained(s),
                 120, "the pipeline to finish")
        svc.check()

    letters = dead_letters(s)
    by_consumer = Counter((x["consumer"], x["error_kind"]) for x in letters)
    assert by_consumer == {("extractor", "oversize"): 2, ("verifier", "oversize"): 1,
                           ("curator", "oversize"): 1}, (letters_summary(letters), summary(s))

    # inputs over the limit: kept (truncated) so the letter itself fits on the topic
    inputs = {x["original_event_id"]: x for x in letters if x["consumer"] == "extractor"}
    assert set(inputs) == {None, huge_sample.event_id}
    for x, original in ((inputs[None], garbage), (inputs[huge_sample.event_id], encode(huge_sample))):
        kept = base64.b64decode(x["original_b64"])
        assert original.startswith(kept) and 0 < len(kept) < limit // 2
        assert f"{len(original)} bytes > {limit}" in x["error"] and "truncated" in x["error"]
        assert x["source_topic"] == "solutions"
    assert max(len(encode_doc(d)) for d in events(s, "dead-letters")) <= limit

    # an output over the limit: the letter names the output, the input is kept whole
    [verifier_letter] = [x for x in letters if x["consumer"] == "verifier"]
    assert verifier_letter["original_event_id"] == near_limit.event_id
    assert "output solution.verified is" in verifier_letter["error"]
    assert encode(near_limit).startswith(base64.b64decode(verifier_letter["original_b64"]))

    [curator_letter] = [x for x in letters if x["consumer"] == "curator"]
    assert "output preference.recorded is" in curator_letter["error"], curator_letter["error"]

    # every verdict that fit was curated exactly once; the oversized pair is the only thing missing
    verified = events(s, "verified", "solution.verified")
    assert sorted(v["payload"]["challenge_id"] for v in verified) == ["big-pair", "big-pair", "small"]
    assert all(v["payload"]["passed"] for v in verified), [v["payload"]["reasons"] for v in verified]
    decisions = Counter(d["payload"]["verdict_event_id"] for d in events(s, "curated", "sample.curated"))
    assert decisions == Counter({v["event_id"]: 1 for v in verified})
    assert events(s, "curated", "preference.recorded") == []
    [request] = events(s, "training-requests", "training.requested")
    kept_ids = {d["payload"]["verdict_event_id"] for d in events(s, "curated", "sample.curated")
                if d["payload"]["kept"]}
    assert set(request["payload"]["new_sample_ids"]) == kept_ids and kept_ids
    [small_extraction] = [e for e in events(s, "extracted") if e["payload"]["challenge_id"] == "small"]
    assert small_extraction["causation_id"] == small.event_id and small_extraction["payload"]["accepted"]


def letters_summary(letters: list[dict]) -> list[tuple[str, str, str]]:
    return [(x["consumer"], x["error_kind"], x["error"][:160]) for x in letters]


def encode_doc(doc: dict) -> bytes:
    return orjson.dumps(doc)
