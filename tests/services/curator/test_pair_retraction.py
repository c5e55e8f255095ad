"""Re-verification of a sample in a preference pair retracts it, so the export can drop the pair.

Counter-examples pinned alongside: a kept paired sample is retracted exactly once, a
paired sample that is not re-verified is never retracted, and re-verifying a sample
that is in no pair retracts nothing (as before).
"""

from __future__ import annotations

from schemas import PreferenceRecorded, SampleCurated
from services.curator.core import CuratorCore
from tests.services.curator.samples import envelope
from tests.services.curator.test_core import of
from tests.services.curator.test_reverify import core_, feed, v


def window_with_pairs(core: CuratorCore) -> tuple[str, str, str]:
    """c1: best (kept), a worse passing one and a failed one, both paired against best."""
    best, _, _ = feed(core, v("1", challenge_id="c1", speedup=4.0))
    worse, _, _ = feed(core, v("1", challenge_id="c1", sample_index=1, speedup=2.0))
    failed, d, _ = feed(core, v("1", challenge_id="c1", sample_index=2, passed=False))
    assert [x.reason for x in d] == ["failed:correctness"]
    out = core.close_window()
    assert {(p.chosen_sample_id, p.rejected_sample_id) for p in of(out, PreferenceRecorded)} == {
        (best, worse), (best, failed)}
    assert {x.verdict_event_id: x.kept for x in of(out, SampleCurated)} == {best: True, worse: False}
    return best, worse, failed


def retractions(ds: list[SampleCurated]) -> list[tuple[str, str]]:
    return [(x.verdict_event_id, x.reason) for x in ds if x.reason.startswith("superseded_by:")]


def test_superseded_rejected_side_is_retracted_once() -> None:
    core = core_(window_verdicts=100, pairs_with_failed=True)
    best, worse, failed = window_with_pairs(core)
    env = envelope(v("2", challenge_id="c1", sample_index=2, speedup=5.0))  # now passes
    d = of(core.process(env), SampleCurated)
    assert [(x.verdict_event_id, x.kept, x.reason, x.verifier_version) for x in d] == [
        (failed, False, f"superseded_by:{env.event_id}", "1")]
    assert failed not in core.paired and worse in core.paired  # the other pair member is untouched
    assert core.process(env) == []  # a redelivered successor retracts nothing a second time
    assert best in core.kept


def test_superseded_kept_chosen_is_retracted_exactly_once() -> None:
    core = core_(window_verdicts=100, pairs_with_failed=True)
    best, worse, failed = window_with_pairs(core)
    assert best not in core.paired  # kept: self.kept describes its retraction
    b2, d, _ = feed(core, v("2", challenge_id="c1", speedup=4.0))
    assert retractions(d) == [(best, f"superseded_by:{b2}")]  # one retraction, not one per role
    assert {worse, failed} <= set(core.paired)  # the other sides stay, for a later supersede of theirs


def test_unkept_chosen_is_retracted_when_superseded() -> None:
    core = core_(window_verdicts=100, pairs_with_failed=True)
    best, _, _ = window_with_pairs(core)
    # A later window of c1: its answer loses to the kept one (not kept) but still wins a pair.
    chosen, _, _ = feed(core, v("1", challenge_id="c1", sample_index=4, speedup=3.0))
    rejected, _, _ = feed(core, v("1", challenge_id="c1", sample_index=5, speedup=1.0))
    out = core.close_window()
    assert {(p.chosen_sample_id, p.rejected_sample_id) for p in of(out, PreferenceRecorded)} == {(chosen, rejected)}
    assert {x.verdict_event_id: x.reason for x in of(out, SampleCurated)} == {
        chosen: "not_best_for_challenge", rejected: "not_best_for_challenge"}
    c2, d, _ = feed(core, v("2", challenge_id="c1", sample_index=4, speedup=3.0))
    assert retractions(d) == [(chosen, f"superseded_by:{c2}")]
    assert rejected in core.paired and best in core.kept  # neither is touched


def test_reverified_sample_outside_any_pair_retracts_nothing() -> None:
    core = core_(window_verdicts=1)
    lone, _, _ = feed(core, v("1", challenge_id="c9", sample_index=1, passed=False))
    assert core.paired == {}
    _, d, _ = feed(core, v("2", challenge_id="c9", sample_index=1, passed=False))
    assert retractions(d) == [] and [x.reason for x in d] == ["failed:correctness"]
    assert lone not in core.paired
