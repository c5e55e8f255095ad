"""SolverCore on the tiny model: reproducible samples, adapter hot-swap, eval adapters, failures."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from kz_common.core import ProcessingError
from kz_common.llm.backends import AdapterRef, sample_seed
from kz_common.llm.backends.hf import TransformersBackend
from kz_common.llm.backends.openai_http import OpenAIBackend
from kz_common.llm.server import make_server
from schemas import Producer, make_event
from schemas.events import (
    ChallengeContext,
    RoundEvaluated,
    RoundStarted,
    RoundTrained,
    SolutionSampled,
)
from services.challenger import ChallengerCore
from services.challenger.config import ChallengerConfig
from services.solver import SolverCore, build_prompt, challenge_seed
from services.solver.config import SolverConfig
from services.solver.exceptions import AdapterUnknown, SamplingFailed
from kz_common.prompts import prompt_hash

KZ = Producer(service="kz", version="1")
CFG = SolverConfig(n_samples=3, max_tokens=16, few_shot=0, temperature=0.8)
GREEDY = CFG.model_copy(update={"temperature": 0.0, "n_samples": 1})


def challenges(n: int = 2):
    core = ChallengerCore(ChallengerConfig(cpu_mode=True, ops=["softmax", "add"]))
    rs = make_event(RoundStarted(round=0, n_challenges=n, seed=3), producer=KZ, correlation_id="r0")
    return core.process(rs)


def ev(payload, cid: str = "rounds"):
    return make_event(payload, producer=KZ, correlation_id=cid)


@pytest.fixture(scope="module")
def backend(tiny_model: Path) -> TransformersBackend:
    return TransformersBackend(tiny_model, device="cpu")


def test_samples_record_everything_and_reproduce(backend: TransformersBackend) -> None:
    [ch, _] = challenges()
    core = SolverCore(backend, CFG)
    out = core.process(ev(ch, ch.challenge_id))
    assert [s.sample_index for s in out] == [0, 1, 2] and all(isinstance(s, SolutionSampled) for s in out)
    base = challenge_seed(ch.challenge_id)
    for j, s in enumerate(out):
        assert s.sampling.seed == sample_seed(base, j) and s.n_samples == 3
        assert (s.backend, s.model_id, s.adapter, s.adapter_round) == ("transformers", backend.model_id, None, None)
        assert s.prompt_hash == prompt_hash(build_prompt(ch, few_shot=0, seed_key=ch.challenge_id))
        assert s.context == ChallengeContext.of(ch)
    assert SolverCore(backend, CFG).process(ev(ch, ch.challenge_id)) == out  # reprocessing reproduces
    salted = SolverCore(backend, CFG.model_copy(update={"seed_salt": "b"})).process(ev(ch, ch.challenge_id))
    assert [s.sampling.seed for s in salted] != [s.sampling.seed for s in out]


def test_promotion_hot_swaps_the_adapter(backend: TransformersBackend, lora_adapter: Path) -> None:
    [ch, _] = challenges()
    core = SolverCore(backend, GREEDY)
    before = core.process(ev(ch, ch.challenge_id))
    core.process(ev(RoundTrained(round=1, adapter_path=str(lora_adapter), base_model="tiny",
                                 dataset_hash="d", metrics={})))
    assert core.process(ev(ch, ch.challenge_id)) == before  # trained is not yet promoted
    rejected = RoundEvaluated(round=1, adapter_path=str(lora_adapter), eval_pass_rates={},
                              previous_pass_rates={}, promoted=False, reason="worse")
    core.process(ev(rejected))
    assert core.promoted is None
    core.process(ev(rejected.model_copy(update={"promoted": True, "reason": "better"})))
    [after] = core.process(ev(ch, ch.challenge_id))
    assert (after.adapter, after.adapter_round) == ("round-1", 1)
    prompt = build_prompt(ch, few_shot=0, seed_key=ch.challenge_id)
    tuned = backend.generate([prompt], after.sampling, 1, AdapterRef.for_round(1, lora_adapter))
    assert after.raw_output == tuned[0][0] != before[0].raw_output


def test_eval_challenges_use_the_candidate_under_evaluation(backend: TransformersBackend,
                                                             lora_adapter: Path) -> None:
    [ch, _] = challenges()
    core = SolverCore(backend, GREEDY)
    eval_1 = ch.model_copy(update={"purpose": "eval", "eval_round": 1})
    with pytest.raises(AdapterUnknown, match="no round.trained") as info:
        core.process(ev(eval_1, ch.challenge_id))
    assert isinstance(info.value, ProcessingError)  # dead-lettered by the adapter
    carried = eval_1.model_copy(update={"eval_adapter_path": str(lora_adapter)})
    [s] = core.process(ev(carried, ch.challenge_id))
    assert (s.adapter, s.adapter_round) == ("round-1", 1)
    core.observe(ev(RoundTrained(round=1, adapter_path=str(lora_adapter), base_model="tiny",
                                 dataset_hash="d", metrics={})))
    assert core.process(ev(eval_1, ch.challenge_id)) == [s]
    assert core.promoted is None  # evaluating a candidate does not promote it
    [base] = core.process(ev(eval_1.model_copy(update={"eval_round": 0}), ch.challenge_id))
    assert base.adapter is None
    with pytest.raises(AdapterUnknown, match="no eval_round"):
        core.process(ev(eval_1.model_copy(update={"eval_round": None}), ch.challenge_id))


def test_observe_does_not_sample_challenges(backend: TransformersBackend) -> None:
    [ch, _] = challenges()
    core = SolverCore(backend, CFG)
    assert core.observe(ev(ch, ch.challenge_id)) is None


def test_backend_failure_dead_letters_the_challenge() -> None:
    [ch, _] = challenges()
    dead = OpenAIBackend("http://127.0.0.1:9/v1", "tiny", timeout_s=2)
    with pytest.raises(SamplingFailed, match="openai backend failed on r0-"):
        SolverCore(dead, CFG).process(ev(ch, ch.challenge_id))


def test_openai_backend_reproduces_the_same_samples(backend: TransformersBackend,
                                                     lora_adapter: Path) -> None:
    server = make_server(backend, "127.0.0.1", 0, served_name="tiny")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        remote = OpenAIBackend(f"http://127.0.0.1:{server.server_address[1]}/v1", "tiny")
        promoted = RoundEvaluated(round=2, adapter_path=str(lora_adapter), eval_pass_rates={},
                                  previous_pass_rates={}, promoted=True, reason="better")
        for ch in challenges():
            local_core, http_core = SolverCore(backend, CFG), SolverCore(remote, CFG)
            for core in (local_core, http_core):
                core.process(ev(promoted))
            a = local_core.process(ev(ch, ch.challenge_id))
            b = http_core.process(ev(ch, ch.challenge_id))
            assert [s.raw_output for s in a] == [s.raw_output for s in b]
            assert {s.adapter for s in b} == {"round-2"} and {s.backend for s in b} == {"openai"}
    finally:
        server.shutdown()
        server.server_close()
