"""The LLM challenge generator: a prompt with the rules in, one JSON proposal out.

Where the backend supports constrained decoding (vLLM structured outputs,
OpenAI `response_format`), the JSON schema is enforced at sampling time; the
output is validated anyway and invalid proposals are retried with the reason
fed back, up to `max_attempts`, then GenerationFailed dead-letters the round.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from kz_common.llm.backends import TextBackend
from kz_common.llm.exceptions import LLMError
from schemas.events import Sampling
from services.challenger.catalogue import Catalogue, Proposal
from services.challenger.exceptions import GenerationFailed, InvalidProposal
from services.challenger.generators import ProposalRequest
from services.challenger.ladder import rung

PROMPT = """You design GPU kernel programming challenges for training a Triton kernel writer.
Propose ONE new challenge as a JSON object with exactly these keys:
  "op": one of the catalogue ops below,
  "dtype": one of that op's dtypes,
  "shape_range": an object mapping each of the op's dims to [min, max] integers.

Rules:
- min <= max, and every bound must lie inside the op's allowed range below.
- Aim for about {span_pct}% of each dim's range in log2 terms (the family's difficulty rung);
  higher rungs need wider ranges so one kernel must cope with many sizes.
- Prefer ops, dtypes and shape buckets that are rare in the recent history.
- Do not repeat a recent challenge: ranges within half an octave of one are refused.

Catalogue (op: family; dims with allowed ranges; dtypes):
{catalogue}

Difficulty rung per family: {rungs}

Recent history:
{history}
{feedback}
Answer with the JSON object only.
"""



class LLMGenerator:
    kind: Literal["programmatic", "llm"] = "llm"

    def __init__(self, backend: TextBackend, catalogue: Catalogue, *, max_attempts: int = 3,
                 temperature: float = 0.8, top_p: float = 0.95, max_tokens: int = 256) -> None:
        self.backend = backend
        self.catalogue = catalogue
        self.max_attempts = max_attempts
        self.temperature, self.top_p, self.max_tokens = temperature, top_p, max_tokens
        self.schema = proposal_schema(catalogue)

    def propose(self, request: ProposalRequest) -> Proposal:
        feedback = list(request.feedback)
        reasons: list[str] = []
        raw = ""
        for attempt in range(self.max_attempts):
            prompt = self.render_prompt(request, feedback)
            sampling = Sampling(temperature=self.temperature, top_p=self.top_p,
                                max_tokens=self.max_tokens,
                                seed=request.derived_seed(f"llm-{attempt}"))
            try:
                raw = self.backend.generate([prompt], sampling, 1, None, self.schema)[0][0]
            except LLMError as exc:
                raise GenerationFailed(f"LLM generator backend failed: {exc}", raw, attempt + 1) from exc
            try:
                return parse_proposal(raw, self.catalogue)
            except InvalidProposal as exc:
                reasons.append(str(exc))
                feedback.append(f"Your previous answer was rejected: {exc}")
        raise GenerationFailed(
            f"LLM generator: no valid challenge JSON after {self.max_attempts} attempts "
            f"(slot {request.index} of round {request.round}): " + " | ".join(reasons),
            raw, self.max_attempts,
        )

    def render_prompt(self, request: ProposalRequest, feedback: list[str]) -> str:
        rungs = ", ".join(f"{f}={request.difficulty.get(f, 0)}" for f in self.catalogue.families)
        spans = {rung(request.difficulty.get(f, 0)).span for f in self.catalogue.families}
        notes = "".join(f"- {line}\n" for line in feedback[-4:])  # the latest few are enough
        return PROMPT.format(
            span_pct=", ".join(f"{round(100 * s)}" for s in sorted(spans)),
            catalogue=self._catalogue_text(), rungs=rungs,
            history=request.history_summary or "none yet",
            feedback=f"\nNotes on earlier answers:\n{notes}" if notes else "",
        )

    def _catalogue_text(self) -> str:
        lines = []
        for op in self.catalogue.ops:
            base = self.catalogue.base_range(op)
            dims = ", ".join(f"{d} in [{lo}, {hi}]" for d, (lo, hi) in base.items())
            lines.append(f"- {op.name}: {op.family}; {dims}; {', '.join(self.catalogue.dtypes(op.name))}")
        return "\n".join(lines)


def proposal_schema(catalogue: Catalogue) -> dict[str, Any]:
    """JSON schema of a proposal, for constrained decoding."""
    dims = sorted({d for op in catalogue.ops for d in op.dims})
    dtypes = sorted({d for op in catalogue.ops for d in catalogue.dtypes(op.name)})
    pair = {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 2, "maxItems": 2}
    return {
        "type": "object",
        "properties": {
            "op": {"type": "string", "enum": [op.name for op in catalogue.ops]},
            "dtype": {"type": "string", "enum": dtypes},
            "shape_range": {"type": "object", "properties": {d: pair for d in dims},
                            "additionalProperties": False},
        },
        "required": ["op", "dtype", "shape_range"],
        "additionalProperties": False,
    }


def parse_proposal(raw: str, catalogue: Catalogue) -> Proposal:
    """The proposal in an LLM answer (bare JSON, fenced JSON, or JSON amid prose)."""
    data = _first_json_object(raw)
    missing = [k for k in ("op", "dtype", "shape_range") if k not in data]
    if missing:
        raise InvalidProposal(f"JSON object lacks keys {missing}")
    return catalogue.validate(data["op"], data["dtype"], data["shape_range"])


def _first_json_object(raw: str) -> dict[str, Any]:
    text = raw.strip()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
        start = text.find("{")
        if start >= 0:  # prose or a code fence around the object: decode from the first brace
            try:
                data, _ = json.JSONDecoder().raw_decode(text[start:])
            except json.JSONDecodeError:
                data = None
    if data is None:
        preview = text[:80] + ("..." if len(text) > 80 else "")
        raise InvalidProposal(f"answer is not a JSON object: {preview!r}")
    if not isinstance(data, dict):
        raise InvalidProposal(f"answer is JSON {type(data).__name__}, expected an object")
    return data
