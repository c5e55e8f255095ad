"""Kept curated samples net of the curator's retractions (shared by TrainerCore and the export).

The curator decides each sample id (verdict event id) once. The only second decision
it ever makes about an id is a retraction: kept=False with reason
`superseded_by:<newer verdict id>` (services/curator/supersede.py), emitted when a
newer verdict of the same sample arrives, for a kept sample and for any sample that
appears in a preference pair. So:

- any kept=False about an id that was kept voids it ("a later kept=False retracts");
- a `superseded_by:` decision is remembered as a tombstone, so a retraction that
  arrives *before* its kept decision (at-least-once delivery, a rebuilt state read
  out of order) still wins, and a late or redelivered kept=True never resurrects the
  sample. Only retractions are remembered, not every rejection: most samples are
  rejected, and a plain rejection never precedes a kept decision of the same id;
- a kept decision delivered twice is held once (first copy: the export's row order).

Retraction is by sample id only: a newer verdict of the same sample has its own id
and its own decision, so retracting v1 never drops v2, nor any other sample.

The prefix is repeated here rather than imported: services never import each other
(kz_common/analytics/views.py spells it out for the same reason).
"""

from __future__ import annotations

from collections.abc import Iterable

from schemas import SampleCurated

RETRACTION_PREFIX = "superseded_by:"


def is_retraction(s: SampleCurated) -> bool:
    return not s.kept and s.reason.startswith(RETRACTION_PREFIX)


class CuratedSet:
    """Kept samples by id (first-seen order) and the ids retracted so far."""

    def __init__(self) -> None:
        self.kept: dict[str, SampleCurated] = {}
        self.retracted: set[str] = set()

    @classmethod
    def of(cls, decisions: Iterable[SampleCurated]) -> CuratedSet:
        out = cls()
        for s in decisions:
            out.apply(s)
        return out

    def apply(self, s: SampleCurated) -> bool:
        """Fold in one decision; True when it changed the kept set."""
        sid = s.verdict_event_id
        if s.kept:
            if sid in self.retracted or sid in self.kept:
                return False  # retracted for good, or a duplicate: idempotent
            self.kept[sid] = s
            return True
        if is_retraction(s) or sid in self.kept:
            self.retracted.add(sid)
            return self.kept.pop(sid, None) is not None
        return False

    def __contains__(self, sid: object) -> bool:
        return sid in self.kept
