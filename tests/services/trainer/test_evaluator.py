"""EvaluatorCore and promotion statistics."""

from __future__ import annotations

import pytest

from schemas import ChallengeCreated, RoundEvaluated, RoundTrained
from services.trainer.config import EvaluatorConfig, TrainerConfig
from services.trainer.evaluator import EvaluatorCore
from services.trainer.heldout import eval_challenges, heldout_tasks
from services.trainer.stats import Counts, decide, z_score
from tests.services.trainer.events import env, eval_outcomes

TCFG = TrainerConfig(base_model="x", eval_shape_source="cpu", eval_ops_per_type=1)
TASKS = heldout_tasks({("softmax", "float32"), ("reduction", "float16")}, TCFG)
CFG = EvaluatorConfig(min_samples=10, min_type_samples=5)


def round_events(rnd: int, incumbent: int, cand_passes: int, inc_passes: int, n: int = 10,
                 ) -> tuple[RoundTrained, list[ChallengeCreated], list]:  # type: ignore[type-arg]
    cand = eval_challenges(TASKS, round=rnd, arm=rnd, cfg=TCFG)
    inc = eval_challenges(TASKS, round=rnd, arm=incumbent, cfg=TCFG)
    trained = RoundTrained(round=rnd, adapter_path=f"/a/{rnd}", base_model="x", dataset_hash="d", metrics={},
                           eval_challenge_ids=[c.challenge_id for c in cand + inc])
    outcomes = [o for c in cand for o in eval_outcomes(c, cand_passes, n)]
    outcomes += [o for c in inc for o in eval_outcomes(c, inc_passes, n)]
    return trained, cand + inc, outcomes


def feed(core: EvaluatorCore, payloads: list) -> list:  # type: ignore[type-arg]
    out = []
    for p in payloads:
        out += core.process(env(p))
    return out


def test_significantly_better_round_is_promoted() -> None:
    core = EvaluatorCore(CFG)
    trained, challenges, outcomes = round_events(1, 0, cand_passes=9, inc_passes=3)
    assert feed(core, [trained, *challenges, *outcomes[:-1]]) == []  # one sample still missing
    (ev,) = feed(core, outcomes[-1:])
    assert isinstance(ev, RoundEvaluated) and ev.promoted and ev.baseline_round == 0
    assert ev.eval_pass_rates == {"reduction/float16": 0.9, "softmax/float32": 0.9}
    assert ev.previous_pass_rates == {"reduction/float16": 0.3, "softmax/float32": 0.3}
    assert ev.eval_counts == {"reduction/float16": 10, "softmax/float32": 10}
    assert core.incumbent == 1


def test_no_significant_gain_is_rejected_and_next_round_compares_with_incumbent() -> None:
    core = EvaluatorCore(CFG)
    trained, challenges, outcomes = round_events(1, 0, cand_passes=5, inc_passes=4)
    (ev,) = feed(core, [*challenges, *outcomes, trained])  # arrival order across topics is free
    assert not ev.promoted and "z=" in ev.reason
    trained2, ch2, out2 = round_events(2, 0, cand_passes=10, inc_passes=4)
    (ev2,) = feed(core, [trained2, *ch2, *out2])
    assert ev2.promoted and ev2.baseline_round == 0


def test_extraction_failures_count_as_failures() -> None:
    core = EvaluatorCore(CFG)
    cand = eval_challenges(TASKS, round=1, arm=1, cfg=TCFG)
    trained = RoundTrained(round=1, adapter_path="/a", base_model="x", dataset_hash="d", metrics={},
                           eval_challenge_ids=[c.challenge_id for c in cand])
    outcomes = [o for c in cand for o in eval_outcomes(c, 10, 10, failed_extractions=4)]
    (ev,) = feed(core, [trained, *cand, *outcomes])
    assert ev.eval_pass_rates == {"reduction/float16": 0.6, "softmax/float32": 0.6}


def test_timeout_decides_with_partial_data() -> None:
    core = EvaluatorCore(EvaluatorConfig(min_samples=10, timeout_s=60))
    trained, challenges, outcomes = round_events(1, 0, cand_passes=10, inc_passes=0)
    assert feed(core, [trained, *challenges, *outcomes[:30]]) == []
    (ev,) = core.process(env(outcomes[30], later_s=61))
    assert "timed out" in ev.reason


def test_promoted_round_older_than_incumbent_is_superseded() -> None:
    core = EvaluatorCore(CFG)
    core.process(env(RoundEvaluated(round=5, adapter_path="a", eval_pass_rates={}, previous_pass_rates={},
                                    promoted=True, reason="r")))
    trained, challenges, outcomes = round_events(4, 5, cand_passes=10, inc_passes=0)
    (ev,) = feed(core, [trained, *challenges, *outcomes])
    assert not ev.promoted and "superseded" in ev.reason


def counts(**rates: tuple[int, int]) -> Counts:
    c = Counts()
    for t, (k, n) in rates.items():
        for i in range(n):
            c.add(t, i < k)
    return c


def test_z_score() -> None:
    assert z_score(9, 10, 3, 10) == pytest.approx(2.7386, abs=1e-3)
    assert z_score(5, 10, 5, 10) == 0.0
    assert z_score(0, 10, 0, 10) == 0.0 and z_score(3, 0, 1, 10) == 0.0


def test_decide_rules() -> None:
    better = counts(a=(18, 20), b=(18, 20))
    worse = counts(a=(10, 20), b=(10, 20))
    assert decide(better, worse, CFG).promoted
    assert not decide(worse, better, CFG).promoted
    assert not decide(counts(a=(5, 5)), worse, CFG).promoted  # too few samples
    assert decide(better, None, CFG).promoted  # nothing to compare with: first adapter
    veto = counts(a=(20, 20), b=(2, 20))
    assert "regressed on b" in decide(veto, counts(a=(5, 20), b=(15, 20)), CFG).reason
    margin = EvaluatorConfig(rule="margin", margin=0.05, min_samples=10)
    assert decide(counts(a=(12, 20)), counts(a=(10, 20)), margin).promoted
    assert not decide(counts(a=(10, 20)), counts(a=(10, 20)), margin).promoted
