"""Prompt builder and the tiny-model training corpus."""

from __future__ import annotations

from kz_common.kernels import available_ops, reference_solution
from services.extractor import extract
from services.solver.corpus import demo_context, solution_text, training_texts
from kz_common.prompts import build_prompt, pick_examples


def test_prompt_states_the_contract_and_embeds_the_problem() -> None:
    ctx = demo_context("layernorm", "float16")
    prompt = build_prompt(ctx, few_shot=0)
    for needle in ("class ModelNew(nn.Module)", "@triton.jit", "Import only torch, torch.nn, triton",
                   "no optimised library call", "rows in [1, 64], cols in [1, 300]", "dtype float16",
                   "at most 1.5x the naive reference's time", ctx.problem_source.rstrip()):
        assert needle in prompt
    assert prompt.endswith("## Solution\n") and "## Examples" not in prompt


def test_few_shot_prefers_the_family_and_never_shows_the_answer() -> None:
    assert pick_examples("layernorm", "normalization", 1) == ["rmsnorm"]
    picked = pick_examples("softmax", "softmax", 3, "seed-a")
    assert len(picked) == 3 and "softmax" not in picked
    assert pick_examples("softmax", "softmax", 3, "seed-a") == picked  # deterministic
    assert pick_examples("softmax", "softmax", 0) == []
    prompt = build_prompt(demo_context("layernorm"), few_shot=2)
    assert reference_solution("rmsnorm").rstrip() in prompt
    assert reference_solution("layernorm").rstrip() not in prompt


def test_training_texts_are_prompt_plus_an_extractable_solution() -> None:
    texts = training_texts(dtypes=("float32",))
    assert len(texts) == len(available_ops())
    for op, text in zip(available_ops(), texts):
        prompt = build_prompt(demo_context(op), few_shot=0)
        assert text == prompt + solution_text(op)
        result = extract(text[len(prompt):])
        assert result.accepted, (op, result.reason)
