"""Restart recovery of the curator: decided state from its own outputs, the open window from its inputs.

Why not simply replay the inputs: the window is global (it spans partitions) but
the runner replays the committed verdicts partition by partition, not in the
order they were consumed. Re-running `process` on them closes other windows than
the live ones did: a verdict decided live is put back in the window and decided a
second time, one that was waiting is "decided" with the outputs discarded and
never decided at all.

So a restarted curator takes every decision it already made from the log:

- decided state (kept samples, near-dup index, per-challenge answers, pools, the
  fresh-kept count, rounds, pair sides, funnel) comes from its own SampleCurated,
  PreferenceRecorded and TrainingRequested events, re-applied in the order it
  produced them (`produced_at`: one curator decides sequentially, so the times of
  its outputs are its decision order across partitions and topics; the log only
  orders each partition);
- the ledger, eval signatures and window round come from the replayed inputs (a
  sample's verdicts share a partition, so their order is kept; the rest is
  order-free);
- the open window is what was admitted after the last window close on the log:
  the verdicts with no decision at all (waiting, eligible), plus those decided on
  arrival after that close (failed or rule-hit losers, held for preference pairs)
  or superseded while waiting. Windows that closed without any decision (no
  eligible member, e.g. every verdict failed) leave nothing on the log; they are
  re-enacted by counting those timed admissions, as the live window did.

Limits (no decision is lost or repeated by any of them): the waiting verdicts with
no decision have no time; they are re-admitted after the timed ones, newest round
first, so a round change among them may drop a held loser the live window still
had (one preference pair fewer). The order of outputs is the curator's wall clock:
a clock set back between two runs mixes their decisions' order up. Config changes
between runs are not re-enacted: old windows are read as closed, not as the new
settings would have closed them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from schemas import AnyEnvelope, PreferenceRecorded, SampleCurated, TrainingRequested
from services.curator.decisions import reason_key
from services.curator.selection import Candidate

# Decision reasons that only a window close gives (core.close_window); with the pairs and
# training requests they mark a close on the log.
CLOSE_REASONS = frozenset({"kept", "not_best_for_challenge", "duplicate_of", "below_top_fraction"})
HELD_REASONS = ("failed:", "rule:")  # losers decided on arrival that the window keeps for pairs


def closes_window(e: AnyEnvelope) -> bool:
    p = e.payload
    if isinstance(p, SampleCurated):
        return reason_key(p.reason) in CLOSE_REASONS
    return isinstance(p, PreferenceRecorded | TrainingRequested)


@dataclass(frozen=True)
class Logged:
    """What the log says about a verdict: its first decision."""

    at: datetime  # when it was published
    own: bool  # caused by the verdict itself: decided on arrival, so `at` is its arrival time
    reason: str

    @property
    def held(self) -> bool:
        """A loser decided on arrival that the window may hold for pairs."""
        return self.own and self.reason.startswith(HELD_REASONS)


@dataclass(frozen=True)
class _Admission:
    """A verdict admitted to the window after the last close on the log."""

    at: datetime | None  # its arrival time; None: never decided (it is still waiting)
    round: int
    held: Candidate | None  # what the window holds of it
    supersedes: str | None  # the earlier verdict of its sample, which left the window then


class Rebuild:
    """What a restarted curator collects before its first live verdict."""

    def __init__(self) -> None:
        self._pending: list[AnyEnvelope] = []
        self._seen: set[str] = set()
        self.logged: dict[str, Logged] = {}  # verdict id -> its first decision
        # Decisions since the last close: a close's pairs name them (its sides are decided in
        # that window), and pair sides that stay unkept need a decision for their retraction.
        self.recent: dict[str, SampleCurated] = {}
        self.last_close: datetime | None = None
        self.round_before: int | None = None  # newest round admitted up to the last close
        self._timed: list[tuple[datetime, _Admission]] = []
        self._waiting: list[_Admission] = []

    # ------------------------------------------------------------------ outputs

    def add_output(self, event: AnyEnvelope) -> None:
        """One of the curator's own events, found by a warm-up scan (a rescan repeats them)."""
        if event.event_id in self._seen or not isinstance(
                event.payload, SampleCurated | PreferenceRecorded | TrainingRequested):
            return
        self._seen.add(event.event_id)
        self._pending.append(event)

    def outputs(self) -> Iterator[AnyEnvelope]:
        """The outputs added since the last call, in the order they were produced."""
        pending, self._pending = sorted(self._pending, key=lambda e: e.produced_at), []
        closing: str | None = None  # the verdict whose close is being read (its outputs come in one run)
        for e in pending:
            close = closes_window(e)
            if closing is not None and (not close or e.causation_id != closing):
                closing = None
                self.recent.clear()  # that close's pairs are read: no later pair names these
            if close:
                closing = e.causation_id
                self.last_close = e.produced_at
            p = e.payload
            if isinstance(p, SampleCurated):
                vid = p.verdict_event_id
                self.logged.setdefault(vid, Logged(e.produced_at, e.causation_id == vid, p.reason))
                if p.reason.startswith(HELD_REASONS) or (close and not p.kept):
                    self.recent[vid] = p  # a possible unkept pair side
            yield e

    # ------------------------------------------------------------------ inputs

    def after_last_close(self, logged: Logged) -> bool:
        return self.last_close is None or logged.at > self.last_close

    def admitted(self, at: datetime | None, round_: int, held: Candidate | None, supersedes: str | None) -> None:
        """A verdict admitted after the last close (`at` None: it has no decision yet)."""
        admission = _Admission(at, round_, held, supersedes)
        if at is None:
            self._waiting.append(admission)
        else:
            self._timed.append((at, admission))

    def admitted_before(self, round_: int) -> None:
        """A verdict admitted up to the last close: only its round still matters."""
        self.round_before = round_ if self.round_before is None else max(self.round_before, round_)

    def window(self, size: int) -> tuple[list[Candidate], int]:
        """(the open window, its verdict count): the admissions after the last close re-enacted."""
        window: list[Candidate] = []
        count, newest = 0, self.round_before
        timed = [a for _, a in sorted(self._timed, key=lambda t: t[0])]
        # Waiting verdicts have no time but came after every close (a close decides them): newest
        # round first, so no round change among them closes (and loses) one of them.
        waiting = sorted(self._waiting, key=lambda a: -a.round)
        for a in timed + waiting:
            if a.supersedes is not None:
                window = [c for c in window if c.sample_id != a.supersedes]
            if window and newest is not None and a.round > newest:
                window, count = [], 0  # a newer round closed a window of losers only: no decision
            newest = a.round if newest is None else max(newest, a.round)
            count += 1
            if a.held is not None:
                window.append(a.held)
            if a.at is not None and count >= size:
                window, count = [], 0  # a full window of losers only closed: no decision
        return window, count
