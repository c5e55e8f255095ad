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
from services.verifier.core import Session, verify_batch, warm_slots_for
from services.verifier.options import VERIFIER_VERSION, VerifyOptions
from services.verifier.report import VerifyReport, rejected


class VerifierCore:
    """One SolutionVerified per SolutionExtracted (rejected extractions included)."""

    name = "verifier"
    version = VERIFIER_VERSION
    inputs: tuple[str, ...] = ("extracted",)
    # A verdict depends on its input alone: a restart need not re-run committed kernels.
    stateful = False

    def __init__(self, options: VerifyOptions | None = None) -> None:
        self.options = options or VerifyOptions()
        # Extractions of one batch verified at once (process_many: verify_batch's workers),
        # sharing one Session: its bundles, sandbox slots and GPU lock, as in verify_many.
        self.concurrency = self.options.workers
        self._session: Session | None = None
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            if self._session is not None:
                self._session.close()
                self._session = None

    def process(self, event: AnyEnvelope) -> list[BaseModel]:
        got = self._triage(event)
        if not isinstance(got, SolutionExtracted):
            return got
        assert got.code is not None  # guaranteed by SolutionExtracted's validator
        return self._verdict(got, self._get_session().verify(got.context.problem_source,
                                                             got.code))

    def process_many(self, events: list[AnyEnvelope]) -> list[list[BaseModel] | Exception]:
        """`process` of each event, in order, as one verify_batch: its bundles are built
        ahead of the workers, as in the benchmark. A ProcessingError is returned, per event."""
        results: list[list[BaseModel] | Exception | None] = []
        todo: list[tuple[int, SolutionExtracted]] = []
        for event in events:
            try:
                got = self._triage(event)
            except ProcessingError as exc:
                results.append(exc)
                continue
            results.append(got if not isinstance(got, SolutionExtracted) else None)
            if isinstance(got, SolutionExtracted):
                todo.append((len(results) - 1, got))
        pairs = [(p.context.problem_source, p.code or "") for _, p in todo]
        reports = verify_batch(self._get_session(), pairs, self.options.workers) if todo else []
        for (i, payload), report in zip(todo, reports):
            results[i] = self._verdict(payload, report)
        return [r if r is not None else [] for r in results]

    def _triage(self, event: AnyEnvelope) -> list[BaseModel] | SolutionExtracted:
        """The outputs of an event that needs no sandbox, or the extraction to verify."""
        payload = event.payload
        if isinstance(payload, ChallengeCreated) or not isinstance(payload, SolutionExtracted):
            return []
        if not payload.accepted:
            report = rejected("extraction", [f"extraction rejected: {payload.reason}"],
                              self.options.device, isolation="none (not run)")
            return self._verdict(payload, report)
        if not payload.context.problem_source.strip():
            raise ProcessingError(f"challenge {payload.challenge_id!r} carries no problem "
                                  "source; cannot verify")
        return payload

    @staticmethod
    def _verdict(payload: SolutionExtracted, report: VerifyReport) -> list[BaseModel]:
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
