"""VerifierCore: the ServiceCore that turns `solution.extracted` into `solution.verified`.

Stateless by design: the extraction event carries the challenge context
(schemas.events.ChallengeContext), problem source included, so no join with the
challenges topic and no in-memory state that a restart would lose. Challenge
events, if a deployment also routes them here, produce nothing.
"""

from __future__ import annotations

import threading

from pydantic import BaseModel

from kz_common.core import ProcessingError
from schemas import AnyEnvelope
from schemas.events import ChallengeCreated, SolutionExtracted
from services.verifier.core import Session, warm_slots_for
from services.verifier.options import VERIFIER_VERSION, VerifyOptions
from services.verifier.report import rejected


class VerifierCore:
    """One SolutionVerified per SolutionExtracted (rejected extractions included)."""

    name = "verifier"
    version = VERIFIER_VERSION
    inputs: tuple[str, ...] = ("extracted",)
    # A verdict depends on its input alone: a restart need not re-run committed kernels.
    stateful = False

    def __init__(self, options: VerifyOptions | None = None) -> None:
        self.options = options or VerifyOptions()
        # Extractions of one batch verified at once (the runner's threads), sharing one
        # Session: its bundles, sandbox slots and GPU lock, as in verify_many.
        self.concurrency = self.options.workers
        self._session: Session | None = None
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            if self._session is not None:
                self._session.close()
                self._session = None

    def process(self, event: AnyEnvelope) -> list[BaseModel]:
        payload = event.payload
        if isinstance(payload, ChallengeCreated):
            return []
        if not isinstance(payload, SolutionExtracted):
            return []
        if not payload.accepted:
            report = rejected("extraction", [f"extraction rejected: {payload.reason}"],
                              self.options.device, isolation="none (not run)")
        else:
            source = payload.context.problem_source
            if not source.strip():
                raise ProcessingError(f"challenge {payload.challenge_id!r} carries no problem "
                                      "source; cannot verify")
            assert payload.code is not None  # guaranteed by SolutionExtracted's validator
            report = self._get_session().verify(source, payload.code)
        return [report.to_payload(payload.challenge_id, payload.code_hash,
                                  context=payload.context, sample_index=payload.sample_index,
                                  code=payload.code)]

    def _get_session(self) -> Session:
        # One session per core: reference bundles (inputs drawn with fresh seeds) are
        # reused across the many samples of one challenge, and rebuilt per new problem.
        with self._lock:
            if self._session is None:
                self._session = Session(self.options, warm_slots=warm_slots_for(
                    self.options, self.options.workers))
            return self._session
