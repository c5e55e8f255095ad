"""extract() on a corpus of messy, real-looking LLM outputs."""

from __future__ import annotations

import hashlib

import pytest

from kz_common.kernels import reference_solution
from services.extractor.extract import check_code, extract, normalise_code

KERNEL = reference_solution("softmax")
NORMAL = normalise_code(KERNEL)
SMALL = """import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out
"""
KERNEL_PART, MODEL_PART = SMALL.split("\n\nclass ModelNew")
MODEL_PART = "class ModelNew" + MODEL_PART


def fenced(code: str, tag: str = "python") -> str:
    return f"```{tag}\n{code}```\n"


ACCEPTED = {
    "prose around code": f"Here is an optimised kernel.\n\n{fenced(KERNEL)}\nIt fuses max and sum.",
    "py tag": fenced(KERNEL, "py"),
    "capitalised tag": fenced(KERNEL, "Python"),
    "bare fence with python": f"Sure:\n{fenced(KERNEL, '')}",
    "unclosed but complete": f"Answer:\n```python\n{KERNEL}",
    "crlf line endings": fenced(KERNEL).replace("\n", "\r\n"),
    "bom and zero-width": "\ufeff" + fenced(KERNEL).replace("import torch\n", "import\u200b torch\n", 1),
    "indented block": "1. The code:\n" + "\n".join("    " + ln for ln in fenced(KERNEL).split("\n")),
    "trailing spaces": fenced("\n".join(ln + "   " for ln in KERNEL.split("\n"))),
}


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_accepts_and_normalises_to_the_same_code(name: str) -> None:
    result = extract(ACCEPTED[name])
    assert result.accepted, result.reason
    assert result.code == NORMAL
    assert result.code_hash == hashlib.sha256(NORMAL.encode()).hexdigest()


def test_tabs_are_expanded_in_indentation_only() -> None:
    tabbed = SMALL.replace("    ", "\t").replace("tl.store(", "tl.store(\t", 1)
    result = extract(fenced(tabbed))
    assert result.accepted, result.reason
    assert all(not ln.startswith((" \t", "\t")) for ln in result.code.split("\n"))
    assert "tl.store(\t" in result.code  # a tab inside a line is content, left alone


def test_kernel_and_model_in_separate_blocks_are_joined() -> None:
    raw = f"First the kernel:\n{fenced(KERNEL_PART)}\nThen the module:\n{fenced(MODEL_PART)}"
    result = extract(raw)
    assert result.accepted and result.rule == "blocks-joined"
    assert "def relu_kernel" in result.code and "class ModelNew" in result.code


def test_a_complete_block_wins_over_usage_examples() -> None:
    usage = "x = torch.randn(4)\nprint(ModelNew()(x))\n"
    raw = f"{fenced(SMALL)}\nUse it like this:\n{fenced(usage)}"
    result = extract(raw)
    assert result.accepted and result.rule == "block-0"
    assert "print(" not in result.code


def test_fences_inside_the_code_keep_the_span() -> None:
    code = SMALL.replace('class ModelNew(nn.Module):\n',
                         'class ModelNew(nn.Module):\n    """Usage:\n```\nModelNew()(x)\n```\n    """\n')
    result = extract(f"Here:\n{fenced(code)}Done.")
    assert result.accepted and result.rule == "fence-span"
    assert "ModelNew()(x)" in result.code


def test_alias_and_called_decorators_count_as_triton_kernels() -> None:
    from_import = SMALL.replace("import triton\n", "import triton\nfrom triton import jit\n") \
        .replace("@triton.jit", "@jit")
    aliased = SMALL.replace("import triton\n", "import triton as tr\n") \
        .replace("@triton.jit", "@tr.jit(do_not_specialize=['n'])").replace("triton.cdiv", "tr.cdiv")
    autotuned = SMALL.replace("@triton.jit", "@triton.autotune(configs=[], key=['n'])\n@triton.jit")
    for code in (from_import, aliased, autotuned):
        assert check_code(normalise_code(code)) is None


REJECTED = {
    "empty": ("", "empty output"),
    "whitespace": ("  \n\t\n", "empty output"),
    "prose only": ("I am sorry, I cannot write this kernel.", "no python code block found"),
    "prose with keywords": ("class of problems:\nimport ant note", "no python code block found"),
    "non-python block": ("```bash\npip install triton\n```", "no python code block found"),
    "truncated": (f"```python\n{SMALL[:300]}", "syntax error at line"),
    "syntax error": (fenced(SMALL.replace("def forward(self, x):", "def forward(self, x)")),
                     "syntax error at line 15: expected ':'"),
    "no ModelNew": (fenced(KERNEL_PART + "\n"), "no top-level class ModelNew"),
    "ModelNew not top-level": (fenced(KERNEL_PART + "\nif True:\n" + "\n".join(
        "    " + ln for ln in MODEL_PART.split("\n"))), "no top-level class ModelNew"),
    "no triton kernel": (fenced(SMALL.replace("@triton.jit\n", "")), "no top-level @triton.jit kernel"),
    "jit of another module": (fenced(SMALL.replace("@triton.jit", "@numba.jit")),
                              "no top-level @triton.jit kernel"),
    "empty block": ("```python\n```", "code block is empty"),
}


@pytest.mark.parametrize("name", sorted(REJECTED))
def test_rejects_with_a_reason(name: str) -> None:
    raw, reason = REJECTED[name]
    result = extract(raw)
    assert not result.accepted and result.code is None and result.code_hash is None
    assert reason in result.reason


def test_oversized_code_is_rejected() -> None:
    big = SMALL + "\n".join(f"PAD_{i} = {i}" for i in range(5000)) + "\n"
    result = extract(fenced(big), max_code_chars=10_000)
    assert not result.accepted and "over the 10000 limit" in result.reason


def test_non_string_input_is_a_clear_error() -> None:
    with pytest.raises(TypeError, match="needs a str"):
        extract(b"```python\n```")  # type: ignore[arg-type]
