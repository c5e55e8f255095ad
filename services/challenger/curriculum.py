"""Curriculum arithmetic: rolling pass rates per family and rung, and when to move rungs.

Anti-flap rules, on top of the [low, high] dead band itself:
- only verdicts of challenges drawn at the family's current rung count, and the
  window restarts empty at every change (fresh evidence, no stale verdicts);
- a decision needs `min_verdicts` verdicts in that window;
- moving back up into a rung the family fell back from needs `bounce_factor`
  times more evidence per earlier fall (capped at the window size).
Pure: no I/O, no clock; the same verdict sequence always gives the same decisions.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from services.challenger.config import CurriculumConfig


@dataclass(frozen=True)
class Decision:
    family: str
    old_difficulty: int
    new_difficulty: int
    pass_rate: float
    window: int
    reason: str


@dataclass
class FamilyState:
    difficulty: int
    window: deque[bool]
    falls: dict[int, int] = field(default_factory=dict)  # rung -> times the family fell back from it


class Curriculum:
    def __init__(self, config: CurriculumConfig | None = None) -> None:
        self.config = config or CurriculumConfig()
        self.families: dict[str, FamilyState] = {}

    def difficulty(self, family: str) -> int | None:
        state = self.families.get(family)
        return state.difficulty if state else None

    def pass_rate(self, family: str) -> float | None:
        """Pass rate over the current window of `family`, None before any verdict."""
        state = self.families.get(family)
        if not state or not state.window:
            return None
        return sum(state.window) / len(state.window)

    def record(self, family: str, difficulty: int, passed: bool) -> Decision | None:
        """Add one train verdict of a challenge drawn at `difficulty`; a Decision when the rung moves."""
        state = self.families.get(family)
        if state is None:  # first sight: trust the rung the challenger is drawing at
            state = FamilyState(difficulty, deque(maxlen=self.config.window))
            self.families[family] = state
        if difficulty != state.difficulty:
            return None  # drawn before the last change: not evidence about the current rung
        state.window.append(passed)
        return self._decide(family, state)

    def required(self, state: FamilyState, target: int) -> int:
        """Verdicts needed before moving `state` to rung `target`."""
        c = self.config
        need = c.min_verdicts * c.bounce_factor ** state.falls.get(target, 0)
        return min(c.window, round(need))

    def _decide(self, family: str, state: FamilyState) -> Decision | None:
        c = self.config
        n = len(state.window)
        rate = sum(state.window) / n
        d = state.difficulty
        if rate > c.high and d < c.max_difficulty:
            target, why = d + 1, f"pass rate {rate:.2f} > {c.high:.2f}: harder"
        elif rate < c.low and d > 0:
            target, why = d - 1, f"pass rate {rate:.2f} < {c.low:.2f}: easier"
        else:
            return None
        need = self.required(state, target)
        if n < need:
            return None
        if target < d:
            state.falls[d] = state.falls.get(d, 0) + 1
        state.difficulty = target
        state.window.clear()
        return Decision(family, d, target, rate, n, f"{why} (over {n} verdicts at rung {d})")
