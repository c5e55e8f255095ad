"""Retractions of curated samples: CuratedSet, TrainerCore's sample set, and the export.

Counter-examples pinned with each rule: a sample kept twice by duplicate delivery is
held exactly once, a retraction of another sample (or of another verdict of the same
sample) drops nothing else, and a plain rejection leaves no tombstone.
"""

from __future__ import annotations

from pathlib import Path

from schemas import AnyEnvelope, PreferenceRecorded, RoundTrained, SampleCurated, TrainingRequested
from services.trainer.config import TrainerConfig
from services.trainer.core import TrainerCore, effective_hash
from services.trainer.export import curated_set, export_dataset, preference_rows, sft_rows
from services.trainer.retraction import CuratedSet
from tests.services.curator.samples import CLEAN, context, envelope
from tests.services.curator.test_core import of
from tests.services.curator.test_reverify import core_, v
from tests.services.trainer.events import curated, env
from tests.services.trainer.test_trainer_core import config


def retraction(sid: str, by: str = "new") -> SampleCurated:
    return curated(sid, kept=False).model_copy(update={"reason": f"superseded_by:{by}"})


def pair(chosen: str, rejected: str) -> PreferenceRecorded:
    return PreferenceRecorded(
        challenge_id="c", context=context(), chosen_sample_id=chosen, rejected_sample_id=rejected,
        chosen_code=CLEAN, rejected_code="bad", chosen_score=1.0, rejected_score=None, reason="failed:x")


# --------------------------------------------------------------------------- CuratedSet


def test_later_retraction_drops_the_kept_sample() -> None:
    s = CuratedSet.of([curated("a"), curated("b"), retraction("a")])
    assert list(s.kept) == ["b"] and s.retracted == {"a"}


def test_retraction_before_its_kept_decision_still_wins() -> None:
    s = CuratedSet.of([retraction("a"), curated("a"), curated("a")])  # overtaken, then redelivered
    assert s.kept == {} and "a" in s.retracted


def test_duplicate_kept_is_held_once_and_keeps_first_order() -> None:
    s = CuratedSet()
    assert [s.apply(x) for x in (curated("a"), curated("b"), curated("a"))] == [True, True, False]
    assert list(s.kept) == ["a", "b"]
    assert s.apply(retraction("a")) is True and s.apply(retraction("a")) is False  # idempotent
    assert list(s.kept) == ["b"]


def test_retraction_of_another_sample_drops_nothing_else() -> None:
    # "a2" is the newer verdict of the same sample as "a": its own id, its own decision.
    s = CuratedSet.of([curated("a"), curated("b"), retraction("a", by="a2"), curated("a2"), retraction("zzz")])
    assert list(s.kept) == ["b", "a2"] and s.retracted == {"a", "zzz"}


def test_plain_rejection_voids_a_kept_sample_but_leaves_no_tombstone() -> None:
    s = CuratedSet.of([curated("a"), curated("a", kept=False)])
    assert s.kept == {} and s.retracted == {"a"}  # a later kept=False retracts
    s = CuratedSet.of([curated("x", kept=False), curated("y", kept=False)])
    assert s.retracted == set()  # rejections of never-kept samples are not remembered


# --------------------------------------------------------------------------- TrainerCore


def request(*ids: str, rnd: int = 1) -> TrainingRequested:
    return TrainingRequested(round=rnd, new_sample_ids=list(ids), replay_sample_ids=[], dataset_hash=f"d{rnd}")


def test_trainer_does_not_wait_for_a_retracted_sample() -> None:
    core = TrainerCore(TrainerConfig(base_model="unused"))
    for x in (curated("a"), curated("a"), retraction("a"), curated("a"), curated("b")):
        core.process(env(x))
    assert list(core.samples) == ["b"]
    req = request("a", "b", "c")
    assert core.missing(req) == ["c"] and core.retracted(req) == ["a"]


def test_request_whose_every_sample_is_retracted_trains_nothing() -> None:
    core = TrainerCore(TrainerConfig(base_model="unused"))  # training would fail: it must not start
    core.process(env(curated("a")))
    core.process(env(retraction("a")))
    assert core.process(env(request("a"))) == []
    assert core.skipped == {1} and 1 in core.done and core.pending == {}


def test_retracted_sample_is_left_out_of_training(tiny_model: Path, tmp_path: Path) -> None:
    core = TrainerCore(config(tiny_model, tmp_path))
    core.process(env(curated("a")))
    core.process(env(curated("b")))
    core.process(env(retraction("b")))
    req = request("a", "b")
    assert [e.sample_id for e in core.examples(req)] == ["a"]
    trained = of(core.process(env(req)), RoundTrained)
    assert len(trained) == 1 and trained[0].dataset_hash == "d1"  # it answers the request
    assert trained[0].metrics["retracted_samples"] == 1.0
    manifest = Path(trained[0].adapter_path, "manifest.json").read_text()
    assert effective_hash("d1", ["b"]) in manifest and effective_hash("d1", []) == "d1"


# --------------------------------------------------------------------------- export


def test_export_drops_retracted_samples_and_their_pairs() -> None:
    decisions: list[SampleCurated | AnyEnvelope] = [env(curated("a")), curated("b"), curated("a"), retraction("a"), curated("r", kept=False),
                 retraction("gone")]
    assert [r["metadata"]["sample_id"] for r in sft_rows(decisions)] == ["b"]
    retracted = curated_set(decisions).retracted
    pairs: list[PreferenceRecorded | AnyEnvelope] = [
        pair("a", "r"), pair("b", "r"), pair("b", "gone"), env(pair("b", "r"))]
    rows = preference_rows(pairs, retracted=retracted)
    assert [(r["metadata"]["chosen_sample_id"], r["metadata"]["rejected_sample_id"]) for r in rows] == [("b", "r")]
    assert len(preference_rows(pairs)) == 3  # without retractions: every distinct pair


def test_curator_retractions_reach_the_export(tmp_path: Path) -> None:
    """The contract end to end: the curator's own events, read once as `kz export` does."""
    core = core_(window_verdicts=100, pairs_with_failed=True)
    events = [envelope(v("1", challenge_id="c1", speedup=4.0)),
              envelope(v("1", challenge_id="c1", sample_index=1, passed=False))]
    curated_out = [p for e in events for p in core.process(e)] + core.close_window()
    best, failed = (e.event_id for e in events)
    assert {(p.chosen_sample_id, p.rejected_sample_id) for p in of(curated_out, PreferenceRecorded)} == {
        (best, failed)}
    other = envelope(v("1", challenge_id="c2", speedup=3.0, ctx=context(op="gelu")))
    curated_out += core.process(other) + core.close_window()
    # Re-verification: the failed one now passes, so the pair against it no longer stands.
    curated_out += core.process(envelope(v("2", challenge_id="c1", sample_index=1, speedup=5.0)))
    decisions = of(curated_out, SampleCurated)
    paths = export_dataset(iter(decisions), of(curated_out, PreferenceRecorded), tmp_path)  # one pass
    assert paths["preferences"].read_text() == ""
    sft = paths["sft"].read_text().splitlines()
    assert len(sft) == 2 and best in sft[0] and other.event_id in sft[1]  # the kept ones stay
