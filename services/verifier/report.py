"""The verdict: VerifyReport, its JSON form and its SolutionVerified payload."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from services.verifier.options import VERIFIER_VERSION

if TYPE_CHECKING:
    from schemas.events import ChallengeContext, SolutionVerified

# Stages in pipeline order; a verdict's stage is the earliest one that failed.
STAGES = ("extraction", "static", "problem", "import", "runtime", "output", "numerics",
          "timing", "internal")


@dataclass
class Timings:
    """Median device times in ms (None where not measured) and run-to-run spread."""

    candidate_ms: float | None = None
    naive_ms: float | None = None
    optimized_ms: float | None = None
    spread: float | None = None
    # fastest holdout run (unseen inputs, timed once) / the timed median (perf.holdout_floor)
    holdout_ratio: float | None = None


@dataclass
class VerifyReport:
    """Everything the verifier concluded about one (problem, solution) pair."""

    passed: bool
    stage: str
    reasons: list[str]
    device: str
    isolation: str = "none"
    perf_measured: bool = False
    timings: Timings | None = None
    speedup_vs_naive: float | None = None
    speedup_vs_optimized: float | None = None
    roofline_fraction: float | None = None
    max_rel_error: float | None = None
    triton_launches: int | None = None
    fingerprint: dict[str, str] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    verifier_version: str = VERIFIER_VERSION

    @property
    def misuse(self) -> bool:
        """The problem, not the candidate, was unusable."""
        return self.stage == "problem"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_payload(self, challenge_id: str, code_hash: str | None, *,
                   context: ChallengeContext | None = None, sample_index: int = 0,
                   code: str | None = None) -> SolutionVerified:
        """The `solution.verified` payload of this verdict.

        The schema carries the challenge context (event-carried state), the sample index
        and the code, so those are keyword arguments; `context` is required by the schema.
        """
        from schemas.events import SolutionVerified, Timing  # lazy: pydantic only when emitting

        if context is None:
            raise ValueError("SolutionVerified needs the challenge context (schemas.events)")
        t = self.timings or Timings()
        return SolutionVerified(
            challenge_id=challenge_id, context=context, sample_index=sample_index, code=code,
            code_hash=code_hash, verifier_version=self.verifier_version,
            passed=self.passed, stage=self.stage, reasons=list(self.reasons),
            device=self.device,  # type: ignore[arg-type]
            isolation=self.isolation, perf_measured=self.perf_measured,
            timing=Timing(candidate_ms=t.candidate_ms, naive_ms=t.naive_ms,
                          optimized_ms=t.optimized_ms, spread=t.spread,
                          holdout_ratio=t.holdout_ratio),
            speedup_vs_naive=self.speedup_vs_naive, speedup_vs_optimized=self.speedup_vs_optimized,
            roofline_fraction=self.roofline_fraction, max_rel_error=_finite(self.max_rel_error),
            triton_launches=self.triton_launches,
            fingerprint={k: str(v) for k, v in self.fingerprint.items()},
        )


def _finite(x: float | None) -> float | None:
    return x if x is None or math.isfinite(x) else None


def rejected(stage: str, reasons: list[str], device: str, **kw: Any) -> VerifyReport:
    return VerifyReport(passed=False, stage=stage, reasons=reasons, device=device, **kw)


def first_stage(failures: list[tuple[str, str]]) -> str:
    """Earliest pipeline stage among (stage, reason) failures."""
    return min((s for s, _ in failures), key=STAGES.index)
