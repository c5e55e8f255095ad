"""CuratorCore: verified solutions -> SampleCurated decisions, preference pairs, training requests.

Verdicts carry their challenge (ChallengeContext) and code, so the curator needs
no joins. Per train verdict:
- eval challenges (purpose="eval") are ignored: they measure a round, never train
  one; their task signatures are remembered, and a train verdict for exactly the
  same task is dropped (`eval_contamination`) so the held-out set stays held out;
- failed, unmeasured (with require_perf) or code-less verdicts, verdicts whose time
  the verifier's unseen-input runs did not confirm (`unconfirmed_timing`) and rule
  hits are decided at once (kept=False, with reason and rule hits);
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

Requests are triggered by a count of newly kept samples rather than by the size of
the new pool, so a revocation (which shrinks the pool; it does not uncount) does not
postpone a round.

State is in memory. After a restart it comes back from the curator's own outputs on
the log (`observe_output`) and the replayed verdicts (`observe`); recovery.py says how
and why the inputs alone are not enough.
"""

from __future__ import annotations

import math

from datasketch import MinHash
from pydantic import BaseModel

from schemas import (
    AnyEnvelope,
    PreferenceRecorded,
    SampleCurated,
    SolutionVerified,
    TrainingRequested,
)
from services.curator.admission import Assessor, bucket_of
from services.curator.config import CuratorConfig
from services.curator.decisions import SUPERSEDED, decision, describe, pair, reason_key, retraction
from services.curator.mixing import PoolItem, dataset_hash, replay_count, sample_replay
from services.curator.neardup import NearDupIndex
from services.curator.recovery import Rebuild
from services.curator.selection import (
    Candidate,
    best_per_challenge,
    keep_count,
    remove_near_dups,
    select_diverse,
)
from services.curator.signature import task_signature
from services.curator.supersede import Arrival, Current, Ledger, Pool, SampleKey, sample_key


class CuratorCore:
    """The curator service's pure core (state: the open window and the kept pool)."""

    name = "curator"
    version = "1"
    inputs: tuple[str, ...] = ("verified",)

    def __init__(self, config: CuratorConfig | None = None) -> None:
        self.cfg = config or CuratorConfig()
        self.judge = Assessor(self.cfg)
        self.window: list[Candidate] = []
        self.window_verdicts = 0
        self.window_round: int | None = None
        self.index = NearDupIndex(threshold=self.cfg.dup_threshold, num_perm=self.cfg.minhash_perm)
        self.answers: dict[str, tuple[str, float]] = {}  # challenge id -> (sample id, score) of its answer
        # Decisions of kept samples, by sample id, and of unkept sides of recorded pairs: what their
        # retraction repeats (a restarted curator knows them from the log, not from their verdicts).
        self.kept: dict[str, SampleCurated] = {}
        self.paired: dict[str, SampleCurated] = {}
        # Pools keyed by sample id (insertion-ordered) so a revoked sample leaves in O(1).
        self.new_pool: dict[str, PoolItem] = {}
        self.history: dict[str, PoolItem] = {}
        self.ledger = Ledger()
        self.fresh_kept = 0  # first-time kept samples since the last training request
        self.last_round = 0
        self.eval_signatures: set[str] = set()
        self.counts: dict[str, int] = {}  # funnel: decision reason -> samples
        # Recovery (recovery.py): verdicts decided before a restart, the pool each sample's last
        # revoked kept verdict was in, and what is collected until the first live verdict.
        self.on_log: set[str] = set()
        self.revoked_from: dict[SampleKey, Pool] = {}
        self._rebuild: Rebuild | None = Rebuild()

    # ------------------------------------------------------------------ entry

    def process(self, event: AnyEnvelope) -> list[BaseModel]:
        if event.type != "solution.verified":
            return []
        self._settle()  # outputs found on the log, if not applied yet: they fill `on_log`
        if event.event_id in self.on_log:  # decided before a restart, redelivered: its outputs are out
            self.observe(event)
            return []
        verdict: SolutionVerified = event.payload
        ctx = verdict.context
        if ctx.purpose == "eval":
            self.eval_signatures.add(task_signature(ctx))
            return []
        self._go_live()
        bucket = bucket_of(verdict)  # may raise: before any state changes
        arrival, current = self.ledger.classify(event.event_id, verdict)
        if arrival is Arrival.SAME:  # redelivered: its decision is out already
            return []
        if arrival is Arrival.STALE:
            assert current is not None
            return self._counted([decision(event.event_id, verdict, bucket, kept=False,
                                           reason=f"{SUPERSEDED}{current.sample_id}")])
        out: list[BaseModel] = []
        pool = None
        if current is not None:
            out += self._supersede(current, event.event_id)
            pool = current.pool
        self.ledger.make_current(event.event_id, verdict, pool=pool)
        if self.window and self.window_round is not None and ctx.round > self.window_round:
            out += self.close_window()
        self.window_round = ctx.round if self.window_round is None else max(self.window_round, ctx.round)
        held, decided = self.judge.assess(event.event_id, verdict, bucket, self.eval_signatures)
        if held is not None:
            self.window.append(held)
        if decided is not None:
            out.append(decided)
        self.window_verdicts += 1
        if self.window_verdicts >= self.cfg.window_verdicts:
            out += self.close_window()
        return self._counted(out)

    # ------------------------------------------------------------------ re-verification

    def _supersede(self, current: Current, new_id: str) -> list[BaseModel]:
        """Void the current verdict of a sample whose newer verdict `new_id` just arrived."""
        old_id, reason = current.sample_id, f"{SUPERSEDED}{new_id}"
        out: list[BaseModel] = []
        waiting = [c for c in self.window if c.sample_id == old_id]
        self.window = [c for c in self.window if c.sample_id != old_id]
        # Losers held for pairs are decided already; only an undecided candidate needs a decision.
        out += [describe(c, reason) for c in waiting if c.eligible]
        paired = self.paired.pop(old_id, None)
        kept, place = self._revoke(old_id)
        if kept is None and paired is not None:
            out.append(retraction(paired, reason))  # its pairs no longer stand
        if kept is not None:
            if place is not None:
                current.pool = place
            out.append(retraction(kept, reason))
        return out

    def _revoke(self, sample_id: str) -> tuple[SampleCurated | None, Pool | None]:
        """Take a kept sample back out of the index, the answers and the pools: (its decision, its pool)."""
        kept = self.kept.pop(sample_id, None)
        if kept is None:
            return None, None
        self.index.remove(sample_id)
        if self.answers.get(kept.challenge_id, ("", 0.0))[0] == sample_id:
            del self.answers[kept.challenge_id]  # no answer until a verdict earns one again
        if self.new_pool.pop(sample_id, None) is not None:
            return kept, "new"
        if self.history.pop(sample_id, None) is not None:
            return kept, "history"
        return kept, None

    # ------------------------------------------------------------------ window close

    def close_window(self) -> list[BaseModel]:
        """Decide every waiting candidate, record pairs, maybe request training."""
        window, self.window, self.window_verdicts = self.window, [], 0
        answers, losers, pairs = best_per_challenge(
            window, with_failed=self.cfg.pairs_with_failed, max_pairs=self.cfg.max_pairs_per_challenge)
        out: list[BaseModel] = [describe(c, "not_best_for_challenge") for c in losers]
        fresh = []
        for c in answers:
            prior = self.answers.get(c.verdict.challenge_id)
            if prior is not None and prior[1] >= (c.score or -math.inf):
                out.append(describe(c, "not_best_for_challenge"))
            else:
                fresh.append(c)
        unique, dups = remove_near_dups(
            fresh, self.index, threshold=self.cfg.dup_threshold, num_perm=self.cfg.minhash_perm)
        out += [describe(c, f"duplicate_of:{orig}") for c, orig in dups]
        kept, dropped = select_diverse(
            unique, keep_count(len(unique), self.cfg.keep_fraction, self.cfg.min_keep_per_window))
        out += [describe(c, "below_top_fraction") for c in dropped]
        for c in kept:
            d = describe(c, "kept", kept=True)
            out.append(d)
            assert c.minhash is not None
            cur = self.ledger.get(sample_key(c.verdict))
            self._remember(d, c.minhash, c.task_keys,
                           cur.pool if cur is not None and cur.sample_id == c.sample_id else None)
        out += [pair(p) for p in pairs]
        for p in pairs:  # after _remember: a kept side is retracted through self.kept
            for c in (p.chosen, p.rejected):
                if c.sample_id not in self.kept:
                    self.paired[c.sample_id] = describe(c, "paired")  # a retraction rewrites the reason
        if self.fresh_kept >= self.cfg.train_threshold:
            out += self._training_request()
        return out

    def _remember(self, d: SampleCurated, minhash: MinHash, task_keys: frozenset[str], place: Pool | None) -> None:
        """A kept sample joins the index, the answers and a pool (`place`: its revoked predecessor's)."""
        sid = d.verdict_event_id
        self.index.add(sid, minhash, task_keys)
        self.answers[d.challenge_id] = (sid, d.score if d.score is not None else -math.inf)
        self.kept[sid] = d
        if place is None:
            self.fresh_kept += 1
        pool = self.history if place == "history" else self.new_pool
        pool[sid] = PoolItem(sid, d.family, d.shape_bucket, d.code_hash or "")

    def _training_request(self) -> list[TrainingRequested]:
        self.fresh_kept = 0
        new = list(self.new_pool.values())
        # Revocations may have emptied the new pool; replay the usual share for the kept count.
        n_replay = replay_count(len(new) or self.cfg.train_threshold, self.cfg.new_fraction)
        replay = sample_replay(list(self.history.values()), n_replay,
                               seed=self.cfg.mix_seed * 1_000_003 + self.last_round + 1)
        if not new and not replay:
            return []  # every sample it was for has been revoked: nothing to train on
        request = TrainingRequested(
            round=self.last_round + 1,
            new_sample_ids=[i.sample_id for i in new],
            replay_sample_ids=[i.sample_id for i in replay],
            dataset_hash=dataset_hash(new + replay),
        )
        self._trained(request)
        return [request]

    def _trained(self, request: TrainingRequested) -> None:
        """A request's new samples are history from now on."""
        self.fresh_kept = 0
        self.last_round = max(self.last_round, request.round)
        for sid in request.new_sample_ids:
            item = self.new_pool.pop(sid, None)
            if item is not None:
                self.history[sid] = item

    def _counted(self, out: list[BaseModel]) -> list[BaseModel]:
        for p in out:
            if isinstance(p, SampleCurated):
                key = reason_key(p.reason)
                self.counts[key] = self.counts.get(key, 0) + 1
        return out

    # ------------------------------------------------------------------ restart recovery

    def observe_output(self, event: AnyEnvelope) -> None:
        """One of this curator's own events on the log, found by the runner's warm-up scan."""
        if self._rebuild is not None:
            self._rebuild.add_output(event)
        # Once live, the state holds every decision on the log already (this curator made them or
        # learnt them at its start; there is one curator, its window being global): a rescan after
        # a rebalance has nothing to add.

    def observe(self, event: AnyEnvelope) -> None:
        """A verdict handled before a restart (replayed, or redelivered with its outputs on the log).

        Its decisions are on the log (applied by `_settle`); what they do not say comes back
        here: the ledger, eval signatures, window round, and its part in the open window."""
        if event.type != "solution.verified":
            return
        self._settle()
        v: SolutionVerified = event.payload
        if v.context.purpose == "eval":
            self.eval_signatures.add(task_signature(v.context))
            return
        bucket = bucket_of(v)
        sid = event.event_id
        arrival, current = self.ledger.classify(sid, v)
        if arrival in (Arrival.SAME, Arrival.STALE):
            return  # nothing admitted (a stale verdict's decision is on the log)
        # The verdict it superseded was revoked by outputs on the log; once live, a loser held for
        # pairs may still be in the window (a redelivery after the first live verdict).
        old = current.sample_id if current is not None else None
        self.window = [c for c in self.window if c.sample_id != old]
        inherited = current.pool if current is not None else None
        self.ledger.make_current(sid, v, pool=self.revoked_from.get(sample_key(v), inherited))
        self.window_round = v.context.round if self.window_round is None else max(self.window_round, v.context.round)
        rb, round_ = self._rebuild, v.context.round
        if rb is None:  # live already: a later warm-up (a rebalance) or a late redelivery
            held = None if sid in self.on_log else self.judge.assess(sid, v, bucket, self.eval_signatures)[0]
            if held is not None and held.eligible:  # committed undecided: it was waiting, it still is
                self.window.append(held)
                self.window_verdicts += 1
            return
        logged = rb.logged.get(sid)
        if logged is None:  # never decided: it is waiting
            rb.admitted(None, round_, self.judge.assess(sid, v, bucket, self.eval_signatures)[0], old)
        elif rb.after_last_close(logged):
            held = self.judge.held_loser(sid, v, bucket, logged.reason) if logged.held else None
            rb.admitted(logged.at, round_, held, old)
        else:
            rb.admitted_before(round_)

    def _settle(self) -> None:
        """Apply the outputs found on the log, in the order they were produced."""
        if self._rebuild is None:
            return
        for e in self._rebuild.outputs():
            self._apply(e, self._rebuild.recent)

    def _apply(self, e: AnyEnvelope, recent: dict[str, SampleCurated]) -> None:
        """Redo what producing `e` did to the state (as close_window, _supersede and
        _training_request did it); `recent`: the decisions a pair in `e` may name."""
        p = e.payload
        if isinstance(p, SampleCurated):
            self.on_log.add(p.verdict_event_id)
            self._counted([p])
            key = None if p.sample_index is None else (p.challenge_id, p.sample_index)  # None: older events
            if p.kept:  # into the pool its sample's last revoked kept verdict was in, if any
                keys = frozenset() if p.context is None else self.judge.task_keys(p.context)
                self._remember(p, self.judge.minhash(p.code or ""), keys,
                               None if key is None else self.revoked_from.get(key))
            elif p.reason.startswith(SUPERSEDED):  # a waiting verdict, a pair side or a kept one voided
                self.paired.pop(p.verdict_event_id, None)
                place = self._revoke(p.verdict_event_id)[1]
                if place is not None and key is not None:
                    self.revoked_from[key] = place
        elif isinstance(p, PreferenceRecorded):
            for sid in (p.chosen_sample_id, p.rejected_sample_id):
                if sid not in self.kept and sid in recent:
                    self.paired[sid] = recent[sid]
        elif isinstance(p, TrainingRequested):
            self._trained(p)

    def _go_live(self) -> None:
        """The first live verdict: every handled one has been observed, so the open window can be
        re-enacted (recovery.py); from here on the core is live."""
        rb = self._rebuild
        if rb is None:
            return
        self._settle()
        self._rebuild = None
        self.window, self.window_verdicts = rb.window(self.cfg.window_verdicts)
