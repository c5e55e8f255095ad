"""ChallengerCore and CurriculumCore on real events; the LLM generator's retry + dead-letter path."""

from __future__ import annotations

import base64
import itertools
import math
from pathlib import Path

import orjson
import pytest

from kz_common.core import ProcessingError
from kz_common.llm.backends.hf import TransformersBackend
from kz_common.ops import get_op, render_problem
from kz_common.processing import BatchProcessor, InRecord
from schemas import Producer, decode, encode, make_event
from schemas.events import (
    ChallengeContext,
    ChallengeCreated,
    CurriculumAdjusted,
    RoundStarted,
    SolutionVerified,
)
from services.challenger import ChallengerCore, CurriculumCore
from services.challenger.catalogue import Catalogue
from services.challenger.config import ChallengerConfig, CurriculumConfig
from services.challenger.exceptions import ChallengerConfigError, GenerationFailed, InvalidProposal
from services.challenger.llm_generator import parse_proposal
from services.challenger.signatures import ChallengeSignature, is_near_duplicate

CONTROL = Producer(service="kz", version="1")
CPU = ChallengerConfig(cpu_mode=True)


def started(round_: int = 0, n: int = 12, seed: int = 7):
    return make_event(RoundStarted(round=round_, n_challenges=n, seed=seed), producer=CONTROL,
                      correlation_id=f"round-{round_}")


def test_same_seed_same_challenges() -> None:
    a = ChallengerCore(CPU).process(started(seed=7))
    b = ChallengerCore(CPU).process(started(seed=7))
    c = ChallengerCore(CPU).process(started(seed=8))
    assert len(a) == 12 and a == b
    assert [x.challenge_id for x in a] != [x.challenge_id for x in c]
    assert len({x.challenge_id for x in a}) == 12 and all(x.challenge_id.startswith("r0-") for x in a)


def test_cpu_mode_challenges_are_complete_and_interpreter_sized() -> None:
    for ch in ChallengerCore(CPU).process(started(n=30)):
        assert isinstance(ch, ChallengeCreated)
        op = get_op(ch.op)
        assert ch.family == op.family and ch.dtype in ("float32", "float16")
        assert all(op.cpu_range[d][0] <= lo <= hi <= op.cpu_range[d][1] for d, (lo, hi) in ch.shape_range.items())
        assert ch.target.kind == "naive_multiple" and ch.target.value == 1.5 and ch.difficulty == 0
        assert ch.constraints == ["no_optimized_library_call"] and ch.generator == "programmatic"
        assert ch.problem_source == render_problem(ch.op, ch.dtype, ch.shape_range, device="cpu")
        assert decode(encode(make_event(ch, producer=CONTROL, correlation_id=ch.challenge_id))).payload == ch


def test_curriculum_events_set_the_family_rung() -> None:
    core = ChallengerCore(ChallengerConfig(ops=["softmax", "add"]))
    move = CurriculumAdjusted(family="softmax", old_difficulty=0, new_difficulty=2, pass_rate=0.7,
                              window=20, reason="test")
    assert core.process(make_event(move, producer=CONTROL, correlation_id="curriculum")) == []
    out = core.process(started(n=20))
    soft = [c for c in out if c.family == "softmax"]
    add = [c for c in out if c.family == "elementwise"]
    assert soft and add
    assert all(c.difficulty == 2 and c.target.kind == "optimized_fraction" and c.target.value == 0.8
               for c in soft)
    assert all(c.difficulty == 0 and "KZ_DEVICE = 'cuda'" in c.problem_source for c in add)
    octaves = lambda c: math.log2(c.shape_range["rows"][1] / c.shape_range["rows"][0])
    assert min(map(octaves, soft)) > max(map(octaves, add))  # higher rungs widen the shapes


def test_near_duplicates_are_refused_across_rounds() -> None:
    core = ChallengerCore(ChallengerConfig(cpu_mode=True, ops=["softmax"], dtypes=["float32"],
                                           max_resamples=8))
    first = core.process(started(round_=0, seed=1))
    again = core.process(started(round_=0, seed=1))  # the same seed proposes the same ranges first
    assert len(first) == 12
    emitted = first + again
    sigs = [ChallengeSignature.of_challenge(c) for c in emitted]
    assert all(not is_near_duplicate(a, b) for a, b in itertools.combinations(sigs, 2))
    assert {c.challenge_id for c in first}.isdisjoint(c.challenge_id for c in again)


def test_saturated_space_skips_slots_instead_of_duplicating() -> None:
    core = ChallengerCore(ChallengerConfig(cpu_mode=True, ops=["attention"], dtypes=["float16"],
                                           max_resamples=4, dup_tolerance_octaves=3.0))
    out = core.process(started(n=20))
    assert 0 < len(out) < 20


def test_bad_config_is_a_clear_error() -> None:
    with pytest.raises(ChallengerConfigError, match="unknown op 'nope'"):
        ChallengerCore(ChallengerConfig(ops=["nope"]))
    with pytest.raises(ChallengerConfigError, match="no allowed dtype"):
        ChallengerCore(ChallengerConfig(cpu_mode=True, dtypes=["bfloat16"]))
    with pytest.raises(ChallengerConfigError, match="needs a text backend"):
        ChallengerCore.from_config(ChallengerConfig(generator="llm"))


@pytest.mark.parametrize("raw", [
    '{"op": "softmax", "dtype": "float32", "shape_range": {"rows": [2, 16], "cols": [8, 64]}}',
    'Sure! ```json\n{"op": "softmax", "dtype": "float32", "shape_range": {"rows": [2, 16], "cols": [8, 64]}}\n```',
])
def test_parse_proposal_accepts_json_amid_prose(raw: str) -> None:
    p = parse_proposal(raw, Catalogue(CPU))
    assert (p.op, p.dtype, p.shape_range) == ("softmax", "float32", {"rows": (2, 16), "cols": (8, 64)})


@pytest.mark.parametrize("raw, why", [
    ("no json here", "not a JSON object"),
    ("[1, 2]", "expected an object"),
    ('{"op": "softmax"}', "lacks keys ['dtype', 'shape_range']"),
    ('{"op": "conv", "dtype": "float32", "shape_range": {}}', "op 'conv' is not one of"),
    ('{"op": "softmax", "dtype": "bfloat16", "shape_range": {}}', "dtype 'bfloat16' is not allowed"),
    ('{"op": "softmax", "dtype": "float32", "shape_range": {"rows": [2, 16]}}', "missing ['cols']"),
    ('{"op": "softmax", "dtype": "float32", "shape_range": {"rows": [2, 16], "cols": [8, 4096]}}',
     "must stay within cols in [1, 300]"),
])
def test_parse_proposal_explains_rejections(raw: str, why: str) -> None:
    with pytest.raises(InvalidProposal, match=why.replace("[", r"\[").replace("]", r"\]")):
        parse_proposal(raw, Catalogue(CPU))


def test_llm_generator_retries_then_dead_letters_with_the_raw_text(tiny_model: Path) -> None:
    backend = TransformersBackend(tiny_model, device="cpu")  # a real model whose output is not JSON
    config = ChallengerConfig(cpu_mode=True, generator="llm", llm_max_attempts=3, llm_max_tokens=24)
    core = ChallengerCore.from_config(config, backend)
    prompt = core.generator.render_prompt(core_request(), ["Your previous answer was rejected: x"])
    assert "softmax: softmax; rows in [1, 64], cols in [1, 300]; float32, float16" in prompt
    assert "Your previous answer was rejected: x" in prompt
    event = started(n=2)
    with pytest.raises(GenerationFailed) as info:
        core.process(event)
    assert isinstance(info.value, ProcessingError) and info.value.attempts == 3
    assert info.value.raw_text and repr(info.value.raw_text[:20])[1:-1] in str(info.value)
    assert str(info.value).count("not a JSON object") == 3
    # the real adapter turns it into a dead letter that keeps the original event
    processor = BatchProcessor(core, max_bytes=1_000_000, capacity=100)
    [out] = processor.handle(InRecord("control", 0, 0, encode(event)))
    letter = orjson.loads(out.value)["payload"]
    assert out.topic == "dead-letters" and letter["error_kind"] == "processing"
    assert "no valid challenge JSON after 3 attempts" in letter["error"]
    assert base64.b64decode(letter["original_b64"]) == encode(event)


def core_request():
    from services.challenger.generators import ProposalRequest

    return ProposalRequest(round=0, seed=0, index=0, attempt=0, difficulty={"softmax": 1})


def verdict(family: str, difficulty: int, passed: bool, purpose: str = "train",
            stage: str = "correctness"):
    op = {"softmax": "softmax", "matmul": "matmul"}[family]
    rng = get_op(op).cpu_range
    ctx = ChallengeContext(
        op=op, family=family, dtype="float32", shape_range=dict(rng),
        target={"kind": "naive_multiple", "value": 1.5}, constraints=[], difficulty=difficulty,
        round=0, purpose=purpose, eval_round=1 if purpose == "eval" else None, problem_source="",
    )
    payload = SolutionVerified(
        challenge_id="r0-x", context=ctx, sample_index=0, code=None, code_hash=None,
        verifier_version="1", passed=passed, stage="passed" if passed else stage,
        reasons=[], device="cpu", isolation="none", perf_measured=False,
    )
    return make_event(payload, producer=CONTROL, correlation_id="r0-x")


def test_curriculum_core_emits_decisions_and_ignores_eval() -> None:
    core = CurriculumCore(CurriculumConfig(window=10, min_verdicts=5))
    for _ in range(10):
        assert core.process(verdict("softmax", 0, True, purpose="eval")) == []
    outs = [o for _ in range(5) for o in core.process(verdict("softmax", 0, True))]
    [adj] = outs
    assert isinstance(adj, CurriculumAdjusted)
    assert (adj.family, adj.old_difficulty, adj.new_difficulty, adj.window) == ("softmax", 0, 1, 5)
    # the challenger follows the decision
    challenger = ChallengerCore(ChallengerConfig(cpu_mode=True, ops=["softmax"]))
    challenger.process(make_event(adj, producer=CONTROL, correlation_id="curriculum"))
    assert {c.difficulty for c in challenger.process(started(n=3))} == {1}


def test_verdicts_that_say_nothing_of_the_solver_do_not_steer_the_curriculum() -> None:
    core = CurriculumCore(CurriculumConfig(window=10, min_verdicts=5))
    for stage in ("internal", "problem"):  # a full device, an unusable problem
        for _ in range(10):
            assert core.process(verdict("softmax", 1, False, stage=stage)) == []
    outs = [o for _ in range(5) for o in core.process(verdict("softmax", 1, False))]
    [adj] = outs  # the solver's own failures still count, from the first
    assert (adj.old_difficulty, adj.new_difficulty, adj.window) == (1, 0, 5)
