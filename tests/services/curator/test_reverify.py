"""Re-verification: a newer verifier's verdict of a sample supersedes the earlier one.

Each test also pins what must NOT change: another sample (another index, another
challenge) with near-identical code is still a duplicate or a worse answer, and a
late verdict from an older verifier never overrides a newer one.
"""

from __future__ import annotations

from schemas import (
    AnyEnvelope,
    PreferenceRecorded,
    SampleCurated,
    SolutionVerified,
    TrainingRequested,
)
from services.curator.config import CuratorConfig
from services.curator.core import CuratorCore
from services.curator.supersede import version_key
from tests.services.curator.samples import CLEAN, context, envelope, renamed, verdict
from tests.services.curator.test_core import distinct, of

NEAR = context(shape_range={"rows": (250, 1000), "cols": (310, 4000)})  # collides with context()


def v(version: str, **kw: object) -> SolutionVerified:
    return verdict(**kw).model_copy(update={"verifier_version": version})  # type: ignore[arg-type]


def feed(core: CuratorCore, payload: SolutionVerified) -> tuple[str, list[SampleCurated], list[TrainingRequested]]:
    env: AnyEnvelope = envelope(payload)
    out = core.process(env)
    return env.event_id, of(out, SampleCurated), of(out, TrainingRequested)


def core_(**kw: object) -> CuratorCore:
    cfg = {"window_verdicts": 1, "train_threshold": 1000, "keep_fraction": 1.0, **kw}
    return CuratorCore(CuratorConfig(**cfg))  # type: ignore[arg-type]


def test_versions_compare_by_their_numbers() -> None:
    assert version_key("1.10") > version_key("1.9") > version_key("1.2.3")
    assert version_key("v2") > version_key("1.0.0") and version_key(None) == ()


def test_reverified_sample_is_not_a_duplicate_of_its_own_earlier_verdict() -> None:
    core = core_()
    a1, d1, _ = feed(core, v("1", challenge_id="c1"))
    assert [(d.kept, d.reason) for d in d1] == [(True, "kept")]
    a2, d2, _ = feed(core, v("2", challenge_id="c1"))
    # The earlier decision is retracted and the new verdict kept on its own merit.
    assert [(d.verdict_event_id, d.kept, d.reason, d.verifier_version) for d in d2] == [
        (a1, False, f"superseded_by:{a2}", "1"), (a2, True, "kept", "2")]
    assert a1 not in core.index and a2 in core.index
    assert list(core.new_pool) == [a2] and core.answers["c1"][0] == a2


def test_other_samples_with_near_identical_code_are_still_deduplicated() -> None:
    core = core_()
    a, _, _ = feed(core, v("1", challenge_id="c1", speedup=3.0))
    # Another index of the same challenge, same code, worse: not the answer, before and after re-verify.
    _, d, _ = feed(core, v("1", challenge_id="c1", sample_index=1, speedup=1.0))
    assert d[0].reason == "not_best_for_challenge"
    _, d, _ = feed(core, v("2", challenge_id="c1", sample_index=1, speedup=1.0))
    assert [(x.kept, x.reason) for x in d] == [(False, "not_best_for_challenge")]  # nothing to retract
    # Another challenge, renamed copy: a duplicate of the kept sample with either verifier.
    _, d, _ = feed(core, v("1", code=renamed(CLEAN), challenge_id="c2", ctx=NEAR))
    assert d[0].reason == f"duplicate_of:{a}"
    _, d, _ = feed(core, v("2", code=renamed(CLEAN), challenge_id="c2", ctx=NEAR))
    assert [(x.kept, x.reason) for x in d] == [(False, f"duplicate_of:{a}")]
    assert list(core.new_pool) == [a]


def test_reverified_cheat_that_now_fails_is_retracted_and_never_trained_again() -> None:
    core = core_(train_threshold=2, new_fraction=0.5)
    h, _, _ = feed(core, v("1", code=distinct(0), challenge_id="h", ctx=context(op="add")))
    c, _, req = feed(core, v("1", code=distinct(3), challenge_id="x", ctx=context(op="gelu")))
    assert req[0].new_sample_ids == [h, c]
    c2, d, _ = feed(core, v("2", code=distinct(3), challenge_id="x", ctx=context(op="gelu"), passed=False))
    assert [(x.verdict_event_id, x.kept, x.reason) for x in d] == [
        (c, False, f"superseded_by:{c2}"), (c2, False, "failed:correctness")]
    assert c not in core.history and c not in core.index and "x" not in core.answers
    # With the cheat revoked, a renamed copy of its code is no longer a duplicate of anything.
    y, d, _ = feed(core, v("2", code=renamed(distinct(3)), challenge_id="y", ctx=context(op="gelu")))
    assert [(x.kept, x.reason) for x in d] == [(True, "kept")]
    z, _, req = feed(core, v("2", code=distinct(6), challenge_id="z", ctx=context(op="silu")))
    assert req[0].new_sample_ids == [y, z] and req[0].replay_sample_ids == [h]  # the whole history, no cheat


def test_late_verdict_of_an_older_verifier_changes_nothing() -> None:
    core = core_()
    new, _, _ = feed(core, v("1.10", challenge_id="c1"))
    old, d, _ = feed(core, v("1.9", challenge_id="c1", passed=False))
    assert [(x.verdict_event_id, x.kept, x.reason, x.verifier_version) for x in d] == [
        (old, False, f"superseded_by:{new}", "1.9")]
    assert new in core.index and list(core.new_pool) == [new] and core.answers["c1"][0] == new
    assert core.window == [] and core.window_verdicts == 0  # not admitted: no pairs, no window slot


def test_redelivered_verdict_is_decided_once() -> None:
    core = core_()
    env = envelope(v("1", challenge_id="c1"))
    assert [d.kept for d in of(core.process(env), SampleCurated)] == [True]
    assert core.process(env) == []
    assert list(core.new_pool) == [env.event_id]


def test_reverification_inside_the_open_window() -> None:
    core = core_(window_verdicts=100, pairs_with_failed=True)
    best, _, _ = feed(core, v("1", challenge_id="c1", speedup=4.0))
    waiting, d, _ = feed(core, v("1", challenge_id="c1", sample_index=1, speedup=2.0))
    failed, d, _ = feed(core, v("1", challenge_id="c1", sample_index=2, passed=False))
    assert d[0].reason == "failed:correctness"
    w2, d, _ = feed(core, v("2", challenge_id="c1", sample_index=1, speedup=2.0))
    assert [(x.verdict_event_id, x.reason) for x in d] == [(waiting, f"superseded_by:{w2}")]
    f2, d, _ = feed(core, v("2", challenge_id="c1", sample_index=2, speedup=1.5))  # now passes
    assert d == []  # the failed verdict was decided already; its successor waits in the window
    out = core.close_window()
    reasons = {x.verdict_event_id: x.reason for x in of(out, SampleCurated)}
    assert reasons == {best: "kept", w2: "not_best_for_challenge", f2: "not_best_for_challenge"}
    pairs = {(p.chosen_sample_id, p.rejected_sample_id) for p in of(out, PreferenceRecorded)}
    assert pairs == {(best, w2), (best, f2)}  # none against the superseded verdicts
    assert failed not in reasons and waiting not in reasons  # decided before the close


def test_reverified_sample_that_was_trained_rejoins_the_history_pool() -> None:
    core = core_(train_threshold=1, new_fraction=0.5)
    a, _, req = feed(core, v("1", code=distinct(0), challenge_id="a", ctx=context(op="add")))
    assert req[0].new_sample_ids == [a]
    a2, d, req = feed(core, v("2", code=distinct(0), challenge_id="a", ctx=context(op="add")))
    assert [x.kept for x in d] == [False, True] and req == []  # not new data: no training request
    assert list(core.history) == [a2] and core.new_pool == {}
    b, _, req = feed(core, v("2", code=distinct(3), challenge_id="b", ctx=context(op="gelu")))
    assert req[0].new_sample_ids == [b] and req[0].replay_sample_ids == [a2]


def test_state_rebuilt_in_partition_order_matches_the_live_state() -> None:
    """A restart replays each partition's verdicts in turn: v1 and v2 of a sample back to back."""
    live = core_(train_threshold=3, new_fraction=0.5)
    ctxs = {i: context(op=op) for i, op in enumerate(["add", "gelu", "silu"])}
    v1 = [envelope(v("1", code=distinct(3 * i), challenge_id=f"c{i}", ctx=ctxs[i])) for i in range(3)]
    v2 = [envelope(v("2", code=distinct(3 * i), challenge_id=f"c{i}", ctx=ctxs[i], passed=i != 2))
          for i in range(3)]
    live_out = [p for e in [*v1, *v2] for p in live.process(e)]
    assert [r.round for r in of(live_out, TrainingRequested)] == [1]  # before any v2 arrived
    rebuilt = core_(train_threshold=3, new_fraction=0.5)
    for e in [v1[2], v2[2], v1[0], v2[0], v1[1], v2[1]]:  # c2 alone on one partition, c0 and c1 on another
        rebuilt.process(e)
    for core in (live, rebuilt):
        assert core.last_round == 1 and core.fresh_kept == 0 and core.new_pool == {}
        assert sorted(core.history) == sorted([v2[0].event_id, v2[1].event_id])
    # So the next request is numbered and filled the same way after a restart.
    more = [envelope(v("2", code=distinct(3 * i), challenge_id=f"d{i}", ctx=context(op=op)))
            for i, op in zip(range(3, 6), ["row_sum", "row_max", "softmax"])]
    reqs = [of([p for e in more for p in core.process(e)], TrainingRequested) for core in (live, rebuilt)]
    assert reqs[0] == reqs[1] and [r.round for r in reqs[0]] == [2]
