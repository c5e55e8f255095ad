"""Curriculum arithmetic: dead band, minimum evidence, stale verdicts, hysteresis on bounces."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.challenger.config import CurriculumConfig
from services.challenger.curriculum import Curriculum

CFG = CurriculumConfig(low=0.3, high=0.6, window=10, min_verdicts=5, bounce_factor=2.0, max_difficulty=3)


def feed(c: Curriculum, family: str, difficulty: int, outcomes: str):
    """Record 'P'/'F' verdicts; the decisions made along the way."""
    return [d for ch in outcomes if (d := c.record(family, difficulty, ch == "P")) is not None]


def test_no_decision_before_min_verdicts_or_inside_the_band() -> None:
    c = Curriculum(CFG)
    assert feed(c, "softmax", 0, "PPPP") == []  # 4 < min_verdicts
    c2 = Curriculum(CFG)
    assert feed(c2, "softmax", 0, "PFPFPFPFPF") == []  # 0.5 is inside [0.3, 0.6]
    assert c2.pass_rate("softmax") == 0.5 and c2.difficulty("softmax") == 0


def test_high_pass_rate_moves_up_and_restarts_the_window() -> None:
    c = Curriculum(CFG)
    [d] = feed(c, "softmax", 0, "PPPPP")
    assert (d.old_difficulty, d.new_difficulty, d.pass_rate, d.window) == (0, 1, 1.0, 5)
    assert "harder" in d.reason and c.pass_rate("softmax") is None
    assert c.difficulty("softmax") == 1


def test_low_pass_rate_moves_down_but_not_below_zero() -> None:
    c = Curriculum(CFG)
    assert feed(c, "matmul", 0, "FFFFFFFFFF") == []  # already at the bottom rung
    [d] = feed(c, "attention", 2, "FFFFF")
    assert (d.old_difficulty, d.new_difficulty, d.pass_rate) == (2, 1, 0.0) and "easier" in d.reason


def test_top_rung_is_a_ceiling() -> None:
    c = Curriculum(CFG)
    assert feed(c, "add", 3, "PPPPPPPPPP") == []


def test_stale_verdicts_from_the_old_rung_are_ignored() -> None:
    c = Curriculum(CFG)
    feed(c, "softmax", 0, "PPPPP")  # -> rung 1
    assert feed(c, "softmax", 0, "FFFFFFFFFF") == []  # late verdicts of rung-0 challenges
    assert c.difficulty("softmax") == 1 and c.pass_rate("softmax") is None


def test_bouncing_back_up_needs_more_evidence_each_time() -> None:
    c = Curriculum(CFG)
    feed(c, "softmax", 0, "PPPPP")  # 0 -> 1
    [down] = feed(c, "softmax", 1, "FFFFF")  # 1 -> 0: one fall from rung 1
    assert down.new_difficulty == 0
    assert feed(c, "softmax", 0, "PPPPPPPPP") == []  # 9 < 5 * 2 = 10
    [up] = feed(c, "softmax", 0, "P")
    assert (up.new_difficulty, up.window) == (1, 10)
    feed(c, "softmax", 1, "FFFFF")  # second fall: 5 * 4 = 20, capped at the window (10)
    state = c.families["softmax"]
    assert state.falls == {1: 2} and c.required(state, 1) == 10


def test_rolling_window_forgets_old_verdicts() -> None:
    c = Curriculum(CurriculumConfig(window=6, min_verdicts=6))
    assert feed(c, "add", 1, "FFF") == []
    # 3 fails then passes: the window slides, the rate climbs past 0.6 once fails drop out
    decisions = feed(c, "add", 1, "PPPPP")
    assert [d.new_difficulty for d in decisions] == [2]
    assert decisions[0].pass_rate == pytest.approx(4 / 6)


def test_config_is_validated() -> None:
    with pytest.raises(ValidationError, match="low < high"):
        CurriculumConfig(low=0.7, high=0.6)
    with pytest.raises(ValidationError, match="exceeds window"):
        CurriculumConfig(window=5, min_verdicts=6)
