"""Normalised token streams of code: what "the same code" means for dedup and variant rules.

Identifiers become ID, numbers NUM, strings STR; comments and whitespace vanish.
API names (anything after a '.', keywords, builtins, the tl/triton/torch modules)
stay, so a copy with renamed variables and a changed BLOCK size is identical,
while a kernel that calls different operations is not.
"""

from __future__ import annotations

import builtins
import io
import keyword
import tokenize

_KEEP = frozenset(keyword.kwlist) | frozenset(dir(builtins)) | {
    "tl", "triton", "torch", "nn", "F", "math", "self",
}
_SKIP = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
         tokenize.ENCODING, tokenize.ENDMARKER}


def normalised_tokens(code: str) -> list[str]:
    """Token stream of `code` with identifiers, numbers and strings abstracted."""
    out: list[str] = []
    prev = ""
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type in _SKIP:
                continue
            out.append(_normalise(tok, prev))
            prev = tok.string
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass  # keep what was tokenised: near-dup detection must not fail on odd input
    return out


def _normalise(tok: tokenize.TokenInfo, prev: str) -> str:
    if tok.type == tokenize.NAME:
        return tok.string if prev == "." or tok.string in _KEEP else "ID"
    if tok.type == tokenize.NUMBER:
        return "NUM"
    if tok.type == tokenize.STRING or tok.type == getattr(tokenize, "FSTRING_START", -1):
        return "STR"
    return tok.string


def shingles(tokens: list[str], k: int) -> set[str]:
    """Set of k-token shingles (the whole stream when shorter than k)."""
    if len(tokens) <= k:
        return {" ".join(tokens)} if tokens else set()
    return {" ".join(tokens[i : i + k]) for i in range(len(tokens) - k + 1)}
