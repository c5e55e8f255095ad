"""The curator's payloads: decisions, their retractions, preference pairs.

Pure builders, shared by the live path (core.py) and the restart recovery
(recovery.py), which re-reads these same payloads from the log.
"""

from __future__ import annotations

from schemas import ChallengeContext, PreferenceRecorded, RuleHit, SampleCurated, SolutionVerified
from services.curator.selection import Candidate, Pair

SUPERSEDED = "superseded_by:"  # reason prefix of a decision voided by a newer verdict of the sample


def reason_key(reason: str) -> str:
    """'duplicate_of:<id>' -> 'duplicate_of': the funnel counts reasons without their argument."""
    return reason.split(":")[0]


def decision(
    sample_id: str, v: SolutionVerified, bucket: str, *, kept: bool, reason: str,
    hits: list[RuleHit] | None = None, score: float | None = None,
) -> SampleCurated:
    ctx: ChallengeContext = v.context
    return SampleCurated(
        challenge_id=v.challenge_id, verdict_event_id=sample_id, verifier_version=v.verifier_version,
        kept=kept, op=ctx.op, family=ctx.family, dtype=ctx.dtype, shape_bucket=bucket, code=v.code,
        code_hash=v.code_hash, score=score, rule_hits=hits or [], reason=reason, context=ctx,
        sample_index=v.sample_index,
    )


def describe(c: Candidate, reason: str, *, kept: bool = False, hits: list[RuleHit] | None = None) -> SampleCurated:
    """The decision on a window candidate."""
    return decision(c.sample_id, c.verdict, c.shape_bucket, kept=kept, reason=reason, hits=hits, score=c.score)


def retraction(earlier: SampleCurated, reason: str) -> SampleCurated:
    """A kept=False decision voiding `earlier` (a decision on the same sample).

    Built from the earlier decision rather than from the verdict so that a restarted curator,
    which knows a kept sample only from its decision on the log, retracts it in the very same
    words as the live one would.
    """
    return earlier.model_copy(update={"kept": False, "reason": reason, "rule_hits": []})


def pair(p: Pair) -> PreferenceRecorded:
    assert p.chosen.score is not None
    return PreferenceRecorded(
        challenge_id=p.chosen.verdict.challenge_id, context=p.chosen.verdict.context,
        chosen_sample_id=p.chosen.sample_id, rejected_sample_id=p.rejected.sample_id,
        chosen_code=p.chosen.code, rejected_code=p.rejected.code, chosen_score=p.chosen.score,
        rejected_score=p.rejected.score, reason=p.reason,
    )
