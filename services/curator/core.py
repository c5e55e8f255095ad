"""CuratorCore: verified solutions -> SampleCurated decisions, preference pairs, training requests.

Verdicts carry their challenge (ChallengeContext) and code, so the curator needs
no joins. Per train verdict:
- eval challenges (purpose="eval") are ignored: they measure a round, never train
  one; their task signatures are remembered, and a train verdict for exactly the
  same task is dropped (`eval_contamination`) so the held-out set stays held out;
- failed, unmeasured (with require_perf) or code-less verdicts and rule hits are
  decided at once (kept=False, with reason and rule hits);
- clean passing verdicts wait in the window. The window closes after
  `window_verdicts` verdicts or when a verdict of a newer round arrives; then
  selection.py decides each of them and pairs are recorded.
Kept samples join the pool; once `train_threshold` new ones have been kept since
the last request, a TrainingRequested mixes the waiting ones with replayed history
(mixing.py).

Re-verification (supersede.py): a newer verdict of a sample (same challenge id and
sample index, same or newer verifier version) supersedes the current one before it
is admitted. The earlier verdict leaves the window (decided `superseded_by:<new id>`
if it was still waiting), and if it was kept it is revoked: out of the near-dup
index, the per-challenge answers and both pools, and retracted downstream by a
kept=False decision with reason `superseded_by:<new id>`. So the new verdict is
never compared with its own sample, and a re-verified cheat that now fails is gone
from every later training request. A superseded verdict that is the chosen or the
rejected side of a recorded preference pair is retracted the same way, kept or not
(a rejected one was decided kept=False before its pair, so only the retraction tells
consumers the pair no longer stands): the export drops pairs with a retracted side,
and PreferenceRecorded needs no retraction event of its own. A re-verified sample that is kept again takes its
predecessor's place in the pools and is not counted as new data. A verdict of an
older version than the current one is decided `superseded_by:<current id>` and
changes nothing.

Why requests are triggered by a count of newly kept samples rather than the size of
the new pool: after a restart the runner rebuilds this state partition by partition,
so a sample's v1 and v2 verdicts replay back to back while live a training request
fell between them. A revocation then shrinks the new pool instead of the history;
counting kept decisions (revocations do not uncount) keeps the round numbers and the
pools the same as live.
State is in memory and rebuilt by replaying the verified topic.
"""

from __future__ import annotations

import math
from dataclasses import replace

from pydantic import BaseModel

from kz_common.core import ProcessingError
from kz_common.ops import CatalogueError, get_op, shape_bucket
from schemas import (
    AnyEnvelope,
    ChallengeContext,
    PreferenceRecorded,
    RuleHit,
    SampleCurated,
    SolutionVerified,
    TrainingRequested,
)
from services.curator.config import CuratorConfig
from services.curator.mixing import PoolItem, dataset_hash, replay_count, sample_replay
from services.curator.neardup import NearDupIndex, code_minhash
from services.curator.patterns import run_patterns
from services.curator.scoring import score
from services.curator.selection import (
    Candidate,
    Pair,
    best_per_challenge,
    keep_count,
    remove_near_dups,
    select_diverse,
)
from services.curator.signature import shape_lsh_keys, task_signature
from services.curator.supersede import Arrival, Current, Ledger, sample_key


class CuratorCore:
    """The curator service's pure core (state: the open window and the kept pool)."""

    name = "curator"
    version = "1"
    inputs: tuple[str, ...] = ("verified",)

    def __init__(self, config: CuratorConfig | None = None) -> None:
        self.cfg = config or CuratorConfig()
        self.window: list[Candidate] = []
        self.window_verdicts = 0
        self.window_round: int | None = None
        self.index = NearDupIndex(threshold=self.cfg.dup_threshold, num_perm=self.cfg.minhash_perm)
        self.answers: dict[str, tuple[str, float]] = {}  # challenge id -> (sample id, score) of its answer
        self.kept: dict[str, Candidate] = {}  # kept samples, by sample id: what a retraction describes
        # Unkept samples on either side of a recorded pair: what their retraction describes.
        self.paired: dict[str, Candidate] = {}
        # Pools keyed by sample id (insertion-ordered) so a revoked sample leaves in O(1).
        self.new_pool: dict[str, PoolItem] = {}
        self.history: dict[str, PoolItem] = {}
        self.ledger = Ledger()
        self.fresh_kept = 0  # first-time kept samples since the last training request
        self.last_round = 0
        self.eval_signatures: set[str] = set()
        self.counts: dict[str, int] = {}  # funnel: decision reason -> samples

    # ------------------------------------------------------------------ entry

    def process(self, event: AnyEnvelope) -> list[BaseModel]:
        if event.type != "solution.verified":
            return []
        verdict: SolutionVerified = event.payload
        ctx = verdict.context
        if ctx.purpose == "eval":
            self.eval_signatures.add(task_signature(ctx))
            return []
        bucket = self._bucket(verdict)  # may raise: before any state changes
        arrival, current = self.ledger.classify(event.event_id, verdict)
        if arrival is Arrival.SAME:  # redelivered: its decision is out already
            return []
        if arrival is Arrival.STALE:
            assert current is not None
            return [self._decision(event.event_id, verdict, bucket, kept=False,
                                   reason=f"superseded_by:{current.sample_id}")]
        out: list[BaseModel] = []
        pool = None
        if current is not None:
            out += self._supersede(current, event.event_id)
            pool = current.pool
        self.ledger.make_current(event.event_id, verdict, pool=pool)
        if self.window and self.window_round is not None and ctx.round > self.window_round:
            out += self.close_window()
        self.window_round = ctx.round if self.window_round is None else max(self.window_round, ctx.round)
        out += self._admit(event.event_id, verdict, bucket)
        self.window_verdicts += 1
        if self.window_verdicts >= self.cfg.window_verdicts:
            out += self.close_window()
        return out

    # ------------------------------------------------------------------ admission

    @staticmethod
    def _bucket(v: SolutionVerified) -> str:
        try:
            get_op(v.context.op)
            return shape_bucket(v.context.shape_range, v.context.op)
        except CatalogueError as exc:  # a verdict for an op we cannot bucket is a pipeline bug
            raise ProcessingError(f"cannot curate {v.challenge_id}: {exc}") from exc

    def _admit(self, sample_id: str, v: SolutionVerified, bucket: str) -> list[BaseModel]:
        ctx = v.context
        if v.code is None:
            return [self._decision(sample_id, v, bucket, kept=False, reason="no_code")]
        cand = Candidate(sample_id, v, v.code, bucket, shape_lsh_keys(
            ctx, cell=self.cfg.shape_cell_log2, grids=self.cfg.shape_grids), group=(ctx.family, bucket))
        if task_signature(ctx) in self.eval_signatures:
            return [self._decision(sample_id, v, bucket, kept=False, reason="eval_contamination")]
        if not v.passed:
            return self._hold_loser(cand, f"failed:{v.stage}", [])
        if self.cfg.require_perf and not v.perf_measured:
            return [self._decision(sample_id, v, bucket, kept=False, reason="no_perf")]
        hits = run_patterns(v.code, ctx.shape_range, variant_similarity=self.cfg.variant_similarity)
        if hits:
            names = ",".join(sorted({h.rule for h in hits}))
            return self._hold_loser(cand, f"rule:{names}", hits)
        cand.score = score(v, ctx, v.code, self.cfg)
        cand.minhash = code_minhash(v.code, num_perm=self.cfg.minhash_perm, shingle_len=self.cfg.shingle_len)
        self.window.append(cand)
        return []

    def _hold_loser(self, cand: Candidate, reason: str, hits: list[RuleHit]) -> list[BaseModel]:
        """Decide a loser now; keep its code in the window as a preference-pair 'rejected'."""
        cand.loss_reason = reason
        if self.cfg.pairs_with_failed:
            self.window.append(cand)
        return [self._decision(cand.sample_id, cand.verdict, cand.shape_bucket, kept=False,
                               reason=reason, hits=hits)]

    # ------------------------------------------------------------------ re-verification

    def _supersede(self, current: Current, new_id: str) -> list[BaseModel]:
        """Void the current verdict of a sample whose newer verdict `new_id` just arrived."""
        old_id, reason = current.sample_id, f"superseded_by:{new_id}"
        out: list[BaseModel] = []
        waiting = [c for c in self.window if c.sample_id == old_id]
        self.window = [c for c in self.window if c.sample_id != old_id]
        # Losers held for pairs are decided already; only an undecided candidate needs a decision.
        out += [self._candidate_decision(c, reason) for c in waiting if c.eligible]
        kept = self.kept.pop(old_id, None)
        paired = self.paired.pop(old_id, None)
        if kept is None and paired is not None:
            out.append(self._candidate_decision(paired, reason))  # its pairs no longer stand
        if kept is not None:
            self.index.remove(old_id)
            cid = kept.verdict.challenge_id
            if self.answers.get(cid, ("", 0.0))[0] == old_id:
                del self.answers[cid]  # the challenge has no answer until a verdict earns one again
            if self.new_pool.pop(old_id, None) is not None:
                current.pool = "new"
            elif self.history.pop(old_id, None) is not None:
                current.pool = "history"
            out.append(self._candidate_decision(kept, reason))  # the retraction
        return out

    # ------------------------------------------------------------------ window close

    def close_window(self) -> list[BaseModel]:
        """Decide every waiting candidate, record pairs, maybe request training."""
        window, self.window, self.window_verdicts = self.window, [], 0
        answers, losers, pairs = best_per_challenge(
            window, with_failed=self.cfg.pairs_with_failed, max_pairs=self.cfg.max_pairs_per_challenge)
        out: list[BaseModel] = [self._candidate_decision(c, "not_best_for_challenge") for c in losers]
        fresh = []
        for c in answers:
            prior = self.answers.get(c.verdict.challenge_id)
            if prior is not None and prior[1] >= (c.score or -math.inf):
                out.append(self._candidate_decision(c, "not_best_for_challenge"))
            else:
                fresh.append(c)
        unique, dups = remove_near_dups(
            fresh, self.index, threshold=self.cfg.dup_threshold, num_perm=self.cfg.minhash_perm)
        out += [self._candidate_decision(c, f"duplicate_of:{orig}") for c, orig in dups]
        kept, dropped = select_diverse(
            unique, keep_count(len(unique), self.cfg.keep_fraction, self.cfg.min_keep_per_window))
        out += [self._candidate_decision(c, "below_top_fraction") for c in dropped]
        for c in kept:
            out.append(self._candidate_decision(c, "kept", kept=True))
            self._remember(c)
        out += [self._pair(p) for p in pairs]
        for p in pairs:  # after _remember: a kept side is retracted through self.kept
            for c in (p.chosen, p.rejected):
                if c.sample_id not in self.kept:
                    self.paired[c.sample_id] = replace(c, minhash=None)  # only its decision fields are needed
        if self.fresh_kept >= self.cfg.train_threshold:
            out += self._training_request()
        return out

    def _remember(self, c: Candidate) -> None:
        assert c.minhash is not None and c.score is not None
        self.index.add(c.sample_id, c.minhash, c.task_keys)
        self.answers[c.verdict.challenge_id] = (c.sample_id, c.score)
        self.kept[c.sample_id] = c
        cur = self.ledger.get(sample_key(c.verdict))
        place = cur.pool if cur is not None and cur.sample_id == c.sample_id else None
        if place is None:
            self.fresh_kept += 1
        pool = self.history if place == "history" else self.new_pool
        pool[c.sample_id] = PoolItem(c.sample_id, c.verdict.context.family, c.shape_bucket,
                                     c.verdict.code_hash or "")

    def _training_request(self) -> list[TrainingRequested]:
        self.fresh_kept = 0
        new, self.new_pool = list(self.new_pool.values()), {}
        # Revocations may have emptied the new pool; replay the usual share for the kept count.
        n_replay = replay_count(len(new) or self.cfg.train_threshold, self.cfg.new_fraction)
        replay = sample_replay(list(self.history.values()), n_replay,
                               seed=self.cfg.mix_seed * 1_000_003 + self.last_round + 1)
        if not new and not replay:
            return []  # every sample it was for has been revoked: nothing to train on
        self.last_round += 1
        self.history.update((i.sample_id, i) for i in new)
        return [TrainingRequested(
            round=self.last_round,
            new_sample_ids=[i.sample_id for i in new],
            replay_sample_ids=[i.sample_id for i in replay],
            dataset_hash=dataset_hash(new + replay),
        )]

    # ------------------------------------------------------------------ payloads

    def _candidate_decision(self, c: Candidate, reason: str, *, kept: bool = False) -> SampleCurated:
        return self._decision(c.sample_id, c.verdict, c.shape_bucket, kept=kept, reason=reason, score_=c.score)

    def _decision(
        self, sample_id: str, v: SolutionVerified, bucket: str, *, kept: bool, reason: str,
        hits: list[RuleHit] | None = None, score_: float | None = None,
    ) -> SampleCurated:
        key = reason.split(":")[0]
        self.counts[key] = self.counts.get(key, 0) + 1
        ctx: ChallengeContext = v.context
        return SampleCurated(
            challenge_id=v.challenge_id, verdict_event_id=sample_id, verifier_version=v.verifier_version,
            kept=kept, op=ctx.op, family=ctx.family, dtype=ctx.dtype, shape_bucket=bucket, code=v.code,
            code_hash=v.code_hash, score=score_, rule_hits=hits or [], reason=reason, context=ctx,
            sample_index=v.sample_index,
        )

    @staticmethod
    def _pair(p: Pair) -> PreferenceRecorded:
        assert p.chosen.score is not None
        return PreferenceRecorded(
            challenge_id=p.chosen.verdict.challenge_id, context=p.chosen.verdict.context,
            chosen_sample_id=p.chosen.sample_id, rejected_sample_id=p.rejected.sample_id,
            chosen_code=p.chosen.code, rejected_code=p.rejected.code, chosen_score=p.chosen.score,
            rejected_score=p.rejected.score, reason=p.reason,
        )
