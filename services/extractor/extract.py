"""Pull a solution module out of a raw LLM sample.

The rule, in order:

1. Normalise the whole text: drop a BOM and zero-width characters, CRLF/CR -> LF.
2. Fences are lines of three or more backticks (or tildes), optionally indented.
   The *opening* fence is the first one tagged ``python``, ``py`` or ``python3``
   (any case); failing that, the first untagged fence whose block looks like
   Python (contains ``import``/``def``/``class``/``@``). The *closing* fence is
   the LAST untagged fence after it; with none, the code runs to the end of the
   text (an unclosed fence, e.g. a sample cut off at max_tokens).
3. Candidates, first acceptable wins:
   a. everything between the opening fence and the closing fence;
   b. when the text has several Python blocks: each on its own, in order (a
      complete solution in one block beats gluing usage examples onto it);
   c. all Python blocks joined in order (models often put the kernel and
      ModelNew in separate blocks);
   d. with no fence at all: the whole text, if it is bare Python.
4. A candidate is normalised (tabs in indentation expanded, NBSP -> space,
   trailing spaces stripped, common indentation removed) and must parse with
   ``ast``, define a top-level ``class ModelNew`` and a top-level function
   decorated with ``@triton.jit`` (also ``@jit`` from ``from triton import jit``,
   aliases, and the called form ``@triton.jit(...)``).

A sample no candidate satisfies is rejected with the reason of the first
candidate (the most faithful reading of the sample), never dropped.
"""

from __future__ import annotations

import ast
import hashlib
import re
import textwrap
from dataclasses import dataclass

ZERO_WIDTH = dict.fromkeys(map(ord, "\ufeff\u200b\u200c\u200d\u2060\u00ad"), None)
FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([^\s`]*)[^\n`]*$")
PY_TAGS = {"python", "py", "python3", "py3"}
PY_HINT = re.compile(r"^\s*(import |from \S+ import |def |class |@)", re.MULTILINE)


@dataclass(frozen=True)
class Extraction:
    """Result of `extract`: accepted code with its hash, or the reason for rejection."""

    accepted: bool
    code: str | None
    code_hash: str | None
    reason: str | None
    rule: str  # which candidate produced the result, e.g. 'fence-span', 'blocks-joined'


@dataclass(frozen=True)
class _Fence:
    line: int
    tag: str  # lower-cased info string ('' for a bare fence)


def extract(raw: str, *, max_code_chars: int = 100_000, tab_size: int = 4) -> Extraction:
    """The solution code in `raw` (see the module docstring for the exact rule)."""
    if not isinstance(raw, str):
        raise TypeError(f"extract() needs a str, got {type(raw).__name__}")
    lines = normalise_text(raw).split("\n")
    fences = [_Fence(i, m.group(2).lower()) for i, line in enumerate(lines) if (m := FENCE.match(line))]
    candidates = _candidates(lines, fences)
    if not raw.strip():
        return Extraction(False, None, None, "empty output", "none")
    if not candidates:
        return Extraction(False, None, None, "no python code block found", "none")
    first_reason: str | None = None
    first_rule = candidates[0][0]
    for rule, text in candidates:
        code = normalise_code(text, tab_size)
        reason = check_code(code, max_code_chars)
        if reason is None:
            return Extraction(True, code, code_hash(code), None, rule)
        first_reason = first_reason or reason
    if first_rule == "bare-code":  # unfenced text: most likely prose, not a broken module
        first_reason = f"no python code block found (unfenced text is not a solution: {first_reason})"
    return Extraction(False, None, None, first_reason, first_rule)


def normalise_text(raw: str) -> str:
    """Drop BOM / zero-width characters and unify line endings."""
    return raw.translate(ZERO_WIDTH).replace("\r\n", "\n").replace("\r", "\n")


def normalise_code(code: str, tab_size: int = 4) -> str:
    """Canonical form of a code block: the form that is parsed, stored and hashed."""
    out = []
    for line in code.split("\n"):
        body = line.lstrip(" \t\u00a0")
        indent = line[: len(line) - len(body)].replace("\u00a0", " ").expandtabs(tab_size)
        out.append((indent + body).rstrip())
    return textwrap.dedent("\n".join(out)).strip("\n") + "\n"


def code_hash(code: str) -> str:
    """sha256 hex digest of normalised code."""
    return hashlib.sha256(code.encode()).hexdigest()


def check_code(code: str, max_code_chars: int = 100_000) -> str | None:
    """None when `code` is an acceptable solution module, else the reason it is not."""
    if not code.strip():
        return "code block is empty"
    if len(code) > max_code_chars:
        return f"code is {len(code)} characters, over the {max_code_chars} limit"
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        return f"syntax error at line {exc.lineno}: {exc.msg}"
    except (ValueError, RecursionError) as exc:  # e.g. NUL bytes, absurd nesting
        return f"unparseable code: {exc}"
    if not any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body):
        return "no top-level class ModelNew"
    if not _has_triton_kernel(tree):
        return "no top-level @triton.jit kernel"
    return None


# ---------------------------------------------------------------------- candidates


def _candidates(lines: list[str], fences: list[_Fence]) -> list[tuple[str, str]]:
    if not fences:
        text = "\n".join(lines)
        return [("bare-code", text)] if PY_HINT.search(text) else []
    blocks = _blocks(lines, fences)
    py_blocks = [b for tag, b in blocks if tag in PY_TAGS or (tag == "" and PY_HINT.search(b))]
    opening = _opening(fences, blocks)
    if opening is None:
        return []
    closings = [f for f in fences if f.line > opening.line and f.tag == ""]
    end = closings[-1].line if closings else len(lines)
    out = [("fence-span" if closings else "unclosed-fence", "\n".join(lines[opening.line + 1:end]))]
    if len(py_blocks) > 1:
        out += [(f"block-{i}", b) for i, b in enumerate(py_blocks)]
        out.append(("blocks-joined", "\n\n".join(py_blocks)))
    return out


def _opening(fences: list[_Fence], blocks: list[tuple[str, str]]) -> _Fence | None:
    for f in fences:
        if f.tag in PY_TAGS:
            return f
    # No tagged fence: an untagged one opening a python-looking block. Blocks pair fences
    # in order, so the opening fences are every other fence.
    for f, (tag, body) in zip(fences[::2], blocks):
        if f.tag == "" and PY_HINT.search(body):
            return f
    return None


def _blocks(lines: list[str], fences: list[_Fence]) -> list[tuple[str, str]]:
    """(tag, body) of each fenced block, pairing fences in order; an unclosed last one runs to the end."""
    out = []
    for i in range(0, len(fences), 2):
        start = fences[i]
        stop = fences[i + 1].line if i + 1 < len(fences) else len(lines)
        out.append((start.tag, "\n".join(lines[start.line + 1:stop])))
    return out


# ---------------------------------------------------------------------- triton check


def _has_triton_kernel(tree: ast.Module) -> bool:
    modules, jits = {"triton"}, set()  # names bound to the triton module / to triton.jit
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name == "triton"}
        elif isinstance(node, ast.ImportFrom) and node.module == "triton":
            jits |= {a.asname or a.name for a in node.names if a.name == "jit"}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and any(
            _is_jit(d, modules, jits) for d in node.decorator_list
        ):
            return True
    return False


def _is_jit(dec: ast.expr, modules: set[str], jits: set[str]) -> bool:
    if isinstance(dec, ast.Call):
        dec = dec.func
    if isinstance(dec, ast.Name):
        return dec.id in jits
    return (isinstance(dec, ast.Attribute) and dec.attr == "jit"
            and isinstance(dec.value, ast.Name) and dec.value.id in modules)
