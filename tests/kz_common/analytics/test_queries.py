"""Named queries and `kz sql` output formats over a synthetic archive."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import orjson
import pytest

from kz_common.analytics.exceptions import QueryFailed, UnknownQuery
from kz_common.analytics.queries import NAMED, list_queries, query, run_sql
from kz_common.analytics.views import connect


@pytest.mark.parametrize("name", list(NAMED))
def test_named_query_runs(archive: Path, name: str) -> None:
    names, rows = query(connect(archive), name)
    assert names
    if name not in ("dead_letters",):  # the synthetic log has no dead letters
        assert rows, name


def test_pass_rate_improves_over_rounds_in_the_synthetic_log(archive: Path) -> None:
    out = orjson.loads(run_sql(archive, "SELECT round, avg(passed::INT) AS r FROM verified_current "
                                        "GROUP BY round ORDER BY round", "json"))
    rates = [row["r"] for row in out]
    assert len(rates) >= 2 and rates == sorted(rates)


def test_funnel_narrows(archive: Path) -> None:
    names, rows = query(connect(archive), "funnel")
    for r in rows:
        d = dict(zip(names, r))
        assert d["generated"] >= d["extracted"] >= d["verified"] >= d["curated"] > 0


def test_consumer_lag_is_zero_for_a_complete_log(archive: Path) -> None:
    names, rows = query(connect(archive), "consumer_lag")
    assert {r[names.index("lag")] for r in rows} == {0}


def test_formats(archive: Path) -> None:
    sql = "SELECT type, count(*) AS n FROM events GROUP BY type ORDER BY type"
    table = run_sql(archive, sql)
    assert table.splitlines()[0].split() == ["type", "n"] and "solution.verified" in table
    parsed = list(csv.DictReader(io.StringIO(run_sql(archive, sql, "csv"))))
    as_json = orjson.loads(run_sql(archive, sql, "json"))
    assert [r["type"] for r in parsed] == [r["type"] for r in as_json]
    assert sum(int(r["n"]) for r in parsed) == sum(r["n"] for r in as_json)


def test_bad_queries_are_clear_errors(archive: Path) -> None:
    with pytest.raises(UnknownQuery, match="pass_rate"):
        run_sql(archive, "pass_rat")
    with pytest.raises(QueryFailed):
        run_sql(archive, "SELECT no_such_column FROM events")
    with pytest.raises(QueryFailed, match="format"):
        run_sql(archive, "SELECT 1", "xml")  # type: ignore[arg-type]
    assert set(list_queries()) == set(NAMED)
