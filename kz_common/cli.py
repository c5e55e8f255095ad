"""The `kz` command line: broker, topics, one service, the whole flywheel, and tools."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from kz_common.config import get_settings
from kz_common.exceptions import KernelZeroError

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
console = Console(stderr=True)


@app.command()
def broker(
    port: Annotated[Optional[int], typer.Option(help="loopback port (default from config)")] = None,
) -> None:
    """Run the embedded Tansu broker on loopback until Ctrl-C."""
    from kz_common.admin import create_topics
    from kz_common.broker import EmbeddedBroker

    settings = get_settings()
    kafka = settings.kafka.model_copy(update={"embedded_port": port}) if port else settings.kafka
    with EmbeddedBroker(kafka) as b:
        created = create_topics(kafka, b.bootstrap)
        console.print(f"embedded broker at [bold]{b.bootstrap}[/] ({len(created)} topics created); Ctrl-C stops it")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            console.print("stopping broker")


@app.command()
def topics(create: Annotated[bool, typer.Option(help="create missing topics")] = False) -> None:
    """List (and optionally create) KernelZero topics on the configured broker."""
    from kz_common.admin import create_topics, list_topics
    from kz_common.topics import topic_specs

    settings = get_settings()
    bootstrap = _require_bootstrap()
    if create:
        console.print(f"created: {', '.join(create_topics(settings.kafka, bootstrap)) or 'none'}")
    present = list_topics(bootstrap)
    for spec in topic_specs(settings.kafka):
        parts = present.get(spec.physical)
        state = f"{parts} partitions" if parts else "[red]missing[/]"
        print(f"{spec.physical:28} {state:16} {', '.join(spec.event_types)}")


@app.command()
def service(
    name: str,
    metrics_port: Annotated[Optional[int], typer.Option(
        help="serve Prometheus /metrics on this port (0 = off; default runner.metrics_port)")] = None,
) -> None:
    """Run one long-lived service consumer (for containers and multi-host runs)."""
    from kz_common.logs import setup_logging
    from kz_common.registry import build_core
    from kz_common.runner import ServiceRunner, install_signal_handlers

    setup_logging()
    settings = get_settings()
    if metrics_port is not None:
        runner = settings.runner.model_copy(update={"metrics_port": metrics_port})
        settings = settings.model_copy(update={"runner": runner})
    bootstrap = _require_bootstrap()
    core = build_core(name, settings)

    async def main() -> None:
        stop = asyncio.Event()
        install_signal_handlers(stop)
        await ServiceRunner(core, settings, bootstrap).run(stop)

    asyncio.run(main())


@app.command()
def run(
    rounds: Annotated[int, typer.Option(help="flywheel rounds to run")] = 1,
    challenges: Annotated[int, typer.Option(help="challenges per round")] = 4,
    timeout: Annotated[float, typer.Option(help="seconds to wait for one round")] = 900.0,
    metrics_base_port: Annotated[Optional[int], typer.Option(
        help="service i serves /metrics on this port + i (0 = off; default runner.metrics_port)")] = None,
) -> None:
    """The main job: broker (embedded unless configured), all services, N rounds, a summary."""
    from kz_common.flywheel import run_flywheel

    settings = get_settings()
    base = settings.runner.metrics_port if metrics_base_port is None else metrics_base_port
    run_flywheel(settings, rounds=rounds, challenges=challenges, round_timeout_s=timeout, console=console,
                 metrics_base_port=base)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def verify(ctx: typer.Context) -> None:
    """Verify a solution: kz verify PROBLEM SOLUTION [--device cpu|cuda] [--json]."""
    from services.verifier.cli import main as verify_main

    raise typer.Exit(verify_main(list(ctx.args)))


def _require_bootstrap() -> str:
    """Configured bootstrap servers, or the embedded broker's default address if it is up."""
    from kz_common.broker import port_open, wait_until_answers

    kafka = get_settings().kafka
    if kafka.bootstrap_servers:
        wait_until_answers(kafka.bootstrap_servers, timeout_s=10.0)
        return kafka.bootstrap_servers
    if not port_open(kafka.embedded_host, kafka.embedded_port):
        raise KernelZeroError(
            f"no broker at {kafka.embedded_host}:{kafka.embedded_port}: start one with `kz broker` "
            "or set KZ_KAFKA__BOOTSTRAP_SERVERS"
        )
    return f"{kafka.embedded_host}:{kafka.embedded_port}"


def main() -> None:
    """Entry point: every expected failure is one clear line on stderr, exit status 1."""
    import kz_common.cli_tools  # noqa: F401  (registers archive, sql, replay, report, export)

    try:
        app()
    except KernelZeroError as exc:
        console.print(f"[red]kz: error:[/] {exc}")
        sys.exit(1)
    except FileNotFoundError as exc:
        console.print(f"[red]kz: error:[/] {exc}")
        sys.exit(1)


if __name__ == "__main__":
    # Run the importable module's app, not this __main__ copy: kz_common.cli_tools registers
    # its commands on kz_common.cli.app.
    from kz_common.cli import main as _main

    _main()
