"""CuratorCore end to end on envelopes: funnel, windows, dedup, pairs, training requests."""

from __future__ import annotations

from collections import Counter

from schemas import PreferenceRecorded, SampleCurated, TrainingRequested
from services.curator.config import CuratorConfig
from services.curator.core import CuratorCore
from tests.services.curator.samples import CLEAN, context, envelope, renamed, verdict
from tests.services.curator.test_patterns import LOOPED

CHEAT = CLEAN.replace("        return out\n", "        return torch.softmax(x, dim=-1)\n")


def run(core: CuratorCore, verdicts: list) -> tuple[list, list[str]]:  # type: ignore[type-arg]
    out, ids = [], []
    for v in verdicts:
        env = envelope(v)
        ids.append(env.event_id)
        out += core.process(env)
    return out, ids


def of(out: list, kind: type) -> list:  # type: ignore[type-arg]
    return [p for p in out if isinstance(p, kind)]


def test_eval_verdicts_are_ignored() -> None:
    core = CuratorCore(CuratorConfig(window_verdicts=1))
    out, _ = run(core, [verdict(ctx=context(purpose="eval", round=1))])
    assert out == [] and core.window_verdicts == 0


def test_immediate_rejections_carry_reasons_and_hits() -> None:
    core = CuratorCore(CuratorConfig(window_verdicts=100, require_perf=True))
    out, ids = run(core, [verdict(passed=False), verdict(speedup=None), verdict(CHEAT)])
    decisions = of(out, SampleCurated)
    assert [d.reason for d in decisions] == ["failed:correctness", "no_perf", "rule:library_call"]
    assert not any(d.kept for d in decisions)
    assert decisions[2].rule_hits[0].rule == "library_call" and "torch.softmax" in decisions[2].rule_hits[0].evidence
    assert [d.verdict_event_id for d in decisions] == ids
    assert decisions[0].context == context()


def test_a_time_unconfirmed_on_unseen_inputs_is_not_kept() -> None:
    """The verifier raised the time to its holdout runs': a cache by input contents, or a
    noisy run; either way the speed-up is not the kernel's, so it is no training sample."""
    core = CuratorCore(CuratorConfig(window_verdicts=2))
    out, _ = run(core, [verdict(holdout_ratio=2.0), verdict(sample_index=1, holdout_ratio=0.97)])
    assert [(d.kept, d.reason) for d in of(out, SampleCurated)] == [
        (False, "unconfirmed_timing"), (True, "kept")]


def test_require_perf_false_keeps_cpu_samples() -> None:
    core = CuratorCore(CuratorConfig(window_verdicts=1, require_perf=False))
    out, _ = run(core, [verdict(speedup=None)])
    assert [(d.kept, d.reason) for d in of(out, SampleCurated)] == [(True, "kept")]


def test_window_decides_every_verdict_once() -> None:
    core = CuratorCore(CuratorConfig(window_verdicts=12, keep_fraction=0.5, train_threshold=1000))
    near = context(shape_range={"rows": (250, 1000), "cols": (310, 4000)})
    verdicts = [
        verdict(CLEAN, challenge_id="c1", speedup=2.0),
        verdict(CLEAN.replace("x = x.contiguous()", "x = x.contiguous()\n        y = 1"),
                challenge_id="c1", sample_index=1, speedup=3.0),
        verdict(CHEAT, challenge_id="c1", sample_index=2),
        verdict(renamed(CLEAN), challenge_id="c2", speedup=1.0, ctx=near),  # near dup of c1's answer
        verdict(LOOPED.replace("def softmax_looped", "def softmax_kernel") + CLEAN[CLEAN.index("class ModelNew"):]
                + "\nimport torch\nimport triton\nimport triton.language as tl\nimport torch.nn as nn\n",
                challenge_id="c3", speedup=1.6, ctx=context(op="row_max", family="reduction")),
        verdict(CLEAN, challenge_id="c4", speedup=1.2, ctx=context(op="rmsnorm", family="normalization")),
        verdict(CLEAN, challenge_id="c5", speedup=1.1, ctx=context(dtype="float16")),
        *[verdict(challenge_id=f"f{i}", passed=False) for i in range(5)],
    ]
    out, ids = run(core, verdicts)
    decisions = of(out, SampleCurated)
    assert sorted(d.verdict_event_id for d in decisions) == sorted(ids)  # every verdict exactly once
    reasons = {d.verdict_event_id: d.reason for d in decisions}
    assert reasons[ids[0]] == "not_best_for_challenge"
    assert reasons[ids[2]] == "rule:library_call"
    assert reasons[ids[3]] == f"duplicate_of:{ids[1]}"
    # unique answers: c1, c3, c4, c5 -> floor(0.5 * 4) = 2 kept, the best of distinct groups
    kept = [d for d in decisions if d.kept]
    assert {d.verdict_event_id for d in kept} == {ids[1], ids[4]}
    assert Counter(d.reason for d in decisions if not d.kept)["below_top_fraction"] == 2
    pairs = of(out, PreferenceRecorded)
    assert {(p.chosen_sample_id, p.rejected_sample_id, p.reason) for p in pairs} == {
        (ids[1], ids[0], "lower_score"), (ids[1], ids[2], "rule:library_call")}
    assert core.window == [] and core.window_verdicts == 0


def test_newer_round_closes_the_window() -> None:
    core = CuratorCore(CuratorConfig(window_verdicts=100))
    out, _ = run(core, [verdict(challenge_id="a")])
    assert out == []
    out, _ = run(core, [verdict(challenge_id="b", ctx=context(round=1))])
    assert [(d.challenge_id, d.kept) for d in of(out, SampleCurated)] == [("a", True)]
    assert len(core.window) == 1


def test_later_duplicates_of_kept_samples_are_dropped() -> None:
    core = CuratorCore(CuratorConfig(window_verdicts=1))
    run(core, [verdict(challenge_id="a")])
    out, _ = run(core, [verdict(renamed(CLEAN), challenge_id="b")])
    assert of(out, SampleCurated)[0].reason.startswith("duplicate_of:")


def test_eval_tasks_never_enter_training() -> None:
    core = CuratorCore(CuratorConfig(window_verdicts=1))
    run(core, [verdict(ctx=context(purpose="eval", round=1), challenge_id="e")])
    out, _ = run(core, [verdict(challenge_id="t")])
    assert [d.reason for d in of(out, SampleCurated)] == ["eval_contamination"]


def distinct(i: int) -> str:
    """Solutions different enough to not be near duplicates of each other."""
    extra = "".join(f"        tmp{j} = x.shape[{j % 2}]\n        print(tmp{j})\n" for j in range(i * 3))
    return CLEAN.replace("        x = x.contiguous()\n", "        x = x.contiguous()\n" + extra)


def test_training_requests_mix_new_and_history() -> None:
    core = CuratorCore(CuratorConfig(window_verdicts=1, train_threshold=3, new_fraction=0.5))
    ops = ["add", "gelu", "silu", "row_sum", "row_max", "softmax"]
    ctxs = [context(op=ops[i], shape_range={"rows": (2 ** (i % 8 + 1), 2 ** (i % 8 + 1)), "cols": (3, 3)})
            for i in range(6)]
    out, ids = run(core, [verdict(distinct(i), challenge_id=f"c{i}", ctx=ctxs[i]) for i in range(6)])
    requests = of(out, TrainingRequested)
    assert [r.round for r in requests] == [1, 2]
    assert requests[0].new_sample_ids == ids[:3] and requests[0].replay_sample_ids == []
    assert requests[1].new_sample_ids == ids[3:]
    assert sorted(requests[1].replay_sample_ids) == sorted(ids[:3])  # 3 * 0.5/0.5 = 3 from history
    assert requests[0].dataset_hash != requests[1].dataset_hash
    assert core.counts["kept"] == 6


def test_unknown_op_is_a_processing_error() -> None:
    import pytest

    from kz_common.core import ProcessingError

    with pytest.raises(ProcessingError, match="nope"):
        run(CuratorCore(), [verdict(ctx=context(op="nope"))])
