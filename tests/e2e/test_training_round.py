"""End to end on the embedded broker: curated samples -> training request -> adapter saved ->
frozen-point evaluation -> promotion event -> the solver samples with the promoted adapter.

Six real services (solver, extractor, verifier, curator, trainer, evaluator), each built by
its real factory (`kz_common.registry.build_core`) and run by the real `ServiceRunner` in one
event loop on a background thread, talk only through the test broker. Nothing is mocked.

Where the training data comes from: the tiny random model never writes a passing kernel, so
the train inputs enter the pipeline one hop after the LLM, as `SolutionExtracted` events whose
code is the hand-written reference Triton solution of the op (`kz_common.kernels`) for a problem
rendered from the op catalogue. The real verifier runs them on CPU (Triton interpreter, sandbox),
so the `SolutionVerified` verdicts the curator curates are real verdicts, not constructed ones.

The decisions (services/trainer/stats.py) are real, made on real eval samples. Round 1 runs the
default configuration: the trainer re-measures the incumbent (the base model) side by side, and
the default rule "no_regression" promotes unless the candidate is significantly worse; 0 vs 0
with the tiny model is z = 0, no regression, so round 1 is promoted. Round 2 exercises rejection:
before its samples go in, the evaluator's rule is tightened to the opt-in "z_test" (a stricter
deployment: a significant gain is required), so round 2, measured side by side against round 1's
adapter, 0 vs 0, is rejected, and the solver must not switch to it.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

import pytest

from kz_common.admin import create_topics
from kz_common.config import Settings
from kz_common.core import ServiceCore
from kz_common.kernels import available_ops, reference_solution
from kz_common.llm.backends import AdapterRef, sample_seed
from kz_common.llm.backends.hf import TransformersBackend
from kz_common.llm.tiny import build_tiny_model
from kz_common.ops import cpu_test_range, get_op, render_problem
from kz_common.processing import InRecord, OutMessage
from kz_common.prompts import build_prompt, prompt_hash
from kz_common.registry import build_core
from kz_common.runner import ServiceRunner
from schemas import (
    TOPICS,
    ChallengeContext,
    ChallengeCreated,
    Producer,
    Sampling,
    SolutionExtracted,
    Target,
    make_event,
    peek_event_id,
)
from services.extractor.extract import code_hash
from services.solver.core import challenge_seed
from services.trainer.evaluator import EvaluatorCore
from tests.kz_common.harness import publish_events, read

pytestmark = [pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(300)]

SERVICES = ("solver", "extractor", "verifier", "curator", "trainer", "evaluator")
ORIGIN = Producer(service="e2e-test", version="1")
ROUND1_OPS = ("add", "softmax")  # elementwise, softmax: the two held-out task types of round 1
ROUND2_OPS = ("row_sum", "rmsnorm")  # reduction, normalization
N_SAMPLES = 2
TRAIN_STEPS = 4


# ---------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    texts = [reference_solution(op) for op in available_ops()]
    return build_tiny_model(tmp_path_factory.mktemp("models"), texts, vocab_size=512, hidden=64, layers=1)


@pytest.fixture
def e2e_settings(broker: str, tiny_model: Path, tmp_path: Path, verifier_cache: Path) -> Settings:
    services: dict[str, dict[str, Any]] = {
        "solver": {"model": str(tiny_model), "device": "cpu", "n_samples": N_SAMPLES,
                   "max_tokens": 32, "few_shot": 0},
        "verifier": {"device": "cpu", "cache_dir": str(verifier_cache)},
        # CPU verdicts carry no timing; windows of two verdicts, train on every two kept samples.
        "curator": {"require_perf": False, "window_verdicts": 2, "keep_fraction": 1.0,
                    "train_threshold": 2},
        "trainer": {"base_model": str(tiny_model), "adapters_dir": str(tmp_path / "adapters"),
                    "few_shot": 0, "eval_shape_source": "cpu", "eval_ops_per_type": 1,
                    # a high rate, so four steps move the adapter measurably away from the base
                    "train": {"max_steps": TRAIN_STEPS, "batch_size": 1, "epochs": 2, "lr": 5e-3, "r": 8,
                              "alpha": 16, "dropout": 0.0, "device": "cpu"}},
        "evaluator": {"min_samples": 4},
    }
    s = Settings(kafka={"bootstrap_servers": broker, "topic_prefix": f"t{uuid.uuid4().hex[:8]}.",
                        "partitions": 3},
                 paths={"data_dir": tmp_path}, services=services)
    create_topics(s.kafka, broker)
    return s


# ---------------------------------------------------------------------------- running services


class Pipeline:
    """The real services, each in a ServiceRunner, in one event loop on a background thread."""

    def __init__(self, settings: Settings, names: tuple[str, ...]) -> None:
        self.settings = settings
        self.cores: dict[str, ServiceCore] = {n: build_core(n, settings) for n in names}
        self.consumed: dict[str, set[str]] = {n: set() for n in names}  # event ids each has finished
        self._lock = threading.Lock()
        self._errors: list[BaseException] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, name="e2e-services", daemon=True)
        self._started = threading.Event()

    def _hook(self, name: str) -> Callable[[list[InRecord], list[OutMessage]], None]:
        def on_batch(records: list[InRecord], _outs: list[OutMessage]) -> None:
            with self._lock:
                self.consumed[name].update(i for r in records if (i := peek_event_id(r.value)))
        return on_batch

    def _main(self) -> None:
        async def run() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            bootstrap = self.settings.kafka.bootstrap_servers
            assert bootstrap
            tasks = [asyncio.create_task(ServiceRunner(core, self.settings, bootstrap,
                                                       on_batch=self._hook(name)).run(self._stop))
                     for name, core in self.cores.items()]
            self._started.set()
            for res in await asyncio.gather(*tasks, return_exceptions=True):
                if isinstance(res, BaseException):
                    self._errors.append(res)
            self._stop.set()

        try:
            asyncio.run(run())
        except BaseException as exc:  # noqa: BLE001 - surfaced by check()
            self._errors.append(exc)
        finally:
            self._started.set()

    def __enter__(self) -> Self:
        self._thread.start()
        self._started.wait(60)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(60)
        close = getattr(self.cores.get("verifier"), "close", None)
        if close:
            close()

    def check(self) -> None:
        if self._errors:
            raise AssertionError(f"a service stopped: {self._errors!r}") from self._errors[0]
        if not self._thread.is_alive():
            raise AssertionError("the service thread exited")

    def has_consumed(self, name: str, event_id: str) -> bool:
        with self._lock:
            return event_id in self.consumed[name]

    def until(self, predicate: Callable[[], Any], what: str, timeout_s: float = 120.0) -> Any:
        """Poll `predicate` until it returns something truthy; fail if a service dies first."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.check()
            got = predicate()
            if got:
                return got
            time.sleep(0.3)
        raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}; log: {self.describe()}")

    def describe(self) -> dict[str, int]:
        """Events on the log by topic and type (what reached where, for a failure message)."""
        out: dict[str, int] = {}
        for topic in TOPICS:
            for d in read(self.settings, topic):
                key = f"{topic}:{d['type']}"
                out[key] = out.get(key, 0) + 1
        return out


# ---------------------------------------------------------------------------- events


def context(op: str, rnd: int) -> ChallengeContext:
    spec = get_op(op)
    rng = cpu_test_range(op)
    return ChallengeContext(
        op=op, family=spec.family, dtype="float32", shape_range=rng,
        target=Target(kind="naive_multiple", value=1.0), constraints=["no_optimized_library_call"],
        difficulty=0, round=rnd, problem_source=render_problem(op, "float32", rng, device="cpu"),
    )


def reference_extraction(op: str, rnd: int) -> Any:
    """A SolutionExtracted carrying the reference kernel of `op`: what a perfect solver would give."""
    code = reference_solution(op)
    payload = SolutionExtracted(challenge_id=f"ref-r{rnd}-{op}", context=context(op, rnd), sample_index=0,
                                accepted=True, code=code, code_hash=code_hash(code), reason=None)
    return make_event(payload, producer=ORIGIN, correlation_id=payload.challenge_id)


def probe_challenge(op: str, rnd: int) -> Any:
    """A train challenge published after a decision: whichever adapter samples it is the solver's."""
    ctx = context(op, rnd)
    payload = ChallengeCreated(challenge_id=f"probe-r{rnd}-{op}", generator="programmatic",
                               **ctx.model_dump(exclude={"purpose", "eval_round"}))
    return make_event(payload, producer=ORIGIN, correlation_id=payload.challenge_id)


def payloads(settings: Settings, topic: str, type_: str) -> list[dict[str, Any]]:
    return [d["payload"] for d in read(settings, topic) if d["type"] == type_]


def events_of(settings: Settings, topic: str, type_: str) -> list[dict[str, Any]]:
    return [d for d in read(settings, topic) if d["type"] == type_]


def evaluated(settings: Settings, rnd: int) -> dict[str, Any] | None:
    found = [d for d in events_of(settings, "rounds", "round.evaluated") if d["payload"]["round"] == rnd]
    assert len(found) <= 1, f"round {rnd} decided {len(found)} times"
    return found[0] if found else None


def samples_of(settings: Settings, challenge_id: str) -> list[dict[str, Any]]:
    got = [p for p in payloads(settings, "solutions", "solution.sampled") if p["challenge_id"] == challenge_id]
    return sorted(got, key=lambda p: p["sample_index"]) if len(got) >= N_SAMPLES else []


# ---------------------------------------------------------------------------- the test


def test_training_round_promotes_an_adapter_the_solver_then_samples_with(e2e_settings: Settings) -> None:
    s = e2e_settings
    adapters = Path(s.services["trainer"]["adapters_dir"])
    with Pipeline(s, SERVICES) as p:
        # ---- round 1: two reference kernels -> real verdicts -> curated -> training requested
        refs1 = [reference_extraction(op, 1) for op in ROUND1_OPS]
        publish_events(s, "extracted", refs1)
        ev1 = p.until(lambda: evaluated(s, 1), "round 1's evaluation", timeout_s=120)

        verdicts = {v["challenge_id"]: v for v in payloads(s, "verified", "solution.verified")
                    if v["context"]["purpose"] == "train"}
        for ref in refs1:
            v = verdicts[ref.payload.challenge_id]
            assert (v["passed"], v["stage"], v["device"]) == (True, "passed", "cpu"), v["reasons"]
        verdict_ids1 = {d["event_id"] for d in events_of(s, "verified", "solution.verified")
                        if d["payload"]["challenge_id"] in {r.payload.challenge_id for r in refs1}}
        kept1 = [c for c in payloads(s, "curated", "sample.curated") if c["kept"]]
        assert {c["verdict_event_id"] for c in kept1} == verdict_ids1
        assert all(c["reason"] == "kept" for c in kept1)
        [req1] = payloads(s, "training-requests", "training.requested")
        assert req1["round"] == 1 and set(req1["new_sample_ids"]) == verdict_ids1

        # ---- the adapter: peft files + manifest of exactly the requested set
        [trained1] = [t for t in payloads(s, "rounds", "round.trained") if t["round"] == 1]
        adapter1 = adapters / "round-0001"
        assert trained1["adapter_path"] == str(adapter1) and trained1["dataset_hash"] == req1["dataset_hash"]
        assert {"adapter_config.json", "adapter_model.safetensors", "manifest.json"} <= {
            f.name for f in adapter1.iterdir()}
        manifest = json.loads((adapter1 / "manifest.json").read_text())
        assert manifest["dataset_hash"] == req1["dataset_hash"] and manifest["round"] == 1
        assert set(manifest["sample_ids"]) == verdict_ids1
        assert trained1["metrics"]["steps"] == TRAIN_STEPS and trained1["metrics"]["examples"] == 2

        # ---- the frozen-point evaluation: one held-out task per type seen, sampled with the candidate
        # and, side by side (remeasure_incumbent, the default), with the incumbent: the base model
        evals1 = [c for c in payloads(s, "challenges", "challenge.created") if c["purpose"] == "eval"]
        assert sorted(c["challenge_id"] for c in evals1) == sorted(trained1["eval_challenge_ids"])
        assert {(c["family"], c["eval_round"], c["eval_adapter_path"]) for c in evals1} == {
            ("elementwise", 1, str(adapter1)), ("softmax", 1, str(adapter1)),
            ("elementwise", 0, None), ("softmax", 0, None)}
        for c in evals1:
            sampled = samples_of(s, c["challenge_id"])
            arm = ("round-1", 1) if c["eval_round"] == 1 else (None, None)
            assert [(x["adapter"], x["adapter_round"]) for x in sampled] == [arm] * N_SAMPLES

        # ---- the promotion event: the default rule, equal rates (0 vs 0) are no regression
        d1 = ev1["payload"]
        assert d1["promoted"] is True, d1["reason"]
        assert d1["adapter_path"] == str(adapter1) and d1["baseline_round"] == 0
        assert "no significant regression: z=0.00 > -1.645" in d1["reason"]
        types1 = {"elementwise/float32": N_SAMPLES, "softmax/float32": N_SAMPLES}
        assert d1["eval_counts"] == types1
        assert d1["eval_pass_rates"] == d1["previous_pass_rates"] == dict.fromkeys(types1, 0.0)

        # ---- after the promotion the solver samples train challenges with round 1's adapter
        p.until(lambda: p.has_consumed("solver", ev1["event_id"]), "the solver to consume the promotion")
        probe1 = probe_challenge("silu", 2)
        publish_events(s, "challenges", [probe1])
        after_promotion = p.until(lambda: samples_of(s, probe1.payload.challenge_id), "the probe's samples")
        assert [(x["adapter"], x["adapter_round"]) for x in after_promotion] == [("round-1", 1)] * N_SAMPLES

        # ---- round 2: two more kernels -> a second adapter, measured against round 1 -> rejected.
        # The trainer must know round 1 is the incumbent, so that it re-measures round 1's adapter.
        p.until(lambda: p.has_consumed("trainer", ev1["event_id"]), "the trainer to consume the promotion")
        # A stricter deployment for round 2: promote only on a significant gain. The core reads its
        # config per decision, and nothing of round 2 exists before refs2 are published.
        evaluator = p.cores["evaluator"]
        assert isinstance(evaluator, EvaluatorCore) and evaluator.cfg.rule == "no_regression"
        evaluator.cfg = evaluator.cfg.model_copy(update={"rule": "z_test"})
        refs2 = [reference_extraction(op, 2) for op in ROUND2_OPS]
        publish_events(s, "extracted", refs2)
        ev2 = p.until(lambda: evaluated(s, 2), "round 2's evaluation", timeout_s=120)
        d2 = ev2["payload"]
        reqs = {r["round"]: r for r in payloads(s, "training-requests", "training.requested")}
        assert sorted(reqs) == [1, 2]
        verdict_ids2 = {d["event_id"] for d in events_of(s, "verified", "solution.verified")
                        if d["payload"]["challenge_id"] in {r.payload.challenge_id for r in refs2}}
        assert set(reqs[2]["new_sample_ids"]) == verdict_ids2
        assert set(reqs[2]["replay_sample_ids"]) <= verdict_ids1  # replay draws from round 1's samples only
        assert json.loads((adapters / "round-0002" / "manifest.json").read_text())["dataset_hash"] == \
            reqs[2]["dataset_hash"]
        assert d2["promoted"] is False and d2["baseline_round"] == 1, d2["reason"]
        # decided by the test statistic, not by missing samples: equal rates are no significant gain
        assert "no significant gain: z=0.00 < 1.645" in d2["reason"]
        # measured side by side: the same held-out types for the candidate and for round 1's adapter
        assert set(d2["previous_pass_rates"]) == set(d2["eval_pass_rates"]) >= set(types1)
        # round 2's eval set was sampled with round 2's candidate, its re-measurement with round 1's
        [trained2] = [t for t in payloads(s, "rounds", "round.trained") if t["round"] == 2]
        evals2 = {c["challenge_id"]: c for c in payloads(s, "challenges", "challenge.created")
                  if c["purpose"] == "eval" and c["round"] == 2}
        assert sorted(evals2) == sorted(trained2["eval_challenge_ids"])
        assert {c["eval_round"] for c in evals2.values()} == {1, 2}
        for cid, c in evals2.items():
            sampled = samples_of(s, cid)
            arm = (f"round-{c['eval_round']}", c["eval_round"])
            assert [(x["adapter"], x["adapter_round"]) for x in sampled] == [arm] * N_SAMPLES

        # ---- the rejected round is never swapped in: the solver keeps sampling with round 1
        p.until(lambda: p.has_consumed("solver", ev2["event_id"]), "the solver to consume the rejection")
        probe2 = probe_challenge("gelu", 3)
        publish_events(s, "challenges", [probe2])
        after_rejection = p.until(lambda: samples_of(s, probe2.payload.challenge_id), "probe 2's samples")
        assert [(x["adapter"], x["adapter_round"]) for x in after_rejection] == [("round-1", 1)] * N_SAMPLES

        assert read(s, "dead-letters") == []

    # ---- the solver really generated with round 1's weights: an independent backend loading the
    # adapter reproduces its samples exactly, and the base model alone does not.
    cfg = s.services["solver"]
    prompt = build_prompt(probe1.payload, few_shot=cfg["few_shot"], seed_key=probe1.payload.challenge_id)
    assert {x["prompt_hash"] for x in after_promotion} == {prompt_hash(prompt)}
    base_seed = challenge_seed(probe1.payload.challenge_id)
    assert [x["sampling"]["seed"] for x in after_promotion] == [sample_seed(base_seed, j) for j in range(N_SAMPLES)]
    sampling = Sampling.model_validate({**after_promotion[0]["sampling"], "seed": base_seed})
    fresh = TransformersBackend(cfg["model"], device="cpu")
    [tuned] = fresh.generate([prompt], sampling, N_SAMPLES, AdapterRef.for_round(1, adapter1))
    [plain] = fresh.generate([prompt], sampling, N_SAMPLES, None)
    recorded = [x["raw_output"] for x in after_promotion]
    assert recorded == tuned
    assert recorded != plain
