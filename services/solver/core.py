"""SolverCore: challenge.created -> n solution.sampled; round events -> adapter hot-swap."""

from __future__ import annotations

import hashlib
from pathlib import Path

from pydantic import BaseModel

from kz_common.llm.backends import AdapterRef, TextBackend, sample_seed
from kz_common.llm.exceptions import LLMError
from schemas import AnyEnvelope
from schemas.events import (
    ChallengeContext,
    ChallengeCreated,
    RoundEvaluated,
    RoundTrained,
    Sampling,
    SolutionSampled,
)
from services.solver.config import SolverConfig
from services.solver.exceptions import AdapterUnknown, SamplingFailed
from kz_common.prompts import build_prompt, prompt_hash


def challenge_seed(challenge_id: str, salt: str = "") -> int:
    """Base sample seed of a challenge: sample j uses sample_seed(base, j), so reprocessing
    a challenge reproduces every sample."""
    digest = hashlib.blake2b(f"{salt}|{challenge_id}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") % (2**31 - 1)


class SolverCore:
    """State: the promoted adapter (train sampling) and trained-round adapters (eval sampling)."""

    name = "solver"
    version = "1"
    inputs: tuple[str, ...] = ("challenges", "rounds")

    def __init__(self, backend: TextBackend, config: SolverConfig | None = None) -> None:
        self.backend = backend
        self.config = config or SolverConfig()
        self.trained: dict[int, AdapterRef] = {}
        self.promoted: AdapterRef | None = None
        if self.config.initial_adapter:
            r = self.config.initial_adapter_round
            self.promoted = (AdapterRef.for_round(r, self.config.initial_adapter) if r is not None
                             else AdapterRef("initial", Path(self.config.initial_adapter)))

    def process(self, event: AnyEnvelope) -> list[BaseModel]:
        payload = event.payload
        if isinstance(payload, ChallengeCreated):
            return list(self.solve(payload))
        self._observe_round(payload)
        return []

    def observe(self, event: AnyEnvelope) -> None:
        """Replay hook: apply round events only; replayed challenges are not re-sampled."""
        self._observe_round(event.payload)

    def solve(self, challenge: ChallengeCreated) -> list[SolutionSampled]:
        adapter = self.adapter_for(challenge)
        cfg = self.config
        prompt = build_prompt(challenge, few_shot=cfg.few_shot, seed_key=challenge.challenge_id)
        base = Sampling(temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_tokens,
                        seed=challenge_seed(challenge.challenge_id, cfg.seed_salt))
        try:
            [outputs] = self.backend.generate([prompt], base, cfg.n_samples, adapter)
        except LLMError as exc:
            raise SamplingFailed(f"{self.backend.name} backend failed on {challenge.challenge_id}: {exc}") from exc
        context = ChallengeContext.of(challenge)
        digest = prompt_hash(prompt)
        return [
            SolutionSampled(
                challenge_id=challenge.challenge_id, context=context, sample_index=j,
                n_samples=cfg.n_samples, backend=self.backend.name, model_id=self.backend.model_id,
                adapter=adapter.name if adapter else None,
                adapter_round=adapter.round if adapter else None,
                sampling=base.model_copy(update={"seed": sample_seed(base.seed, j)}),
                prompt_hash=digest, raw_output=text,
            )
            for j, text in enumerate(outputs)
        ]

    def adapter_for(self, challenge: ChallengeCreated) -> AdapterRef | None:
        """Train: the promoted adapter. Eval of round r: round r's candidate (0 = base model)."""
        if challenge.purpose != "eval":
            return self.promoted
        r = challenge.eval_round
        if r is None:
            raise AdapterUnknown(f"eval challenge {challenge.challenge_id} has no eval_round")
        if r == 0:
            return None
        if challenge.eval_adapter_path:
            return AdapterRef.for_round(r, challenge.eval_adapter_path)
        if r not in self.trained:
            raise AdapterUnknown(
                f"eval challenge {challenge.challenge_id} evaluates round {r}, but no round.trained "
                f"for it has been seen (known: {sorted(self.trained)}) and it carries no eval_adapter_path"
            )
        return self.trained[r]

    def _observe_round(self, payload: BaseModel) -> None:
        if isinstance(payload, RoundTrained):
            self.trained[payload.round] = AdapterRef.for_round(payload.round, payload.adapter_path)
        elif isinstance(payload, RoundEvaluated) and payload.promoted:
            path = payload.adapter_path or (self.trained[payload.round].path
                                            if payload.round in self.trained else None)
            if path is None:
                raise AdapterUnknown(f"round {payload.round} promoted without an adapter path")
            self.promoted = AdapterRef.for_round(payload.round, path)
