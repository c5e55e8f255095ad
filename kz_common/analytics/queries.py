"""Named queries over the archive views, and `run_sql` behind `kz sql`."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any, Literal

import duckdb
import orjson

from kz_common.analytics.exceptions import QueryFailed, UnknownQuery
from kz_common.analytics.views import connect

Format = Literal["table", "csv", "json"]


@dataclass(frozen=True)
class NamedQuery:
    description: str
    sql: str


NAMED: dict[str, NamedQuery] = {
    "pass_rate": NamedQuery("verifier pass rate per round and op family (newest verifier's verdicts)", """
        SELECT round, family, count(*) AS verdicts, count(*) FILTER (passed) AS passed,
               round(avg(passed::INT), 3) AS pass_rate
        FROM verified_current WHERE purpose = 'train' GROUP BY ALL ORDER BY round, family"""),
    "curation_rates": NamedQuery("dedup and pattern-rule hit rates per round (newest decisions)", """
        SELECT round, count(*) AS decided,
               round(avg((reason LIKE 'duplicate_of:%')::INT), 3) AS dup_rate,
               round(avg((reason LIKE 'rule:%')::INT), 3) AS rule_rate,
               round(avg(kept::INT), 3) AS kept_rate
        FROM curated_current GROUP BY ALL ORDER BY round"""),
    "rule_hits": NamedQuery("pattern rules that fired, and their share of curated samples", """
        WITH hits AS (SELECT unnest(CAST(rule_hits AS JSON[])) ->> 'rule' AS rule FROM curated_current)
        SELECT rule, count(*) AS hits,
               round(count(*) / (SELECT greatest(count(*), 1) FROM curated_current), 4) AS hit_rate
        FROM hits GROUP BY rule ORDER BY hits DESC"""),
    "speedups": NamedQuery("speedup over the naive reference of passing verdicts, per round and op", """
        SELECT round, op, count(*) AS n, round(quantile_cont(speedup_vs_naive, 0.1), 3) AS p10,
               round(median(speedup_vs_naive), 3) AS p50,
               round(quantile_cont(speedup_vs_naive, 0.9), 3) AS p90,
               round(max(speedup_vs_naive), 3) AS best
        FROM verified_current WHERE passed AND speedup_vs_naive IS NOT NULL
        GROUP BY ALL ORDER BY round, op"""),
    "curriculum": NamedQuery("curriculum trajectory: each difficulty decision per family, in order", """
        SELECT produced_at, family, old_difficulty, new_difficulty, round(pass_rate, 3) AS pass_rate,
               "window", reason
        FROM curriculum_adjusted ORDER BY family, produced_at"""),
    "funnel": NamedQuery("generated -> extracted -> verified -> curated, per round", """
        WITH s AS (SELECT round, count(*) AS generated FROM solution_sampled GROUP BY round),
             x AS (SELECT round, count(*) FILTER (accepted) AS extracted FROM solution_extracted
                   GROUP BY round),
             v AS (SELECT round, count(*) FILTER (passed) AS verified FROM verified_current GROUP BY round),
             c AS (SELECT round, count(*) FILTER (kept) AS curated FROM curated_current GROUP BY round)
        SELECT round, coalesce(generated, 0) AS generated, coalesce(extracted, 0) AS extracted,
               coalesce(verified, 0) AS verified, coalesce(curated, 0) AS curated
        FROM s FULL JOIN x USING (round) FULL JOIN v USING (round) FULL JOIN c USING (round)
        ORDER BY round"""),
    "top_kernels": NamedQuery("best kept kernels by speedup, with their lineage", """
        SELECT l.challenge_id, l.sample_index, l.op, l.round, l.model_round, l.verifier_version,
               round(l.speedup_vs_naive, 3) AS speedup, l.code_hash
        FROM lineage l JOIN curated_current c ON c.event_id = l.curated_id
        WHERE l.kept AND l.speedup_vs_naive IS NOT NULL
        ORDER BY l.speedup_vs_naive DESC LIMIT 20"""),
    "consumer_lag": NamedQuery("per stage: archived inputs with no output (or dead letter) yet", """
        WITH handled AS (SELECT DISTINCT causation_id AS id FROM events WHERE causation_id IS NOT NULL
                         UNION SELECT DISTINCT verdict_event_id FROM sample_curated
                         UNION SELECT DISTINCT original_event_id FROM dead_letter),
             inputs AS (
                SELECT 'solver' AS consumer, 'challenges' AS topic, event_id FROM challenge_created
                UNION ALL SELECT 'extractor', 'solutions', event_id FROM solution_sampled
                UNION ALL SELECT 'verifier', 'extracted', event_id FROM solution_extracted WHERE accepted
                UNION ALL SELECT 'curator', 'verified', event_id FROM solution_verified)
        SELECT consumer, topic, count(*) AS inputs, count(h.id) AS handled, count(*) - count(h.id) AS lag
        FROM inputs LEFT JOIN handled h ON h.id = inputs.event_id GROUP BY ALL ORDER BY inputs DESC"""),
    "dead_letters": NamedQuery("dead letters per consumer, source topic and kind", """
        SELECT consumer, source_topic, error_kind, count(*) AS letters, any_value(left(error, 120)) AS example
        FROM dead_letter GROUP BY ALL ORDER BY letters DESC"""),
}


def list_queries() -> dict[str, str]:
    """Name -> description of every named query (for `kz sql --list`)."""
    return {name: q.description for name, q in NAMED.items()}


def resolve(sql_or_name: str) -> str:
    """The SQL of a named query, or the text itself when it is not a name."""
    text = sql_or_name.strip()
    if text in NAMED:
        return NAMED[text].sql
    if text.isidentifier() and " " not in text:
        raise UnknownQuery(f"no named query {text!r}; known: {', '.join(NAMED)}")
    return text


def query(con: duckdb.DuckDBPyConnection, sql_or_name: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    """(column names, rows) of a named query or ad-hoc SQL."""
    try:
        cur = con.execute(resolve(sql_or_name))
        rows = cur.fetchall()
    except duckdb.Error as exc:
        raise QueryFailed(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from exc
    names = [d[0] for d in cur.description] if cur.description else []
    return names, rows


def run_sql(root: Path, sql_or_name: str, fmt: Format = "table", max_rows: int | None = 200,
            cache: bool = True) -> str:
    """`kz sql`: run a query over the archive at `root`; the result rendered as `fmt`.

    `cache` (default) queries the refreshed DuckDB cache (<root>/.cache); False reads
    the Parquet files through plain views.
    """
    from kz_common.analytics.cache import open_cached

    con = open_cached(root) if cache else connect(root)
    try:
        names, rows = query(con, sql_or_name)
    finally:
        con.close()
    return render(names, rows, fmt, max_rows)


def render(names: list[str], rows: list[tuple[Any, ...]], fmt: Format, max_rows: int | None = None) -> str:
    if fmt == "json":
        return orjson.dumps([dict(zip(names, r)) for r in rows], default=_jsonable,
                            option=orjson.OPT_NON_STR_KEYS).decode()
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(names)
        writer.writerows([[_cell(v) for v in r] for r in rows])
        return out.getvalue()
    if fmt == "table":
        return _table(names, rows, max_rows)
    raise QueryFailed(f"unknown output format {fmt!r}; use table, csv or json")


def _table(names: list[str], rows: list[tuple[Any, ...]], max_rows: int | None) -> str:
    shown = rows if max_rows is None else rows[:max_rows]
    cells = [names] + [[_cell(v, 60) for v in r] for r in shown]
    widths = [max(len(row[i]) for row in cells) for i in range(len(names))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    more = f"\n({len(rows)} rows, {len(rows) - len(shown)} not shown)" if len(shown) < len(rows) else \
        f"\n({len(rows)} rows)"
    return "\n".join(lines) + more


def _cell(value: Any, width: int | None = None) -> str:
    text = "" if value is None else value.isoformat() if isinstance(value, (datetime, date)) else str(value)
    text = text.replace("\n", "\\n")
    return text if width is None or len(text) <= width else text[: width - 1] + "…"


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)
