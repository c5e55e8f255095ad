"""ChallengerCore: round.started -> n challenge.created; curriculum.adjusted -> new rungs."""

from __future__ import annotations

import hashlib
import logging

from pydantic import BaseModel

from kz_common.llm.backends import TextBackend
from kz_common.ops import CatalogueError, get_op, render_problem
from schemas import AnyEnvelope
from schemas.events import ChallengeCreated, CurriculumAdjusted, RoundStarted
from services.challenger.catalogue import Catalogue, Proposal
from services.challenger.config import ChallengerConfig
from services.challenger.exceptions import ChallengerConfigError
from services.challenger.generators import (
    ChallengeGenerator,
    ProgrammaticGenerator,
    ProposalRequest,
)
from services.challenger.ladder import MAX_DIFFICULTY, rung
from services.challenger.llm_generator import LLMGenerator
from services.challenger.signatures import ChallengeSignature, SignatureHistory

log = logging.getLogger(__name__)


class ChallengerCore:
    """State: per-family difficulty (from curriculum events) and recent challenge signatures."""

    name = "challenger"
    version = "1"
    inputs: tuple[str, ...] = ("control", "curriculum")

    def __init__(self, config: ChallengerConfig | None = None,
                 generator: ChallengeGenerator | None = None) -> None:
        self.config = config or ChallengerConfig()
        self.catalogue = Catalogue(self.config)
        self.generator = generator or ProgrammaticGenerator(self.catalogue)
        self.difficulty: dict[str, int] = {f: self.config.initial_difficulty for f in self.catalogue.families}
        self.history = SignatureHistory(self.config.history_size, self.config.dup_tolerance_octaves)

    @classmethod
    def from_config(cls, config: ChallengerConfig, backend: TextBackend | None = None) -> ChallengerCore:
        """The core with the generator `config.generator` names (the LLM one needs `backend`)."""
        if config.generator == "programmatic":
            return cls(config)
        if backend is None:
            raise ChallengerConfigError("generator 'llm' needs a text backend")
        c = config
        gen = LLMGenerator(backend, Catalogue(c), max_attempts=c.llm_max_attempts,
                           temperature=c.llm_temperature, top_p=c.llm_top_p, max_tokens=c.llm_max_tokens)
        return cls(config, gen)

    def process(self, event: AnyEnvelope) -> list[BaseModel]:
        payload = event.payload
        if isinstance(payload, CurriculumAdjusted):
            self.adjust(payload)
            return []
        if isinstance(payload, RoundStarted):
            return list(self.new_round(payload))
        return []

    def observe(self, event: AnyEnvelope) -> None:
        """Replay hook: rebuild state from an already-handled event without costly generation.

        Programmatic rounds are cheap and deterministic, so they are regenerated to
        refill the history; LLM rounds are skipped (their history is lost on restart).
        """
        if isinstance(event.payload, RoundStarted) and self.generator.kind == "llm":
            return
        self.process(event)

    def adjust(self, decision: CurriculumAdjusted) -> None:
        self.difficulty[decision.family] = min(decision.new_difficulty, MAX_DIFFICULTY)

    def new_round(self, started: RoundStarted) -> list[ChallengeCreated]:
        snapshot = dict(self.difficulty)  # one round, one set of rungs
        out = []
        for index in range(started.n_challenges):
            challenge = self._fill_slot(started, index, snapshot)
            if challenge is not None:
                out.append(challenge)
        return out

    # ------------------------------------------------------------------ internals

    def _fill_slot(self, started: RoundStarted, index: int, difficulty: dict[str, int]) -> ChallengeCreated | None:
        feedback: list[str] = []
        for attempt in range(self.config.max_resamples):
            request = ProposalRequest(started.round, started.seed, index, attempt, difficulty,
                                      self.history.summary(), tuple(feedback))
            proposal = self.generator.propose(request)
            try:
                challenge = self._challenge(proposal, started, index, difficulty)
            except CatalogueError as exc:  # e.g. a corner tensor too large: draw again
                feedback.append(f"{proposal.op} {proposal.shape_range} was refused: {exc}")
                continue
            sig = ChallengeSignature.of_challenge(challenge)
            clash = self.history.near_duplicate_of(sig)
            if clash is not None:
                feedback.append(f"{sig.key()} {dict(proposal.shape_range)} nearly duplicates a recent "
                                f"challenge { {d: (lo, hi) for d, lo, hi in clash.shape_range} }")
                continue
            self.history.add(challenge.challenge_id, sig)
            return challenge
        log.warning("round %d slot %d: no non-duplicate challenge in %d proposals; slot skipped",
                    started.round, index, self.config.max_resamples)
        return None

    def _challenge(self, p: Proposal, started: RoundStarted, index: int,
                   difficulty: dict[str, int]) -> ChallengeCreated:
        op = get_op(p.op)
        level = min(difficulty.get(op.family, self.config.initial_difficulty), MAX_DIFFICULTY)
        target = rung(level).target
        device = "cpu" if self.config.cpu_mode else self.config.device
        source = render_problem(op.name, p.dtype, p.shape_range, device=device)
        ident = f"{started.round}|{started.seed}|{index}|{op.name}|{p.dtype}|{sorted(p.shape_range.items())}"
        digest = hashlib.blake2b(f"{ident}|{target.kind}:{target.value}".encode(), digest_size=6).hexdigest()
        return ChallengeCreated(
            challenge_id=f"r{started.round}-{digest}",
            op=op.name, family=op.family, dtype=p.dtype,  # type: ignore[arg-type]
            shape_range=p.shape_range, target=target,
            constraints=["no_optimized_library_call"],
            difficulty=level, generator=self.generator.kind, round=started.round,
            problem_source=source,
        )
