"""Typed columns of each per-event-type view, as DuckDB expressions over the archive row.

`facts` is the payload without long strings (cheap to parse); bulky fields
(code, raw output, problem source) come from `payload`. Kept in step with
schemas/events.py by tests/kz_common/analytics/test_views.py.
"""

from __future__ import annotations

ENVELOPE = ("event_id", "type", "schema_version", "produced_at", "producer_service",
            "producer_version", "causation_id", "correlation_id", "topic", "partition", "offset")


Col = tuple[str, str, str]  # (JSON path in the payload, SQL type or JSON/LENGTH, source column)


def f(path: str, sql_type: str = "VARCHAR", source: str = "facts") -> Col:
    """A typed scalar at JSON `path` of the payload."""
    return (path, sql_type, source)


def j(path: str, source: str = "facts") -> Col:
    """A JSON sub-document (list or object) of the payload."""
    return (path, "JSON", source)


def length(path: str, source: str = "payload") -> Col:
    """The length of a JSON list of the payload."""
    return (path, "LENGTH", source)


def select_list(columns: list[tuple[str, Col]]) -> tuple[str, str]:
    """(inner projections, outer projections): each source is parsed once per row.

    One `json_extract_string(doc, [paths])` per source instead of one call per
    column: at ~25 columns a row that is the difference between seconds and
    a fraction of one.
    """
    groups: dict[tuple[str, str], list[str]] = {}
    outer = []
    for name, (path, sql_type, source) in columns:
        kind = "s" if sql_type not in ("JSON", "LENGTH") else "j"
        paths = groups.setdefault((source, kind), [])
        paths.append(f"$.{path}")
        ref = f"_{source}_{kind}[{len(paths)}]"
        expr = (ref if sql_type in ("VARCHAR", "JSON") else f"json_array_length({ref})"
                if sql_type == "LENGTH" else f"TRY_CAST({ref} AS {sql_type})")
        outer.append(f"{expr} AS {name}")
    fn = {"s": "json_extract_string", "j": "json_extract"}
    inner = [f"{fn[kind]}({source}, [{', '.join(repr(p) for p in paths)}]) AS _{source}_{kind}"
             for (source, kind), paths in groups.items()]
    return ", ".join(inner), ", ".join(outer)


def ctx(prefix: str = "context.") -> list[tuple[str, Col]]:
    """The challenge facts every downstream event carries."""
    return [
        ("op", f(f"{prefix}op")), ("family", f(f"{prefix}family")), ("dtype", f(f"{prefix}dtype")),
        ("round", f(f"{prefix}round", "INTEGER")), ("difficulty", f(f"{prefix}difficulty", "INTEGER")),
        ("purpose", f(f"{prefix}purpose")), ("eval_round", f(f"{prefix}eval_round", "INTEGER")),
    ]


SAMPLE = [("challenge_id", f("challenge_id")), ("sample_index", f("sample_index", "INTEGER"))]

TYPE_COLUMNS: dict[str, list[tuple[str, Col]]] = {
    "round.started": [("round", f("round", "INTEGER")), ("n_challenges", f("n_challenges", "INTEGER")),
                      ("seed", f("seed", "BIGINT"))],
    "challenge.created": [
        ("challenge_id", f("challenge_id")), *ctx(""), ("generator", f("generator")),
        ("target_kind", f("target.kind")), ("target_value", f("target.value", "DOUBLE")),
        ("shape_range", j("shape_range")), ("constraints", j("constraints")),
        ("problem_source", f("problem_source", source="payload")),
    ],
    "curriculum.adjusted": [
        ("family", f("family")), ("old_difficulty", f("old_difficulty", "INTEGER")),
        ("new_difficulty", f("new_difficulty", "INTEGER")), ("pass_rate", f("pass_rate", "DOUBLE")),
        ("window", f("window", "INTEGER")), ("reason", f("reason", source="payload")),
    ],
    "solution.sampled": [
        *SAMPLE, *ctx(), ("n_samples", f("n_samples", "INTEGER")), ("backend", f("backend")),
        ("model_id", f("model_id")), ("adapter", f("adapter")),
        ("adapter_round", f("adapter_round", "INTEGER")),
        ("temperature", f("sampling.temperature", "DOUBLE")), ("seed", f("sampling.seed", "BIGINT")),
        ("prompt_hash", f("prompt_hash")), ("raw_output", f("raw_output", source="payload")),
    ],
    "solution.extracted": [
        *SAMPLE, *ctx(), ("accepted", f("accepted", "BOOLEAN")), ("code_hash", f("code_hash")),
        ("reason", f("reason", source="payload")), ("code", f("code", source="payload")),
    ],
    "solution.verified": [
        *SAMPLE, *ctx(), ("verifier_version", f("verifier_version")), ("passed", f("passed", "BOOLEAN")),
        ("stage", f("stage")), ("reasons", j("reasons", "payload")), ("device", f("device")),
        ("isolation", f("isolation")), ("perf_measured", f("perf_measured", "BOOLEAN")),
        ("candidate_ms", f("timing.candidate_ms", "DOUBLE")), ("naive_ms", f("timing.naive_ms", "DOUBLE")),
        ("optimized_ms", f("timing.optimized_ms", "DOUBLE")),
        ("holdout_ratio", f("timing.holdout_ratio", "DOUBLE")),
        ("speedup_vs_naive", f("speedup_vs_naive", "DOUBLE")),
        ("speedup_vs_optimized", f("speedup_vs_optimized", "DOUBLE")),
        ("roofline_fraction", f("roofline_fraction", "DOUBLE")),
        ("max_rel_error", f("max_rel_error", "DOUBLE")), ("triton_launches", f("triton_launches", "INTEGER")),
        ("code_hash", f("code_hash")), ("code", f("code", source="payload")),
    ],
    "sample.curated": [
        *SAMPLE, ("verdict_event_id", f("verdict_event_id")), ("verifier_version", f("verifier_version")),
        ("kept", f("kept", "BOOLEAN")), ("op", f("op")), ("family", f("family")), ("dtype", f("dtype")),
        ("round", f("context.round", "INTEGER")), ("difficulty", f("context.difficulty", "INTEGER")),
        ("purpose", f("context.purpose")), ("shape_bucket", f("shape_bucket")), ("score", f("score", "DOUBLE")),
        ("reason", f("reason")), ("rule_hits", j("rule_hits", "payload")), ("code_hash", f("code_hash")),
        ("code", f("code", source="payload")),
    ],
    "preference.recorded": [
        ("challenge_id", f("challenge_id")), ("round", f("context.round", "INTEGER")),
        ("family", f("context.family")), ("chosen_sample_id", f("chosen_sample_id")),
        ("rejected_sample_id", f("rejected_sample_id")), ("chosen_score", f("chosen_score", "DOUBLE")),
        ("rejected_score", f("rejected_score", "DOUBLE")), ("reason", f("reason")),
    ],
    "training.requested": [
        ("round", f("round", "INTEGER")), ("dataset_hash", f("dataset_hash")),
        ("n_new", length("new_sample_ids")), ("n_replay", length("replay_sample_ids")),
        ("new_sample_ids", j("new_sample_ids", "payload")),
        ("replay_sample_ids", j("replay_sample_ids", "payload")),
    ],
    "round.trained": [
        ("round", f("round", "INTEGER")), ("adapter_path", f("adapter_path")), ("base_model", f("base_model")),
        ("dataset_hash", f("dataset_hash")), ("metrics", j("metrics")),
    ],
    "round.evaluated": [
        ("round", f("round", "INTEGER")), ("adapter_path", f("adapter_path")),
        ("promoted", f("promoted", "BOOLEAN")), ("reason", f("reason", source="payload")),
        ("baseline_round", f("baseline_round", "INTEGER")), ("eval_pass_rates", j("eval_pass_rates")),
        ("previous_pass_rates", j("previous_pass_rates")), ("eval_counts", j("eval_counts")),
    ],
    "dead.letter": [
        ("source_topic", f("source_topic")), ("source_partition", f("partition", "INTEGER")),
        ("source_offset", f("offset", "BIGINT")), ("consumer", f("consumer")),
        ("error_kind", f("error_kind")), ("error", f("error", source="payload")),
        ("original_event_id", f("original_event_id")),
    ],
}


def view_name(event_type: str) -> str:
    """'solution.verified' -> 'solution_verified'."""
    return event_type.replace(".", "_")
