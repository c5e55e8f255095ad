"""`kz` commands over the event log: archive, sql, replay, report, export."""

from __future__ import annotations

import signal
import threading
from datetime import datetime
from pathlib import Path
from typing import Annotated, Literal, Optional

import typer

from kz_common.cli import _require_bootstrap, app, console
from kz_common.config import Settings, get_settings
from kz_common.exceptions import ConfigError


def _archive_root(settings: Settings) -> Path:
    from services.archiver.config import ArchiverConfig

    return ArchiverConfig.from_settings(settings.services).archive_root(settings.paths.data_dir)


@app.command()
def archive(follow: Annotated[bool, typer.Option(help="keep archiving until Ctrl-C")] = False) -> None:
    """Write the event log to Parquet (deduplicated by event id) under the archive root."""
    from services.archiver.consumer import archive_forever, archive_once

    settings, bootstrap = get_settings(), _require_bootstrap()
    if follow:
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):  # flush and commit what is held, then exit
            signal.signal(sig, lambda *_: stop.set())
        stats = archive_forever(settings, bootstrap, stop)
    else:
        stats = archive_once(settings, bootstrap)
    console.print(f"archived {stats.rows} rows from {stats.records} records "
                  f"({stats.duplicates} duplicates skipped) into {_archive_root(settings)}")


@app.command()
def sql(
    query: Annotated[Optional[str], typer.Argument(help="SQL, or the name of a named query")] = None,
    csv: Annotated[bool, typer.Option("--csv", help="CSV output")] = False,
    json: Annotated[bool, typer.Option("--json", help="JSON output")] = False,
    list_: Annotated[bool, typer.Option("--list", help="list the named queries")] = False,
    max_rows: Annotated[int, typer.Option(help="rows shown in table output")] = 200,
) -> None:
    """Run DuckDB SQL over the archive (views: one per event type, lineage, *_current)."""
    from kz_common.analytics.queries import list_queries, run_sql

    if list_ or query is None:
        for name, description in list_queries().items():
            print(f"{name:16} {description}")
        return
    if csv and json:
        raise ConfigError("choose one of --csv and --json")
    fmt: Literal["table", "csv", "json"] = "csv" if csv else "json" if json else "table"
    print(run_sql(_archive_root(get_settings()), query, fmt=fmt, max_rows=None if fmt != "table" else max_rows))


@app.command()
def replay(
    topic: Annotated[Optional[str], typer.Argument(help="logical topic to re-publish, e.g. extracted")] = None,
    tag: Annotated[str, typer.Option(help="names this replay; copies get ids derived from it")] = "replay",
    source: Annotated[str, typer.Option(help="'broker' or 'archive'")] = "broker",
    since: Annotated[Optional[datetime], typer.Option(help="only events at/after this time (UTC)")] = None,
    until: Annotated[Optional[datetime], typer.Option(help="only events before this time (UTC)")] = None,
    to_broker: Annotated[bool, typer.Option("--to-broker", help="restore a fresh broker from the archive")] = False,
    force: Annotated[bool, typer.Option(help="with --to-broker: write into non-empty topics")] = False,
) -> None:
    """Re-publish a topic as tagged copies (e.g. to re-verify with a new verifier), or restore a broker."""
    from services.archiver.replay import replay as do_replay
    from services.archiver.replay import restore

    settings, bootstrap = get_settings(), _require_bootstrap()
    if to_broker:
        stats = restore(settings, bootstrap, _archive_root(settings), force=force)
    else:
        if topic is None:
            raise ConfigError("name the topic to replay, or pass --to-broker")
        if source not in ("broker", "archive"):
            raise ConfigError(f"--source must be 'broker' or 'archive', got {source!r}")
        since, until = (_utc(t) for t in (since, until))
        stats = do_replay(settings, bootstrap, topic, tag=tag, source=source,  # type: ignore[arg-type]
                          archive_root=_archive_root(settings), since=since, until=until)
    console.print(str(stats))


@app.command()
def report(out: Annotated[Path, typer.Option(help="output directory")] = Path("var/report")) -> None:
    """HTML report with PNG plots of the flywheel, from the archive."""
    from kz_common.analytics.report import build_report

    result = build_report(_archive_root(get_settings()), out)
    console.print(f"wrote {result.html}")


@app.command()
def export(
    out: Annotated[Path, typer.Option(help="output directory")] = Path("var/export"),
    fmt: Annotated[str, typer.Option("--format", help="jsonl or parquet")] = "jsonl",
) -> None:
    """Write the curated SFT set and preference pairs (Hugging Face `datasets` loadable)."""
    from kz_common.admin import scan
    from kz_common.topics import physical
    from schemas import PreferenceRecorded, SampleCurated, SchemaError, decode
    from services.trainer.export import export_dataset

    if fmt not in ("jsonl", "parquet"):
        raise ConfigError(f"--format must be jsonl or parquet, got {fmt!r}")
    settings, bootstrap = get_settings(), _require_bootstrap()
    curated, pairs = [], []
    for rec in scan(bootstrap, physical(settings.kafka, "curated")):
        try:
            event = decode(rec.value)
        except SchemaError:
            continue  # not an event: the archive and dead letters keep it, training data never does
        if isinstance(event.payload, SampleCurated):
            curated.append(event)
        elif isinstance(event.payload, PreferenceRecorded):
            pairs.append(event)
    paths = export_dataset(curated, pairs, out, fmt=fmt)  # type: ignore[arg-type]
    console.print(", ".join(f"{k}: {v}" for k, v in paths.items()))


def _utc(t: datetime | None) -> datetime | None:
    from datetime import timezone

    return t.replace(tzinfo=timezone.utc) if t is not None and t.tzinfo is None else t
