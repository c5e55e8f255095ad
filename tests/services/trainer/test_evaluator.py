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
CFG = EvaluatorConfig(min_samples=10, min_type_samples=5)  # the default rule: no_regression
Z_TEST = EvaluatorConfig(rule="z_test", min_samples=10, min_type_samples=5)


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


def test_default_rule_promotes_equal_rates() -> None:
    """Issue 5: promote unless significantly worse; 0 vs 0 (a model that never passes) is no regression."""
    assert EvaluatorConfig().rule == "no_regression"
    core = EvaluatorCore(CFG)
    trained, challenges, outcomes = round_events(1, 0, cand_passes=0, inc_passes=0)
    (ev,) = feed(core, [trained, *challenges, *outcomes])
    assert ev.promoted and ev.baseline_round == 0, ev.reason
    assert "no significant regression: z=0.00 > -1.645" in ev.reason
    assert core.incumbent == 1


def test_significantly_worse_round_is_rejected_and_incumbent_stays() -> None:
    core = EvaluatorCore(EvaluatorConfig(min_samples=10, min_type_samples=5, max_type_drop=1.0))  # no veto
    trained, challenges, outcomes = round_events(1, 0, cand_passes=3, inc_passes=7)  # 6/20 vs 14/20
    (ev,) = feed(core, [*challenges, *outcomes, trained])  # arrival order across topics is free
    assert not ev.promoted and "; significant regression: z=-2.53 <= -1.645" in ev.reason
    assert core.incumbent == 0


def test_z_test_rule_rejects_no_gain_and_next_round_compares_with_incumbent() -> None:
    core = EvaluatorCore(Z_TEST)
    trained, challenges, outcomes = round_events(1, 0, cand_passes=5, inc_passes=4)
    (ev,) = feed(core, [*challenges, *outcomes, trained])
    assert not ev.promoted and "no significant gain: z=" in ev.reason
    assert core.incumbent == 0
    trained2, ch2, out2 = round_events(2, 0, cand_passes=10, inc_passes=4)
    (ev2,) = feed(core, [trained2, *ch2, *out2])
    assert ev2.promoted and ev2.baseline_round == 0 and "; significant gain: z=" in ev2.reason
    assert core.incumbent == 2


def candidate_arm_only(passes: int, **outcomes: int) -> list:  # type: ignore[type-arg]
    """Round 1's events with its candidate arm alone: 10 samples a challenge."""
    cand = eval_challenges(TASKS, round=1, arm=1, cfg=TCFG)
    trained = RoundTrained(round=1, adapter_path="/a", base_model="x", dataset_hash="d", metrics={},
                           eval_challenge_ids=[c.challenge_id for c in cand])
    return [trained, *cand, *(o for c in cand for o in eval_outcomes(c, passes, 10, **outcomes))]


def test_extraction_failures_count_as_failures() -> None:
    (ev,) = feed(EvaluatorCore(CFG), candidate_arm_only(10, failed_extractions=4))
    assert ev.eval_pass_rates == {"reduction/float16": 0.6, "softmax/float32": 0.6}


def test_verdicts_that_judged_nothing_complete_a_sample_but_count_neither_way() -> None:
    # decided: every sample has its verdict
    (ev,) = feed(EvaluatorCore(CFG), candidate_arm_only(6, unjudged=4))
    assert ev.eval_pass_rates == {"reduction/float16": 1.0, "softmax/float32": 1.0}
    assert ev.eval_counts == {"reduction/float16": 6, "softmax/float32": 6}


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


def test_no_regression_promotes_equal_or_insignificantly_lower_rates() -> None:
    for k in (0, 10, 20):  # equal rates, at 0, in the middle and at 1: z = 0
        d = decide(counts(a=(k, 20)), counts(a=(k, 20)), CFG)
        assert d.promoted and "no significant regression: z=0.00 > -1.645" in d.reason, d.reason
    d = decide(counts(a=(9, 20)), counts(a=(10, 20)), CFG)  # a little lower, not significantly
    assert d.promoted and "no significant regression: z=-0.32 > -1.645" in d.reason, d.reason
    assert decide(counts(a=(18, 20), b=(18, 20)), counts(a=(10, 20), b=(10, 20)), CFG).promoted


def test_no_regression_rejects_a_significantly_worse_candidate() -> None:
    # every type drops by 0.2 (under max_type_drop 0.25: no veto), pooled 60/100 vs 80/100
    worse, inc = counts(a=(30, 50), b=(30, 50)), counts(a=(40, 50), b=(40, 50))
    d = decide(worse, inc, CFG)
    assert not d.promoted and "; significant regression: z=-3.09 <= -1.645" in d.reason, d.reason
    assert "pass rate 0.600 (60/100) vs 0.800 (80/100)" in d.reason
    # z exactly at -z_threshold is a significant regression; just inside it is not
    z = z_score(60, 100, 80, 100)
    assert not decide(worse, inc, EvaluatorConfig(min_samples=10, z_threshold=-z)).promoted
    assert decide(worse, inc, EvaluatorConfig(min_samples=10, z_threshold=-z + 1e-9)).promoted


def test_a_type_level_drop_vetoes_even_a_pooled_gain() -> None:
    cand, inc = counts(a=(20, 20), b=(2, 20)), counts(a=(5, 20), b=(15, 20))  # pooled 22/40 vs 20/40
    for cfg in (CFG, Z_TEST, EvaluatorConfig(rule="margin", margin=0.0, min_samples=10, min_type_samples=5)):
        d = decide(cand, inc, cfg)
        assert not d.promoted and d.reason.startswith("regressed on b (-0.65)"), (cfg.rule, d.reason)
    # a type with fewer than min_type_samples in an arm is not a veto: then the pooled rule decides
    small = EvaluatorConfig(min_samples=10, min_type_samples=21)
    assert decide(cand, inc, small).promoted


def test_min_sample_guards_hold_under_no_regression() -> None:
    d = decide(counts(a=(5, 5)), counts(a=(5, 5)), CFG)  # equal rates, but too few samples
    assert not d.promoted and "too few eval samples: 5 < 10" in d.reason
    d = decide(counts(a=(0, 20), b=(2, 2)), counts(b=(2, 2)), CFG)  # only b comparable, 2 samples each
    assert not d.promoted and "too few comparable samples: 2 vs 2 < 10" in d.reason
    assert decide(counts(a=(0, 20)), None, CFG).promoted  # nothing to compare with: first adapter
    assert decide(counts(a=(0, 20)), counts(b=(20, 20)), CFG).promoted  # no common type


def test_z_test_still_requires_a_significant_gain() -> None:
    for k in (0, 10, 20):
        d = decide(counts(a=(k, 20)), counts(a=(k, 20)), Z_TEST)
        assert not d.promoted and "no significant gain: z=0.00 < 1.645" in d.reason, d.reason
    assert not decide(counts(a=(12, 20)), counts(a=(10, 20)), Z_TEST).promoted  # z = 0.64
    d = decide(counts(a=(18, 20), b=(18, 20)), counts(a=(10, 20), b=(10, 20)), Z_TEST)
    assert d.promoted and "; significant gain: z=3.90 >= 1.645" in d.reason, d.reason
    assert decide(counts(a=(0, 20)), None, Z_TEST).promoted  # the first adapter still has nothing to beat


def test_margin_rule() -> None:
    margin = EvaluatorConfig(rule="margin", margin=0.05, min_samples=10)
    assert decide(counts(a=(12, 20)), counts(a=(10, 20)), margin).promoted
    assert not decide(counts(a=(10, 20)), counts(a=(10, 20)), margin).promoted


def test_rule_is_validated() -> None:
    with pytest.raises(ValueError):
        EvaluatorConfig(rule="gain")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        EvaluatorConfig(z_threshold=0)
