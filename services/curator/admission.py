"""Admission: how the curator judges a train verdict when it arrives.

A verdict is decided at once (no code, eval contamination, failed, unmeasured,
rule hits) or waits in the window as a scored candidate. Losers decided at once
stay in the window too, as the 'rejected' side of preference pairs, when
`pairs_with_failed` is set. Pure: config and the eval signatures seen so far in,
candidate and decision out; the core owns the state.
"""

from __future__ import annotations

from dataclasses import replace

from datasketch import MinHash

from kz_common.core import ProcessingError
from kz_common.ops import CatalogueError, get_op, shape_bucket
from schemas import ChallengeContext, RuleHit, SampleCurated, SolutionVerified
from services.curator.config import CuratorConfig
from services.curator.decisions import decision, describe
from services.curator.neardup import code_minhash
from services.curator.patterns import run_patterns
from services.curator.scoring import score
from services.curator.selection import Candidate
from services.curator.signature import shape_lsh_keys, task_signature

Assessment = tuple[Candidate | None, SampleCurated | None]  # (what the window holds, the decision now)


def bucket_of(v: SolutionVerified) -> str:
    try:
        get_op(v.context.op)
        return shape_bucket(v.context.shape_range, v.context.op)
    except CatalogueError as exc:  # a verdict for an op we cannot bucket is a pipeline bug
        raise ProcessingError(f"cannot curate {v.challenge_id}: {exc}") from exc


class Assessor:
    def __init__(self, cfg: CuratorConfig) -> None:
        self.cfg = cfg

    def task_keys(self, ctx: ChallengeContext) -> frozenset[str]:
        return shape_lsh_keys(ctx, cell=self.cfg.shape_cell_log2, grids=self.cfg.shape_grids)

    def minhash(self, code: str) -> MinHash:
        return code_minhash(code, num_perm=self.cfg.minhash_perm, shingle_len=self.cfg.shingle_len)

    def candidate(self, sample_id: str, v: SolutionVerified, code: str, bucket: str) -> Candidate:
        return Candidate(sample_id, v, code, bucket, self.task_keys(v.context), group=(v.context.family, bucket))

    def assess(self, sample_id: str, v: SolutionVerified, bucket: str, eval_signatures: set[str]) -> Assessment:
        ctx = v.context
        if v.code is None:
            return None, decision(sample_id, v, bucket, kept=False, reason="no_code")
        cand = self.candidate(sample_id, v, v.code, bucket)
        if task_signature(ctx) in eval_signatures:
            return None, decision(sample_id, v, bucket, kept=False, reason="eval_contamination")
        if not v.passed:
            return self._loser(cand, f"failed:{v.stage}", [])
        if self.cfg.require_perf and not v.perf_measured:
            return None, decision(sample_id, v, bucket, kept=False, reason="no_perf")
        if (v.timing.holdout_ratio or 0.0) > self.cfg.max_holdout_ratio:
            return None, decision(sample_id, v, bucket, kept=False, reason="unconfirmed_timing")
        hits = run_patterns(v.code, ctx.shape_range, variant_similarity=self.cfg.variant_similarity)
        if hits:
            names = ",".join(sorted({h.rule for h in hits}))
            return self._loser(cand, f"rule:{names}", hits)
        cand.score = score(v, ctx, v.code, self.cfg)
        cand.minhash = self.minhash(v.code)
        return cand, None

    def _loser(self, cand: Candidate, reason: str, hits: list[RuleHit]) -> Assessment:
        """Decide a loser now; keep its code in the window as a preference-pair 'rejected'."""
        cand.loss_reason = reason
        return (cand if self.cfg.pairs_with_failed else None), describe(cand, reason, hits=hits)

    def held_loser(self, sample_id: str, v: SolutionVerified, bucket: str, reason: str) -> Candidate | None:
        """What the window holds of a loser decided with `reason` (read back from the log, so the
        rules need not run again), if it holds anything."""
        if not self.cfg.pairs_with_failed or v.code is None:
            return None
        return replace(self.candidate(sample_id, v, v.code, bucket), loss_reason=reason)
