"""Promotion statistics: pass counts per task type, pooled comparison, the decision.

Decision for a candidate arm C against an incumbent arm I, over the task types
measured in both (types only one arm measured are reported, not compared):
- either arm with fewer than `min_samples` samples: not promoted;
- veto: a type with >= `min_type_samples` samples in both arms whose pass rate
  drops by more than `max_type_drop`: not promoted;
- otherwise the pooled rates pC, pI decide, by `rule`. The statistic is the
  one-sided two-proportion z = (pC - pI) / sqrt(p(1-p)(1/nC + 1/nI)), p the
  rate of both arms together; equal rates (also both 0 or both 1) give z = 0.
  - "no_regression" (the default, issue 5: promote only without a significant
    regression): promoted unless z <= -z_threshold, i.e. unless C is
    significantly worse than I (1.645: p < 0.05). Equal rates are promoted;
  - "z_test" (stricter, opt-in): promoted only on a significant gain,
    z >= z_threshold. Equal rates are rejected;
  - "margin" (opt-in): promoted when pC - pI >= margin.
With no incumbent measurement at all (nothing comparable), a candidate with
enough samples is promoted: the first adapter has nothing to beat but itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from services.trainer.config import EvaluatorConfig


@dataclass
class Counts:
    """Passes and samples per task type."""

    passed: dict[str, int] = field(default_factory=dict)
    total: dict[str, int] = field(default_factory=dict)

    def add(self, task_type: str, ok: bool) -> None:
        self.total[task_type] = self.total.get(task_type, 0) + 1
        self.passed[task_type] = self.passed.get(task_type, 0) + int(ok)

    def rates(self) -> dict[str, float]:
        return {t: self.passed[t] / n for t, n in sorted(self.total.items()) if n}

    def pooled(self, types: set[str]) -> tuple[int, int]:
        return sum(self.passed.get(t, 0) for t in types), sum(self.total.get(t, 0) for t in types)


@dataclass(frozen=True)
class Decision:
    promoted: bool
    reason: str


def z_score(k1: int, n1: int, k0: int, n0: int) -> float:
    """One-sided two-proportion z of rate k1/n1 over k0/n0 (0 when undefined)."""
    if n1 == 0 or n0 == 0:
        return 0.0
    p = (k1 + k0) / (n1 + n0)
    var = p * (1 - p) * (1 / n1 + 1 / n0)
    return 0.0 if var == 0 else (k1 / n1 - k0 / n0) / math.sqrt(var)


def decide(candidate: Counts, incumbent: Counts | None, cfg: EvaluatorConfig) -> Decision:
    """Promote the candidate over the incumbent? See the module docstring."""
    n_cand = sum(candidate.total.values())
    if n_cand < cfg.min_samples:
        return Decision(False, f"too few eval samples: {n_cand} < {cfg.min_samples}")
    common = set(candidate.total) & set(incumbent.total) if incumbent else set()
    if not common:
        return Decision(True, f"no comparable incumbent measurement; {n_cand} samples")
    assert incumbent is not None
    k1, n1 = candidate.pooled(common)
    k0, n0 = incumbent.pooled(common)
    if min(n1, n0) < cfg.min_samples:
        return Decision(False, f"too few comparable samples: {n1} vs {n0} < {cfg.min_samples}")
    veto = _regressions(candidate, incumbent, common, cfg)
    if veto:
        return Decision(False, f"regressed on {', '.join(veto)}")
    p1, p0 = k1 / n1, k0 / n0
    summary = f"pass rate {p1:.3f} ({k1}/{n1}) vs {p0:.3f} ({k0}/{n0})"
    if cfg.rule == "margin":
        ok = p1 - p0 >= cfg.margin
        return Decision(ok, f"{summary}; margin {p1 - p0:+.3f} {'>=' if ok else '<'} {cfg.margin}")
    z = z_score(k1, n1, k0, n0)
    if cfg.rule == "z_test":
        ok = z >= cfg.z_threshold
        verdict = "significant gain" if ok else "no significant gain"
        return Decision(ok, f"{summary}; {verdict}: z={z:.2f} {'>=' if ok else '<'} {cfg.z_threshold:g}")
    ok = z > -cfg.z_threshold
    verdict = "no significant regression" if ok else "significant regression"
    return Decision(ok, f"{summary}; {verdict}: z={z:.2f} {'>' if ok else '<='} {-cfg.z_threshold:g}")


def _regressions(cand: Counts, inc: Counts, types: set[str], cfg: EvaluatorConfig) -> list[str]:
    out = []
    for t in sorted(types):
        if min(cand.total[t], inc.total[t]) < cfg.min_type_samples:
            continue
        drop = inc.passed[t] / inc.total[t] - cand.passed[t] / cand.total[t]
        if drop > cfg.max_type_drop:
            out.append(f"{t} (-{drop:.2f})")
    return out
