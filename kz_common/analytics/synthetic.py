"""Synthetic but schema-valid flywheel logs, for the benchmark and the analytics tests.

Envelopes are built as plain dicts (pydantic per event would dominate a 1M
event benchmark); `check_sample` decodes a stride of them with the real codec
so the generator cannot drift from schemas/events.py unnoticed.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import orjson

from schemas import EVENTS, decode, derived_event_id, new_event_id

OPS = [("add", "elementwise"), ("gelu", "fused_activation"), ("softmax", "softmax"),
       ("layernorm", "normalization"), ("row_sum", "reduction"), ("matmul", "matmul")]
PROBLEM = "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n" + "    # body\n" * 40
CODE = "import triton\nimport triton.language as tl\n\n@triton.jit\ndef kernel(x_ptr, n):\n" + \
    "    pass  # body\n" * 40 + "class ModelNew:\n    pass\n"
CHEAT = "# torch.softmax shortcut\n"
START = datetime(2025, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Message:
    topic: str
    key: bytes
    value: bytes
    event_id: str


class Flywheel:
    """Generates rounds of challenges -> samples -> extractions -> verdicts -> curation."""

    def __init__(self, seed: int = 0, samples: int = 4, verifier_version: str = "1.0.0") -> None:
        self.rng = random.Random(seed)
        self.samples = samples
        self.verifier_version = verifier_version
        self.clock = START

    def _envelope(self, etype: str, payload: dict, correlation: str, parent: str | None,
                  service: str, index: int = 0) -> Message:
        self.clock += timedelta(milliseconds=3)
        event_id = derived_event_id(parent, service, index) if parent else new_event_id()
        doc = {"event_id": event_id, "type": etype, "schema_version": EVENTS[etype].version,
               "produced_at": self.clock.isoformat().replace("+00:00", "Z"),
               "producer": {"service": service, "version": "1"}, "causation_id": parent,
               "correlation_id": correlation, "payload": payload}
        return Message(EVENTS[etype].topic, correlation.encode(), orjson.dumps(doc), event_id)

    def round(self, r: int, n_challenges: int) -> Iterator[Message]:
        """Every event of one round (pass rates and speedups improve with r)."""
        start = self._envelope("round.started", {"round": r, "n_challenges": n_challenges, "seed": r},
                               f"round-{r}", None, "kz-run")
        yield start
        parent = start.event_id
        kept_ids: list[str] = []
        for i in range(n_challenges):
            yield from self._challenge(r, i, parent, kept_ids)
        for op, family in OPS:
            old = min(r, 5)
            yield self._envelope("curriculum.adjusted", {
                "family": family, "old_difficulty": old, "new_difficulty": old + 1,
                "pass_rate": min(1.0, 0.3 + 0.1 * r), "window": 50, "reason": "pass rate above band"},
                f"curriculum-{family}", None, "curriculum")
        yield from self._training(r, kept_ids)

    def _challenge(self, r: int, i: int, parent: str, kept_ids: list[str]) -> Iterator[Message]:
        op, family = OPS[i % len(OPS)]
        cid = f"r{r}-c{i}"
        difficulty = min(r, 5) + self.rng.randint(0, 1)
        ctx = {"op": op, "family": family, "dtype": "float32", "shape_range": {"n": [1, 4096]},
               "target": {"kind": "naive_multiple", "value": 1.5},
               "constraints": ["no_optimized_library_call"], "difficulty": difficulty, "round": r,
               "purpose": "train", "eval_round": None, "problem_source": PROBLEM}
        ch = self._envelope("challenge.created", {
            "challenge_id": cid, **{k: v for k, v in ctx.items() if k not in ("purpose", "eval_round")},
            "generator": "programmatic", "purpose": "train", "eval_round": None, "eval_adapter_path": None},
            cid, parent, "challenger", i)
        yield ch
        ch_id = ch.event_id
        for s in range(self.samples):
            yield from self._sample(r, cid, ch_id, ctx, s, kept_ids)

    def _sample(self, r: int, cid: str, parent: str, ctx: dict, s: int, kept_ids: list[str]) -> Iterator[Message]:
        rng = self.rng
        code = CODE + f"# variant {rng.randrange(1 << 30)}\n"
        sol = self._envelope("solution.sampled", {
            "challenge_id": cid, "context": ctx, "sample_index": s, "n_samples": self.samples,
            "backend": "vllm", "model_id": "tiny-llama", "adapter": f"round-{r}" if r else None,
            "adapter_round": r or None, "sampling": {"temperature": 0.8, "top_p": 0.95, "max_tokens": 2048,
                                                     "seed": s}, "prompt_hash": "ab" * 8,
            "raw_output": f"```python\n{code}```"}, cid, parent, "solver", s)
        yield sol
        accepted = rng.random() < 0.9
        code_hash = hashlib.sha256(code.encode()).hexdigest()
        ext = self._envelope("solution.extracted", {
            "challenge_id": cid, "context": ctx, "sample_index": s, "accepted": accepted,
            "code": code if accepted else None, "code_hash": code_hash if accepted else None,
            "reason": None if accepted else "no_code_fence"}, cid, _id(sol), "extractor")
        yield ext
        if not accepted:
            return
        passed = rng.random() < min(0.9, 0.3 + 0.12 * r)
        speedup = rng.lognormvariate(0.2 + 0.15 * r, 0.4) if passed else None
        ver = self._envelope("solution.verified", {
            "challenge_id": cid, "context": ctx, "sample_index": s, "code": code, "code_hash": code_hash,
            "verifier_version": self.verifier_version, "passed": passed,
            "stage": "passed" if passed else rng.choice(["static", "compile", "correctness"]),
            "reasons": [] if passed else ["mismatch"], "device": "cuda", "isolation": "bwrap+uid",
            "perf_measured": passed, "timing": {"candidate_ms": 0.1, "naive_ms": 0.1 * (speedup or 1),
                                                "optimized_ms": 0.08, "spread": 0.02},
            "speedup_vs_naive": speedup, "speedup_vs_optimized": speedup and speedup * 0.8,
            "roofline_fraction": 0.4 if passed else None, "max_rel_error": 1e-6 if passed else None,
            "triton_launches": 1, "fingerprint": {"gpu": "H100"}}, cid, _id(ext), "verifier")
        yield ver
        yield self._curated(r, cid, ctx, s, code, code_hash, _id(ver), passed, speedup, kept_ids)

    def _curated(self, r: int, cid: str, ctx: dict, s: int, code: str, code_hash: str, verdict: str,
                 passed: bool, speedup: float | None, kept_ids: list[str]) -> Message:
        roll = self.rng.random()
        reason = ("failed:correctness" if not passed else "rule:library_call" if roll < 0.05
                  else f"duplicate_of:{verdict}" if roll < 0.15 else "below_top_fraction" if roll < 0.3
                  else "kept")
        hits = [{"rule": "library_call", "evidence": "torch.softmax"}] if reason.startswith("rule:") else []
        if reason == "kept":
            kept_ids.append(verdict)
        return self._envelope("sample.curated", {
            "challenge_id": cid, "verdict_event_id": verdict, "verifier_version": self.verifier_version,
            "kept": reason == "kept", "op": ctx["op"], "family": ctx["family"], "dtype": ctx["dtype"],
            "shape_bucket": "n:9-12", "code": code if passed else None, "code_hash": code_hash,
            "score": speedup, "rule_hits": hits, "reason": reason, "context": ctx, "sample_index": s},
            cid, verdict, "curator")

    def _training(self, r: int, kept_ids: list[str]) -> Iterator[Message]:
        tr = self._envelope("training.requested", {
            "round": r + 1, "new_sample_ids": kept_ids[:500], "replay_sample_ids": [],
            "dataset_hash": f"d{r}"}, f"round-{r + 1}", None, "curator")
        yield tr
        yield self._envelope("round.trained", {
            "round": r + 1, "adapter_path": f"var/adapters/round-{r + 1}", "base_model": "tiny-llama",
            "dataset_hash": f"d{r}", "metrics": {"loss": 1.0 / (r + 1)}, "eval_challenge_ids": []},
            f"round-{r + 1}", _id(tr), "trainer")
        yield self._envelope("round.evaluated", {
            "round": r + 1, "adapter_path": f"var/adapters/round-{r + 1}",
            "eval_pass_rates": {"all": min(1.0, 0.3 + 0.12 * (r + 1))},
            "previous_pass_rates": {"all": min(1.0, 0.3 + 0.12 * r)}, "promoted": True, "reason": "better",
            "baseline_round": r, "eval_counts": {"all": 64}}, f"round-{r + 1}", None, "evaluator")


def _id(msg: Message) -> str:
    return msg.event_id


def generate(n_events: int, seed: int = 0, challenges_per_round: int = 2_000) -> Iterator[Message]:
    """About `n_events` messages (whole rounds; stops at the first round boundary past n)."""
    fly = Flywheel(seed)
    produced, r = 0, 0
    while produced < n_events:
        for msg in fly.round(r, challenges_per_round):
            produced += 1
            yield msg
        r += 1


def check_sample(messages: list[Message], stride: int = 97) -> int:
    """Decode every `stride`-th message with the real codec; return how many were checked."""
    for msg in messages[::stride]:
        event = decode(msg.value)
        if EVENTS[event.type].topic != msg.topic:
            raise AssertionError(f"{event.type} generated for topic {msg.topic}")
    return len(messages[::stride])
