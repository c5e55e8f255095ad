"""Dataset export: the curated SFT set and the preference pairs as JSONL or Parquet.

Files (loadable with `datasets.load_dataset("json"|"parquet", data_files=...)`):
- sft.{jsonl,parquet}: prompt, completion, metadata{sample_id, challenge_id, op,
  family, dtype, shape_bucket, score, code_hash, verifier_version, round}
- preferences.{jsonl,parquet}: prompt, chosen, rejected, metadata{challenge_id,
  chosen_sample_id, rejected_sample_id, chosen_score, rejected_score, reason, op,
  family, dtype}
Prompts and completions are exactly what the trainer trains on (prompt.py; `few_shot`
must equal the solver's).
Only kept samples are exported; a sample curated twice (replays) appears once.
Retractions (retraction.py) are honoured whatever order the events come in: a kept
sample that the curator later retracted (re-verification superseded its verdict) is
not exported, and neither is a preference pair whose chosen or rejected sample was
retracted: its verdict is no longer the one that speaks for that sample, so the
preference may no longer hold (a rejected cheat re-verified as passing, a chosen
kernel that now fails). The curator retracts every paired sample it supersedes, so
filtering here needs no schema change and no extra event type.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any, Literal

from schemas import AnyEnvelope, PreferenceRecorded, SampleCurated
from services.trainer.exceptions import ExportError
from services.trainer.prompt import build_prompt, format_completion
from services.trainer.retraction import CuratedSet

Format = Literal["jsonl", "parquet"]


def sft_rows(curated: Iterable[SampleCurated | AnyEnvelope], few_shot: int = 2) -> list[dict[str, Any]]:
    return _sft_rows(curated_set(curated), few_shot)


def curated_set(curated: Iterable[SampleCurated | AnyEnvelope]) -> CuratedSet:
    """The kept samples and retracted ids of a stream of curated events (other payloads ignored)."""
    return CuratedSet.of(s for s in map(_payload, curated) if isinstance(s, SampleCurated))


def _sft_rows(samples: CuratedSet, few_shot: int) -> list[dict[str, Any]]:
    rows = []
    for s in samples.kept.values():
        if s.context is None or s.code is None:
            raise ExportError(f"kept sample {s.verdict_event_id} lacks context or code")
        rows.append({
            "prompt": build_prompt(s.context, s.challenge_id, few_shot=few_shot), "completion": format_completion(s.code),
            "metadata": {
                "sample_id": s.verdict_event_id, "challenge_id": s.challenge_id, "op": s.op,
                "family": s.family, "dtype": s.dtype, "shape_bucket": s.shape_bucket,
                "score": s.score, "code_hash": s.code_hash or "", "verifier_version": s.verifier_version,
                "round": s.context.round,
            },
        })
    return rows


def preference_rows(
    pairs: Iterable[PreferenceRecorded | AnyEnvelope], few_shot: int = 2, *, retracted: Collection[str] = (),
) -> list[dict[str, Any]]:
    """Rows of the distinct pairs, less those with a `retracted` sample on either side."""
    rows, seen = [], set()
    for item in pairs:
        p = _payload(item)
        key = (p.chosen_sample_id, p.rejected_sample_id) if isinstance(p, PreferenceRecorded) else None
        if key is None or key in seen or any(k in retracted for k in key):
            continue
        seen.add(key)
        rows.append({
            "prompt": build_prompt(p.context, p.challenge_id, few_shot=few_shot),
            "chosen": format_completion(p.chosen_code),
            "rejected": format_completion(p.rejected_code),
            "metadata": {
                "challenge_id": p.challenge_id, "chosen_sample_id": p.chosen_sample_id,
                "rejected_sample_id": p.rejected_sample_id, "chosen_score": p.chosen_score,
                "rejected_score": p.rejected_score, "reason": p.reason, "op": p.context.op,
                "family": p.context.family, "dtype": p.context.dtype,
            },
        })
    return rows


def export_dataset(
    curated_events: Iterable[SampleCurated | AnyEnvelope],
    pairs: Iterable[PreferenceRecorded | AnyEnvelope],
    out_dir: Path,
    fmt: Format = "jsonl",
    *,
    few_shot: int = 2,
) -> dict[str, Path]:
    """Write sft.<fmt> and preferences.<fmt> into `out_dir`; returns {"sft": path, "preferences": path}."""
    if fmt not in ("jsonl", "parquet"):
        raise ExportError(f"unknown export format {fmt!r}; expected 'jsonl' or 'parquet'")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    samples = curated_set(curated_events)  # one pass: the pairs need its retractions too
    tables = {"sft": _sft_rows(samples, few_shot),
              "preferences": preference_rows(pairs, few_shot, retracted=samples.retracted)}
    paths = {}
    for name, rows in tables.items():
        path = out_dir / f"{name}.{fmt}"
        (_write_jsonl if fmt == "jsonl" else _write_parquet)(rows, path, name)
        paths[name] = path
    return paths


def _payload(item: Any) -> Any:
    return item.payload if hasattr(item, "payload") else item


def _write_jsonl(rows: list[dict[str, Any]], path: Path, _: str) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")


def _write_parquet(rows: list[dict[str, Any]], path: Path, name: str) -> None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ExportError("parquet export needs pyarrow (pip install pyarrow)") from exc
    schema = _SCHEMAS[name](pa)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)


def _sft_schema(pa: Any) -> Any:
    meta = pa.struct([("sample_id", pa.string()), ("challenge_id", pa.string()), ("op", pa.string()),
                      ("family", pa.string()), ("dtype", pa.string()), ("shape_bucket", pa.string()),
                      ("score", pa.float64()), ("code_hash", pa.string()),
                      ("verifier_version", pa.string()), ("round", pa.int64())])
    return pa.schema([("prompt", pa.string()), ("completion", pa.string()), ("metadata", meta)])


def _pref_schema(pa: Any) -> Any:
    meta = pa.struct([("challenge_id", pa.string()), ("chosen_sample_id", pa.string()),
                      ("rejected_sample_id", pa.string()), ("chosen_score", pa.float64()),
                      ("rejected_score", pa.float64()), ("reason", pa.string()), ("op", pa.string()),
                      ("family", pa.string()), ("dtype", pa.string())])
    return pa.schema([("prompt", pa.string()), ("chosen", pa.string()), ("rejected", pa.string()),
                      ("metadata", meta)])


# Explicit schemas: an empty table still has its columns, and types never depend on the first row.
_SCHEMAS = {"sft": _sft_schema, "preferences": _pref_schema}
