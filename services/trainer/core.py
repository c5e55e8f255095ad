"""TrainerCore: training requests -> a LoRA adapter per round + its frozen-point eval challenges.

It remembers kept curated samples (they carry their challenge context, so the
prompt is rebuilt without a join) and the task types seen. A TrainingRequested
whose samples have all arrived is trained at once (requests wait for samples
still in flight on the curated topic). Each round trains from the base model
on exactly the requested mixed set, then emits RoundTrained and the held-out
eval challenges: one set for the candidate (eval_round = round) and, when
`remeasure_incumbent`, one for the current incumbent (eval_round = incumbent,
0 = base model), so the evaluator compares both measured side by side.

Training is idempotent: an adapter directory whose manifest has the request's
dataset hash is reused, so replaying the log at start-up does not retrain.

Retractions (retraction.py): a kept sample that the curator later retracts (its
verdict superseded by a re-verification) leaves the sample set. A request that names
a sample already retracted when the round trains is trained without it: the request
and the retraction travel on different topics, so the retraction may overtake an
earlier request, and a request must not wait for a sample that will never be kept
again nor train on a verdict known to be void. The adapter's manifest then records a
hash of the request hash plus the dropped ids (a rebuild that drops a different set
retrains rather than reusing the wrong adapter), RoundTrained keeps the request's hash
(it answers that request) and its metrics count them (`retracted_samples`). A request whose every sample is retracted trains nothing. A
retraction arriving after its round trained cannot untrain it; the curator has revoked
the sample from its pools, so no later request names it.
"""

from __future__ import annotations

import hashlib

from pydantic import BaseModel

from kz_common.core import ProcessingError
from schemas import AnyEnvelope, RoundEvaluated, RoundTrained, SampleCurated, TrainingRequested
from services.trainer.config import TrainerConfig
from services.trainer.exceptions import ConfigError, TrainingError
from services.trainer.heldout import eval_challenges, heldout_tasks
from services.trainer.lora import TrainExample, read_manifest, train_lora
from services.trainer.prompt import build_prompt, format_completion
from services.trainer.retraction import CuratedSet


class TrainerCore:
    """The trainer service's core (state: kept samples, pending requests, incumbent round)."""

    name = "trainer"
    version = "1"
    inputs: tuple[str, ...] = ("curated", "training-requests", "rounds")

    def __init__(self, config: TrainerConfig) -> None:
        if not config.base_model:
            raise ConfigError("trainer needs services.trainer.base_model (a model directory or hub id)")
        self.cfg = config
        self.curated = CuratedSet()  # kept samples net of retractions
        self.task_types: set[tuple[str, str]] = set()
        self.pending: dict[int, TrainingRequested] = {}
        self.done: set[int] = set()
        self.skipped: set[int] = set()  # rounds whose every sample was retracted before training
        self.incumbent = 0
        self.incumbent_path: str | None = None  # None: the base model

    @property
    def samples(self) -> dict[str, SampleCurated]:
        """Kept, unretracted samples by sample id."""
        return self.curated.kept

    def process(self, event: AnyEnvelope) -> list[BaseModel]:
        p = event.payload
        if isinstance(p, SampleCurated):
            self.task_types.add((p.family, p.dtype))
            self.curated.apply(p)
        elif isinstance(p, TrainingRequested) and p.round not in self.done:
            self.pending[p.round] = p
        elif isinstance(p, RoundEvaluated) and p.promoted:
            if p.round > self.incumbent:
                self.incumbent, self.incumbent_path = p.round, p.adapter_path
        else:
            return []
        return self._run_ready()

    def missing(self, req: TrainingRequested) -> list[str]:
        """Sample ids of `req` not seen on the curated topic yet (a retracted one is not awaited)."""
        return [s for s in self._ids(req) if s not in self.samples and s not in self.curated.retracted]

    def retracted(self, req: TrainingRequested) -> list[str]:
        """Sample ids of `req` retracted since the curator requested them."""
        return [s for s in self._ids(req) if s in self.curated.retracted]

    @staticmethod
    def _ids(req: TrainingRequested) -> tuple[str, ...]:
        return (*req.new_sample_ids, *req.replay_sample_ids)

    def _run_ready(self) -> list[BaseModel]:
        out: list[BaseModel] = []
        for rnd in sorted(self.pending):
            req = self.pending[rnd]
            if self.missing(req):
                continue
            del self.pending[rnd]
            self.done.add(rnd)
            out += self._train(req)
        return out

    def examples(self, req: TrainingRequested) -> list[TrainExample]:
        out = []
        for sid in self._ids(req):
            if sid in self.curated.retracted:
                continue
            s = self.samples[sid]
            if s.context is None or s.code is None:
                raise ProcessingError(f"kept sample {sid} lacks context or code")
            out.append(TrainExample(sid, build_prompt(s.context, s.challenge_id, few_shot=self.cfg.few_shot),
                                    format_completion(s.code)))
        return out

    def _train(self, req: TrainingRequested) -> list[BaseModel]:
        dropped = self.retracted(req)
        if len(dropped) == len(self._ids(req)):
            self.skipped.add(req.round)  # nothing left to train on (the curator skips such requests too)
            return []
        out_dir = self.cfg.adapters_dir / f"round-{req.round:04d}"
        trained_hash = effective_hash(req.dataset_hash, dropped)
        manifest = read_manifest(out_dir)
        if manifest is not None and manifest.get("dataset_hash") == trained_hash:
            metrics = {k: float(v) for k, v in manifest["metrics"].items()}
        else:
            extra = {"round": req.round, "request_dataset_hash": req.dataset_hash, "retracted_sample_ids": dropped}
            try:
                result = train_lora(self.cfg.base_model, self.examples(req), self.cfg.train, out_dir,
                                    dataset_hash=trained_hash, extra_manifest=extra)
            except TrainingError as exc:
                raise ProcessingError(f"round {req.round}: {exc}") from exc
            metrics = result.metrics
        if dropped:
            metrics = {**metrics, "retracted_samples": float(len(dropped))}
        tasks = heldout_tasks(self.task_types, self.cfg)
        arms: list[tuple[int, str | None]] = [(req.round, str(out_dir))]
        if self.cfg.remeasure_incumbent:
            arms.append((self.incumbent, self.incumbent_path))
        challenges = [c for arm, path in arms
                      for c in eval_challenges(tasks, round=req.round, arm=arm, adapter_path=path, cfg=self.cfg)]
        trained = RoundTrained(
            round=req.round, adapter_path=str(out_dir), base_model=self.cfg.base_model,
            dataset_hash=req.dataset_hash, metrics=metrics,
            eval_challenge_ids=[c.challenge_id for c in challenges],
        )
        return [trained, *challenges]


def effective_hash(request_hash: str, dropped: list[str]) -> str:
    """The hash of the set actually trained: the request's own when nothing was dropped."""
    if not dropped:
        return request_hash
    text = "\n".join([request_hash, *sorted(dropped)])
    return "r-" + hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
