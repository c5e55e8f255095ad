"""Build a tiny Llama-architecture causal LM entirely locally (no downloads).

The model is small enough to train on CPU in seconds, yet it is a real
`LlamaForCausalLM` + fast tokenizer saved with `save_pretrained`, so everything
that loads a real model (AutoModelForCausalLM, AutoTokenizer, PEFT, vLLM) loads it
too. Fed prompt+solution pairs from the reference-kernel corpus, a few hundred
steps make it regurgitate real kernels, which lets a demo flywheel carry real
Triton code end to end without a multi-GB model.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from kz_common.llm.exceptions import ModelBuildError

BUILDER_VERSION = 1  # bump when the build recipe changes, so old cache entries are not reused
SPECIAL_TOKENS = ("<pad>", "<s>", "</s>")
MARKER = "kz_tiny.json"  # written last: a directory without it is an interrupted build
# A minimal chat template, so chat-style callers (OpenAI chat endpoint, vLLM chat) work too.
CHAT_TEMPLATE = (
    "{% for m in messages %}<s>{{ m['role'] }}\n{{ m['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant\n{% endif %}"
)


@dataclass(frozen=True)
class TinySpec:
    """Hyper-parameters of a tiny model; together with the texts they determine the build."""

    vocab_size: int = 2048
    hidden: int = 128
    layers: int = 2
    train_steps: int = 0
    seed: int = 0
    max_len: int = 2048  # training sequences are truncated to this many tokens
    max_positions: int = 8192  # RoPE: longer prompts than max_len still run at inference
    lr: float = 3e-3
    batch_size: int = 2

    def validate(self) -> None:
        if self.vocab_size < 256 + len(SPECIAL_TOKENS) + 1:
            raise ModelBuildError(f"vocab_size must exceed the 256 byte symbols, got {self.vocab_size}")
        if self.hidden < 32 or self.hidden % 32:
            raise ModelBuildError(f"hidden must be a positive multiple of 32, got {self.hidden}")
        if self.layers < 1 or self.train_steps < 0 or self.batch_size < 1 or self.max_len < 16:
            raise ModelBuildError(f"invalid tiny model spec: {self}")


def tiny_model_key(texts: list[str], spec: TinySpec) -> str:
    """Content hash of everything that determines the built model."""
    h = hashlib.sha256(json.dumps({"v": BUILDER_VERSION, "spec": asdict(spec)}).encode())
    for text in texts:
        h.update(hashlib.sha256(text.encode()).digest())
    return h.hexdigest()


def build_tiny_model(
    out_dir: Path,
    texts: list[str],
    *,
    vocab_size: int = 2048,
    hidden: int = 128,
    layers: int = 2,
    train_steps: int = 0,
    seed: int = 0,
) -> Path:
    """Build (or reuse from cache) a tiny model trained on `texts`; returns its directory.

    `out_dir` is a cache root: the model lands in `out_dir/tiny-<hash>`, where the
    hash covers the texts and every hyper-parameter, so equal inputs reuse the
    earlier build and different inputs never collide.
    """
    spec = TinySpec(vocab_size=vocab_size, hidden=hidden, layers=layers,
                    train_steps=train_steps, seed=seed)
    return build_tiny_model_from_spec(Path(out_dir), texts, spec)


def build_tiny_model_from_spec(out_dir: Path, texts: list[str], spec: TinySpec) -> Path:
    """`build_tiny_model` with the full spec (sequence length, learning rate, batch size)."""
    spec.validate()
    if not texts or not any(t.strip() for t in texts):
        raise ModelBuildError("build_tiny_model needs at least one non-empty text")
    key = tiny_model_key(texts, spec)
    dest = out_dir / f"tiny-{key[:16]}"
    if (dest / MARKER).is_file():
        return dest
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".tmp-{key[:16]}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        _build_into(tmp, texts, spec, key)
        if (dest / MARKER).is_file():  # a concurrent builder finished first: keep theirs
            shutil.rmtree(tmp)
        else:
            shutil.rmtree(dest, ignore_errors=True)  # an interrupted build without marker
            os.replace(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _build_into(path: Path, texts: list[str], spec: TinySpec, key: str) -> None:
    import torch

    tokenizer = train_tokenizer(texts, spec.vocab_size)
    torch.manual_seed(spec.seed)
    model = _new_model(spec, tokenizer)
    final_loss = train_lm(model, tokenizer, texts, spec) if spec.train_steps else None
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    meta = {"key": key, "spec": asdict(spec), "n_texts": len(texts), "final_loss": final_loss}
    (path / MARKER).write_text(json.dumps(meta, indent=2))


def train_tokenizer(texts: list[str], vocab_size: int):  # -> PreTrainedTokenizerFast
    """A byte-level BPE tokenizer trained on `texts`: no unknown tokens, any text round-trips."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _new_model(spec: TinySpec, tokenizer):  # -> LlamaForCausalLM
    from transformers import LlamaConfig, LlamaForCausalLM

    # head_dim 64 (not 32): the smallest head size every vLLM attention backend accepts.
    heads = max(1, spec.hidden // 64)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden,
        intermediate_size=spec.hidden * 3,
        num_hidden_layers=spec.layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        head_dim=spec.hidden // heads,
        max_position_embeddings=spec.max_positions,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    return model


def train_lm(model, tokenizer, texts: list[str], spec: TinySpec) -> float:
    """Plain next-token training on whole texts (each ends with EOS); returns the last loss."""
    import torch

    seqs = [tokenizer(t, add_special_tokens=False)["input_ids"][: spec.max_len - 1]
            + [tokenizer.eos_token_id] for t in texts if t]
    rng = random.Random(spec.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=spec.lr, weight_decay=0.0)
    warmup = max(1, spec.train_steps // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: _lr_factor(s, warmup, spec.train_steps))
    model.train()
    loss_value = float("nan")
    for _ in range(spec.train_steps):
        batch = [seqs[rng.randrange(len(seqs))] for _ in range(spec.batch_size)]
        input_ids, labels, mask = _pad_batch(batch, tokenizer.pad_token_id)
        loss = model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        loss_value = float(loss.detach())
    model.eval()
    return loss_value


def _lr_factor(step: int, warmup: int, total: int) -> float:
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def _pad_batch(batch: list[list[int]], pad_id: int):
    import torch

    width = max(len(s) for s in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)  # pads carry no loss
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for i, s in enumerate(batch):
        ids[i, : len(s)] = torch.tensor(s)
        labels[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
    return ids, labels, mask
