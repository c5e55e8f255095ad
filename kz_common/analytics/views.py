"""A DuckDB connection with views over the Parquet archive.

Layers (all views, nothing copied unless `materialize=True`):
- log_<topic>: the archived rows of one topic, deduplicated by event id
  (rows that are not envelopes keep their log coordinates as identity);
- events: every topic together; raw_log: every row as written;
- one view per event type (solution_verified, sample_curated, ...) with typed
  columns extracted from the JSON payload;
- verified_current / curated_current: per (challenge, sample) only the verdict
  (or curation decision) of the newest verifier version, so a replay with a
  stricter verifier replaces the older verdicts in every projection (the curator
  retracts a revoked sample with a `superseded_by:` decision, see
  services/curator/supersede.py);
- lineage: a curated sample joined to its verdict, extraction, solution and
  challenge (model round, verifier version).
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from kz_common.analytics.columns import ENVELOPE, TYPE_COLUMNS, select_list, view_name
from kz_common.analytics.exceptions import NoArchive
from schemas import EVENTS, TOPICS

EMPTY_LOG = """CREATE TEMP TABLE _empty_log (
    event_id VARCHAR, type VARCHAR, schema_version INTEGER, produced_at TIMESTAMPTZ,
    producer_service VARCHAR, producer_version VARCHAR, causation_id VARCHAR, correlation_id VARCHAR,
    topic VARCHAR, "partition" INTEGER, "offset" BIGINT, key BLOB, broker_ts TIMESTAMPTZ,
    size_bytes INTEGER, payload VARCHAR, facts VARCHAR, raw BLOB)"""

# Version strings compare by their numbers: '1.10.0' > '1.9.2', 'v2' > '1.0.0'.
VERSION_KEY = ("CREATE MACRO version_key(v) AS "
               "list_transform(regexp_extract_all(coalesce(v, ''), '\\d+'), lambda x: CAST(x AS BIGINT))")


def newest_per_sample(source: str, tiebreak: str = "", *, ranked: bool = True) -> str:
    """SELECT of the rows of `source` that are newest per (challenge, sample index).

    Newest: highest version_key(verifier_version), then latest produced_at, then
    `tiebreak` (ascending terms that put a row last), then highest event id.

    `ranked` (for tables: the cache, materialised views): the version key is computed
    once per *distinct* version (a handful) and joined in as a dense rank, because
    evaluating the regex per row and sorting ~250k LIST keys was ~60% of the cost of
    a projection. It reads `source` twice, which over a view of Parquet files would
    re-parse every JSON payload (and materialising the view buffers every column,
    code included), so views keep the per-row key in one scan. Both give the same
    rows (tests/kz_common/analytics/test_views.py checks them against a reference).
    """
    version = "_vrank" if ranked else "version_key(verifier_version)"
    order = f"{version} DESC, produced_at DESC, {tiebreak + ', ' if tiebreak else ''}event_id DESC"
    window = (f"QUALIFY row_number() OVER (PARTITION BY challenge_id, coalesce(sample_index, -1) "
              f"ORDER BY {order}) = 1")
    if not ranked:
        return f"SELECT * FROM {source} {window}"
    return f"""WITH _ranks AS (SELECT verifier_version,
                         dense_rank() OVER (ORDER BY version_key(verifier_version)) AS _vrank
                  FROM (SELECT DISTINCT verifier_version FROM {source}))
SELECT {source}.* FROM {source}
LEFT JOIN _ranks ON _ranks.verifier_version IS NOT DISTINCT FROM {source}.verifier_version
{window}"""


# Curation decisions: a `superseded_by:` decision (the curator's retraction of an earlier
# verdict, emitted in the same batch as the successor's own decision) never wins a tie in
# time against that successor. A retraction later than the kept decision it voids still
# wins: the sample is not kept while its successor waits in a window.
SUPERSEDED_LAST = "starts_with(coalesce(reason, ''), 'superseded_by:')"

LINEAGE = """CREATE VIEW lineage AS
SELECT c.event_id AS curated_id, c.challenge_id, c.sample_index, c.kept, c.reason AS curation_reason,
       c.score, c.produced_at AS curated_at,
       v.event_id AS verdict_id, v.verifier_version, v.passed, v.stage, v.speedup_vs_naive,
       v.speedup_vs_optimized, v.producer_version AS verifier_service_version,
       x.event_id AS extraction_id, x.accepted AS extraction_accepted, x.code_hash,
       s.event_id AS solution_id, s.model_id, s.adapter, s.adapter_round AS model_round, s.backend,
       ch.event_id AS challenge_event_id, coalesce(ch.op, c.op) AS op,
       coalesce(ch.family, c.family) AS family, coalesce(ch.round, c.round) AS round,
       coalesce(ch.difficulty, c.difficulty) AS difficulty, ch.generator
FROM sample_curated c
LEFT JOIN solution_verified v ON v.event_id = c.verdict_event_id
LEFT JOIN solution_extracted x ON x.event_id = v.causation_id
LEFT JOIN solution_sampled s ON s.event_id = x.causation_id
LEFT JOIN (SELECT * FROM challenge_created QUALIFY row_number() OVER (
             PARTITION BY challenge_id ORDER BY produced_at) = 1) ch ON ch.challenge_id = c.challenge_id"""


def connect(root: Path, *, materialize: bool = False, threads: int | None = None,
            require: bool = True) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with every archive view defined.

    `materialize` copies the per-type views into temp tables first: worth it when
    one connection runs many queries (the report). `require` raises NoArchive
    when there are no Parquet files under `root`.
    """
    root = Path(root)
    if require and not any(root.glob("*/*/*.parquet")):
        raise NoArchive(f"no archive at {root} (run `kz archive` first)")
    con = duckdb.connect(":memory:")
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    con.execute(EMPTY_LOG)
    con.execute(VERSION_KEY)
    for topic in TOPICS:
        con.execute(f"CREATE VIEW {log_view(topic)} AS {_topic_source(root, topic)}")
    union = " UNION ALL ".join(f"SELECT * FROM {log_view(t)}" for t in TOPICS)
    con.execute(f"CREATE VIEW events AS {union}")
    con.execute(f"CREATE VIEW raw_log AS {_raw_source(root)}")
    for event_type, spec in EVENTS.items():
        sql = type_view_sql(event_type, spec.topic)
        if materialize:
            con.execute(f"CREATE TEMP TABLE {view_name(event_type)} AS {sql}")
        else:
            con.execute(f"CREATE VIEW {view_name(event_type)} AS {sql}")
    derived_views(con, ranked=materialize)
    return con


def derived_views(con: duckdb.DuckDBPyConnection, temp: bool = False, *, ranked: bool = True) -> None:
    """The projections and the lineage join, over whatever per-type relations `con` has.

    `ranked`: the per-type relations are tables, cheap to read twice (see newest_per_sample).
    """
    kind = "CREATE OR REPLACE TEMP VIEW" if temp else "CREATE VIEW"
    con.execute(f"{kind} verified_current AS "
                f"{newest_per_sample('solution_verified', ranked=ranked)}")
    con.execute(f"{kind} curated_current AS "
                f"{newest_per_sample('sample_curated', SUPERSEDED_LAST, ranked=ranked)}")
    con.execute(LINEAGE.replace("CREATE VIEW", kind, 1))


def log_view(topic: str) -> str:
    return "log_" + topic.replace("-", "_")


def _glob(root: Path, topic: str | None) -> str:
    path = (root / topic / "*" / "*.parquet") if topic else (root / "*" / "*" / "*.parquet")
    return str(path).replace("'", "''")


def _topic_source(root: Path, topic: str) -> str:
    if not any((root / topic).glob("*/*.parquet")):
        return "SELECT * FROM _empty_log"
    # Rows a crash made the archiver write twice, or events the log itself holds twice:
    # keep the earliest copy of each event id.
    return (f"SELECT * FROM read_parquet('{_glob(root, topic)}') QUALIFY row_number() OVER ("
            "PARTITION BY coalesce(event_id, topic || '/' || \"partition\" || '/' || \"offset\") "
            "ORDER BY broker_ts, \"offset\") = 1")


def _raw_source(root: Path) -> str:
    if not any(root.glob("*/*/*.parquet")):
        return "SELECT * FROM _empty_log"
    return f"SELECT * FROM read_parquet('{_glob(root, None)}', union_by_name = true)"


def type_view_sql(event_type: str, topic: str, source: str | None = None) -> str:
    inner, outer = select_list(TYPE_COLUMNS[event_type])
    envelope = ", ".join(f'"{c}"' for c in ENVELOPE)
    return (f"SELECT {envelope}, {outer} FROM (SELECT {envelope}, {inner} FROM {source or log_view(topic)} "
            f"WHERE type = '{event_type}')")
