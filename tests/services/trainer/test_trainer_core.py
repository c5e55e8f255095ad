"""TrainerCore: requests wait for samples, adapters per round, eval challenges, idempotent replays."""

from __future__ import annotations

from pathlib import Path

import pytest

from schemas import ChallengeCreated, RoundEvaluated, RoundTrained, TrainingRequested
from services.trainer.config import LoraTrainConfig, TrainerConfig
from services.trainer.core import TrainerCore
from services.trainer.exceptions import ConfigError
from services.trainer.heldout import heldout_tasks, middle_half
from services.trainer.prompt import build_prompt
from tests.services.curator.samples import context
from tests.services.trainer.events import curated, env


def config(model: Path, tmp: Path, **kw: object) -> TrainerConfig:
    return TrainerConfig(base_model=str(model), adapters_dir=tmp / "adapters",
                         train=LoraTrainConfig(max_steps=2, batch_size=2, device="cpu"),
                         eval_shape_source="cpu", **kw)  # type: ignore[arg-type]


def test_base_model_is_required() -> None:
    with pytest.raises(ConfigError):
        TrainerCore(TrainerConfig())


def test_request_waits_for_samples_then_trains(tiny_model: Path, tmp_path: Path) -> None:
    core = TrainerCore(config(tiny_model, tmp_path))
    req = TrainingRequested(round=1, new_sample_ids=["a", "b"], replay_sample_ids=[], dataset_hash="d1")
    assert core.process(env(curated("a"))) == []
    assert core.process(env(req)) == []
    assert core.missing(req) == ["b"]
    core.process(env(curated("z", family="reduction", dtype="float16", kept=False)))
    out = core.process(env(curated("b")))
    trained = [p for p in out if isinstance(p, RoundTrained)]
    challenges = [p for p in out if isinstance(p, ChallengeCreated)]
    assert len(trained) == 1 and trained[0].round == 1 and trained[0].dataset_hash == "d1"
    assert Path(trained[0].adapter_path, "adapter_model.safetensors").is_file()
    assert trained[0].eval_challenge_ids == [c.challenge_id for c in challenges]
    # both task types seen (softmax/float32 and reduction/float16), candidate arm 1 and base arm 0
    assert {(c.family, c.dtype, c.eval_round) for c in challenges} >= {
        ("softmax", "float32", 1), ("softmax", "float32", 0), ("reduction", "float16", 1)}
    assert all(c.purpose == "eval" and c.round == 1 for c in challenges)
    assert {c.eval_adapter_path for c in challenges if c.eval_round == 1} == {trained[0].adapter_path}
    assert {c.eval_adapter_path for c in challenges if c.eval_round == 0} == {None}  # base model
    assert core.process(env(req)) == []  # a redelivered request is not trained twice


def test_incumbent_arm_follows_promotions_and_replay_reuses_the_adapter(tiny_model: Path, tmp_path: Path) -> None:
    cfg = config(tiny_model, tmp_path)
    core = TrainerCore(cfg)
    core.process(env(curated("a")))
    core.process(env(RoundEvaluated(round=3, adapter_path="x", eval_pass_rates={}, previous_pass_rates={},
                                    promoted=True, reason="ok")))
    req = TrainingRequested(round=4, new_sample_ids=["a"], replay_sample_ids=[], dataset_hash="d4")
    out = core.process(env(req))
    assert {(p.eval_round, p.eval_adapter_path) for p in out if isinstance(p, ChallengeCreated)} == {
        (4, out[0].adapter_path), (3, "x")}  # type: ignore[attr-defined]
    weights = Path(out[0].adapter_path, "adapter_model.safetensors")  # type: ignore[attr-defined]
    mtime = weights.stat().st_mtime_ns
    replayed = TrainerCore(cfg)
    replayed.process(env(curated("a")))
    again = replayed.process(env(req))
    assert weights.stat().st_mtime_ns == mtime  # same dataset hash: reused, not retrained
    assert again[0].metrics == out[0].metrics  # type: ignore[attr-defined]


def test_heldout_set_is_fixed_and_covers_every_type(tmp_path: Path) -> None:
    cfg = TrainerConfig(base_model="x", eval_ops_per_type=2)
    types = {("normalization", "float16"), ("softmax", "float32")}
    tasks = heldout_tasks(types, cfg)
    assert tasks == heldout_tasks(frozenset(types), cfg)  # type: ignore[arg-type]
    assert {t.type for t in tasks} == {"normalization/float16", "softmax/float32"}
    assert [t.op for t in tasks if t.family == "normalization"] == ["layernorm", "rmsnorm"]
    more = heldout_tasks(types | {("matmul", "bfloat16")}, cfg)
    assert [t for t in more if t.family != "matmul"] == tasks  # old types keep their tasks
    assert middle_half(256, 8192) == (609, 3444)  # 2**9.25, 2**11.75
    assert middle_half(64, 64) == (64, 64)


def test_prompt_contains_the_problem_and_task() -> None:
    ctx = context()
    text = build_prompt(ctx, "c1")
    assert ctx.problem_source in text and "rows in [256, 1024]" in text and text.endswith("## Solution\n")
    assert "## Examples of accepted solutions" in text
    assert "## Examples" not in build_prompt(ctx, "c1", few_shot=0)
