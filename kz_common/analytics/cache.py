"""An incrementally refreshed DuckDB cache of the archive views, for interactive queries.

Views over Parquet re-read and re-parse the JSON payload on every query (seconds
at 1M events on two cores). The cache keeps one native table per topic and per
event type in <root>/.cache/analytics.duckdb; opening it loads only the Parquet
files it has not seen (deduplicated by event id against what it holds), so
`kz sql` while the archiver is writing pays for the new files only.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from pathlib import Path

import duckdb

from kz_common.analytics.columns import view_name
from kz_common.analytics.exceptions import NoArchive
from kz_common.analytics.views import (
    EMPTY_LOG,
    VERSION_KEY,
    connect,
    derived_views,
    log_view,
    type_view_sql,
)
from schemas import EVENTS, TOPICS

log = logging.getLogger(__name__)
IDENTITY = "coalesce(event_id, topic || '/' || \"partition\" || '/' || \"offset\")"


def cache_path(root: Path) -> Path:
    return Path(root) / ".cache" / "analytics.duckdb"


def open_cached(root: Path, *, threads: int | None = None) -> duckdb.DuckDBPyConnection:
    """A connection with the same relations as `views.connect`, backed by the refreshed cache.

    Falls back to plain views when the cache file is locked by another process.
    """
    root = Path(root)
    files = sorted(root.glob("*/*/*.parquet"))
    if not files:
        raise NoArchive(f"no archive at {root} (run `kz archive` first)")
    path = cache_path(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        con = duckdb.connect(str(path))
    except duckdb.IOException as exc:  # another `kz sql` holds the write lock
        log.warning("analytics cache busy (%s); querying the Parquet files directly", exc)
        return connect(root, threads=threads)
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    _schema(con)
    _load_new(con, root, files)
    con.execute("CREATE OR REPLACE TEMP VIEW events AS " +
                " UNION ALL ".join(f"SELECT * FROM {log_view(t)}" for t in TOPICS))
    glob = str(root / "*" / "*" / "*.parquet").replace("'", "''")
    con.execute(f"CREATE OR REPLACE TEMP VIEW raw_log AS SELECT * FROM read_parquet('{glob}', "
                "union_by_name = true)")
    derived_views(con, temp=True)
    return con


def _schema(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(EMPTY_LOG)
    con.execute(VERSION_KEY.replace("CREATE MACRO", "CREATE OR REPLACE TEMP MACRO"))
    # Only create what is missing: binding a typed-view SELECT per event type on every
    # open cost ~25 ms of each `kz sql` (a tenth of a projection query).
    have = {r[0] for r in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database()").fetchall()}
    con.execute("CREATE TABLE IF NOT EXISTS _files (path VARCHAR PRIMARY KEY)")
    for topic in TOPICS:
        if log_view(topic) not in have:
            con.execute(f"CREATE TABLE {log_view(topic)} AS SELECT * FROM _empty_log")
    for event_type, spec in EVENTS.items():
        if view_name(event_type) not in have:
            con.execute(f"CREATE TABLE {view_name(event_type)} AS "
                        f"{type_view_sql(event_type, spec.topic)} LIMIT 0")


def _load_new(con: duckdb.DuckDBPyConnection, root: Path, files: list[Path]) -> None:
    known = {r[0] for r in con.execute("SELECT path FROM _files").fetchall()}
    by_topic: dict[str, list[str]] = defaultdict(list)
    for f in files:
        rel = str(f.relative_to(root))
        if rel not in known and f.parent.parent.name in TOPICS:
            by_topic[f.parent.parent.name].append(rel)
    if not by_topic:
        return
    con.execute("BEGIN")
    try:
        for topic, rels in by_topic.items():
            _load_topic(con, root, topic, rels)
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


def _load_topic(con: duckdb.DuckDBPyConnection, root: Path, topic: str, rels: list[str]) -> None:
    paths = ", ".join("'" + str(root / r).replace("'", "''") + "'" for r in rels)
    table = log_view(topic)
    con.execute(f"""CREATE OR REPLACE TEMP TABLE _new AS SELECT * FROM read_parquet([{paths}])
                    QUALIFY row_number() OVER (PARTITION BY {IDENTITY} ORDER BY broker_ts, "offset") = 1""")
    con.execute(f"DELETE FROM _new WHERE {IDENTITY} IN (SELECT {IDENTITY} FROM {table})")
    con.execute(f"INSERT INTO {table} SELECT * FROM _new")
    for event_type in TOPICS[topic]:
        con.execute(f"INSERT INTO {view_name(event_type)} {type_view_sql(event_type, topic, '_new')}")
    con.executemany("INSERT INTO _files VALUES (?)", [[r] for r in rels])
    con.execute("DROP TABLE _new")
