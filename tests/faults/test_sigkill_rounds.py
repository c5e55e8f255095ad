"""SIGKILL of the round-loop services mid-stream: challenger, solver, trainer, evaluator.

Real `kz service NAME` processes (and the extractor); the solver samples the locally
built tiny Llama and the trainer fits LoRA adapters on it, on CPU. The test plays the
curator's part: it publishes kept samples and two training requests. Three rounds are
started; while they flow, each of the four services is SIGKILLed once and restarted:

- the challenger right after round 2 was asked for (round 3 still to come);
- the solver once round 2's challenges are waiting for it;
- the trainer as round 2's training request reaches it, and the evaluator (round 1
  decided) with round 2's evaluation still to come.

Afterwards: every round.started has exactly its challenges; every challenge, train or
eval, exactly n_samples samples (indices 0..n-1) and each sample one extraction; each
training request exactly one round.trained, its adapter on disk and its two eval
challenges (candidate and incumbent arm) sampled with the right adapter; each trained
round exactly one round.evaluated; round 3 is sampled with round 2's promoted adapter
(the restarted solver rebuilt its state); no event id twice; every malformed record
dead-lettered by each consumer of its topic.
"""

from __future__ import annotations

import base64
import hashlib
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from kz_common.config import Settings
from kz_common.kernels import reference_solution
from kz_common.ops import shape_bucket
from schemas import (
    AnyEnvelope,
    RoundStarted,
    SampleCurated,
    TrainingRequested,
    make_event,
    new_event_id,
)
from tests.faults.chaos import Kill, kill_and_restart, produced_by
from tests.faults.pipeline import (
    ORIGIN,
    Services,
    assert_unique_ids,
    context,
    dead_letters,
    drained,
    events,
    publish,
    publish_events,
    summary,
)

pytestmark = [pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(300)]
N_CHALLENGES, N_SAMPLES = 2, 2
GROUPS: dict[str, tuple[str, ...]] = {
    "challenger": ("control", "curriculum"), "solver": ("challenges", "rounds"),
    "extractor": ("solutions",), "trainer": ("curated", "training-requests", "rounds"),
    "evaluator": ("challenges", "solutions", "extracted", "verified", "rounds"),
}
OUTPUTS = {"challenger": ("challenges",), "solver": ("solutions",),
           "trainer": ("rounds", "challenges"), "evaluator": ("rounds",)}
# Malformed records by topic; each consumer of the topic must dead-letter each one.
BAD = {"control": b"\x00 not json", "rounds": b"[1, 2, 3]",
       "training-requests": orjson.dumps({"event_id": "x", "type": "training.requested", "payload": {}})}


def service_config(tiny_model: Path, adapters: Path) -> dict[str, dict[str, Any]]:
    return {
        "challenger": {"cpu_mode": True, "device": "cpu"},
        "solver": {"model": str(tiny_model), "device": "cpu", "n_samples": N_SAMPLES, "max_tokens": 16,
                   "few_shot": 0},
        "trainer": {"base_model": str(tiny_model), "adapters_dir": str(adapters), "few_shot": 0,
                    "eval_shape_source": "cpu", "eval_ops_per_type": 1,
                    "train": {"max_steps": 2, "batch_size": 1, "epochs": 1, "lr": 5e-3, "r": 4, "alpha": 8,
                              "dropout": 0.0, "device": "cpu"}},
        # two eval samples per arm: enough for a decision (0 vs 0 is no regression: promoted)
        "evaluator": {"min_samples": N_SAMPLES},
    }


def start_round(r: int) -> AnyEnvelope:
    return make_event(RoundStarted(round=r, n_challenges=N_CHALLENGES, seed=r), producer=ORIGIN,
                      correlation_id=f"round-{r}")


def curated(r: int, n: int = 2) -> tuple[list[AnyEnvelope], AnyEnvelope]:
    """Kept `add` samples and the training request of round `r` naming them (the curator's part)."""
    code = reference_solution("add")
    ctx = context("add", r)
    samples = []
    for i in range(n):
        cid = f"kept-r{r}-{i}"
        sid = new_event_id()  # the sample id: the id of the verdict the curator kept
        payload = SampleCurated(
            challenge_id=cid, verdict_event_id=sid, verifier_version="fault-test", kept=True, op="add",
            family=ctx.family, dtype=ctx.dtype, shape_bucket=shape_bucket(ctx.shape_range, "add"),
            code=code, code_hash=hashlib.sha256(code.encode()).hexdigest(), score=1.0, reason="kept",
            context=ctx, sample_index=0)
        samples.append(make_event(payload, producer=ORIGIN, correlation_id=cid))
    ids = [s.payload.verdict_event_id for s in samples]  # type: ignore[union-attr]
    request = TrainingRequested(round=r, new_sample_ids=ids, replay_sample_ids=[],
                                dataset_hash=hashlib.sha256("|".join(ids).encode()).hexdigest()[:16])
    return samples, make_event(request, producer=ORIGIN, correlation_id=f"train-{r}")


def of_type(s: Settings, topic: str, type_: str) -> list[dict[str, Any]]:
    return events(s, topic, type_, valid=True)


def test_round_loop_services_killed_mid_stream(fault_settings: Settings, tiny_model: Path,
                                               tmp_path: Path) -> None:
    s = fault_settings
    kills: list[Kill] = []
    adapters = tmp_path / "adapters"

    def rounds_done(kind: str, r: int) -> bool:
        return any(d["payload"]["round"] == r for d in of_type(s, "rounds", kind))

    def kill(name: str, upstream: tuple[str, ...] = (), unpublished: int = 0) -> None:
        kills.append(kill_and_restart(svc, s, name, GROUPS[name], OUTPUTS[name],
                                      {u: GROUPS[u] for u in upstream}, unpublished))

    def until(what: str, predicate: Any, timeout_s: float = 120) -> None:
        svc.wait(predicate, timeout_s, lambda: f"{what}; {summary(s)}")

    with Services(s, tmp_path, service_config(tiny_model, adapters)) as svc:
        svc.start(*GROUPS)
        for name in GROUPS:
            svc.wait_consuming(name, timeout_s=120)
        for topic, value in BAD.items():
            publish(s, topic, [value], [b"junk"])
        kept1, request1 = curated(1)
        publish_events(s, "curated", kept1)
        publish_events(s, "training-requests", [request1])
        publish_events(s, "control", [start_round(1)])

        until("round 1's challenges", lambda: produced_by(s, "challenger", OUTPUTS["challenger"]) >= 2)
        publish_events(s, "control", [start_round(2)])
        kill("challenger", unpublished=1)  # round 3 is still to come

        until("round 2's challenges and round 1's samples", lambda: len(of_type(
            s, "challenges", "challenge.created")) >= 2 * N_CHALLENGES and produced_by(s, "solver", ("solutions",)))
        kill("solver", upstream=("challenger",), unpublished=1)  # round 3 is still to come

        until("round 1 evaluated", lambda: rounds_done("round.evaluated", 1), 180)
        kept2, request2 = curated(2)
        publish_events(s, "curated", kept2)
        publish_events(s, "training-requests", [request2])
        kill("trainer")  # round 2's request is waiting for it
        kill("evaluator", upstream=("trainer", "solver", "extractor"))  # round 2's eval is to come

        until("round 2 evaluated", lambda: rounds_done("round.evaluated", 2), 180)
        publish_events(s, "control", [start_round(3)])
        until("everything to drain", lambda: len(of_type(s, "challenges", "challenge.created")) >= 3 * N_CHALLENGES
              + 4 and drained(s, GROUPS), 120)
        svc.check()

    assert [k.service for k in kills] == ["challenger", "solver", "trainer", "evaluator"]
    assert all(k.mid_stream for k in kills), kills
    assert_unique_ids(s, ("control", "challenges", "solutions", "extracted", "rounds", "dead-letters"))

    challenges = of_type(s, "challenges", "challenge.created")
    train = [c for c in challenges if c["payload"]["purpose"] == "train"]
    assert Counter(c["payload"]["round"] for c in train) == {1: N_CHALLENGES, 2: N_CHALLENGES, 3: N_CHALLENGES}
    assert all(c["producer"]["service"] == "challenger" for c in train)

    solutions = of_type(s, "solutions", "solution.sampled")
    per_challenge: dict[str, list[int]] = {}
    for x in solutions:
        per_challenge.setdefault(x["payload"]["challenge_id"], []).append(x["payload"]["sample_index"])
    assert {cid: sorted(ix) for cid, ix in per_challenge.items()} == {
        c["payload"]["challenge_id"]: list(range(N_SAMPLES)) for c in challenges}
    extractions = Counter(x["causation_id"] for x in of_type(s, "extracted", "solution.extracted"))
    assert extractions == Counter({x["event_id"]: 1 for x in solutions})

    trained = of_type(s, "rounds", "round.trained")
    assert sorted(t["payload"]["round"] for t in trained) == [1, 2]
    for t in trained:
        p = t["payload"]
        assert (Path(p["adapter_path"]) / "manifest.json").is_file()
        arms = {c["payload"]["eval_round"] for c in challenges if c["payload"]["challenge_id"]
                in p["eval_challenge_ids"]}
        assert len(p["eval_challenge_ids"]) == 2 and p["round"] in arms, (p, arms)
    for x in solutions:
        ctx = x["payload"]["context"]
        if ctx["purpose"] == "eval":  # the candidate arm samples its round's adapter, arm 0 the base
            assert x["payload"]["adapter_round"] == (ctx["eval_round"] or None), x["payload"]

    evaluated = of_type(s, "rounds", "round.evaluated")
    assert sorted((e["payload"]["round"], e["payload"]["promoted"]) for e in evaluated) == [(1, True), (2, True)], [
        e["payload"]["reason"] for e in evaluated]
    round3 = [x["payload"]["adapter_round"] for x in solutions
              if x["payload"]["context"]["round"] == 3 and x["payload"]["context"]["purpose"] == "train"]
    assert round3 == [2] * N_CHALLENGES * N_SAMPLES

    consumers = {topic: [n for n, ins in GROUPS.items() if topic in ins] for topic in BAD}
    want = Counter((c, BAD[topic]) for topic in BAD for c in consumers[topic])
    got = Counter((x["consumer"], base64.b64decode(x["original_b64"])) for x in dead_letters(s))
    assert got == want, got
