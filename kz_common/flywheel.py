"""`kz run`: the whole flywheel on one machine.

Starts the broker (embedded unless bootstrap servers are configured), creates
the topics, launches every service as its own `kz service NAME` process (as a
container would), then for each round publishes `round.started` and follows
the events until every sample of the round has a curation decision or a dead
letter. Nothing is simulated: the summary counts events read back from the log.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from kz_common.admin import create_topics
from kz_common.broker import ensure_broker
from kz_common.config import Settings
from kz_common.exceptions import KernelZeroError
from kz_common.registry import SERVICES
from kz_common.topics import physical
from kz_common.watch import RoundLedger, Watcher
from schemas import AnyEnvelope, Producer, RoundStarted, encode, make_event

STAGES = ("solutions", "extracted", "verified", "curated")


def run_flywheel(
    settings: Settings, *, rounds: int, challenges: int, round_timeout_s: float, console: Console,
    metrics_base_port: int = 0,
) -> list[RoundLedger]:
    with running_services(settings, console, metrics_base_port) as fleet:
        watcher = Watcher(settings.kafka, fleet.bootstrap)
        ledgers = []
        first = watcher.next_round()
        for r in range(first, first + rounds):
            publish_round(settings, fleet.bootstrap, r, challenges)
            ledgers.append(_follow(watcher, r, round_timeout_s, fleet, console))
        _summary(ledgers, watcher, console)
        console.print(f"event log archived under {settings.paths.data_dir / 'archive'}: "
                      "try `kz sql pass_rate` or `kz report`")
        return ledgers


@dataclass(frozen=True)
class Fleet:
    """The running broker and service processes of one `running_services` block."""

    bootstrap: str
    procs: dict[str, subprocess.Popen[bytes]]
    logs: Path

    def check_alive(self) -> None:
        """Raise if any service process has exited (a long-lived service never should)."""
        dead = [n for n, p in self.procs.items() if p.poll() is not None]
        if dead:
            raise KernelZeroError(f"service(s) {', '.join(dead)} exited; see their logs in {self.logs}")


@contextmanager
def running_services(settings: Settings, console: Console, metrics_base_port: int = 0) -> Iterator[Fleet]:
    """Broker (embedded unless configured) + topics + every service process, stopped on exit."""
    logs = settings.paths.data_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with ensure_broker(settings.kafka, logs / "broker.log") as bootstrap:
        create_topics(settings.kafka, bootstrap)
        console.print(f"broker {bootstrap}; logs in {logs}")
        procs = _start_services(settings, bootstrap, logs, metrics_base_port)
        if metrics_base_port:
            ports = ", ".join(f"{n} {metrics_base_port + i}" for i, n in enumerate(SERVICES))
            console.print(f"metrics at http://{settings.runner.metrics_host}:PORT/metrics, PORT: {ports}")
        try:
            yield Fleet(bootstrap, procs, logs)
        finally:
            _stop_services(procs)


def _service_env(settings: Settings, bootstrap: str) -> dict[str, str]:
    import torch

    services: dict[str, dict[str, Any]] = {k: dict(v) for k, v in settings.services.items()}
    if not torch.cuda.is_available():  # CPU: shapes the Triton interpreter can run, verifier on CPU
        services.setdefault("challenger", {}).setdefault("cpu_mode", True)
        services.setdefault("challenger", {}).setdefault("device", "cpu")
        services.setdefault("verifier", {}).setdefault("device", "cpu")
        services.setdefault("curator", {}).setdefault("require_perf", False)
        services.setdefault("trainer", {}).setdefault("eval_shape_source", "cpu")
        # The untrained tiny model writes noise: long samples only cost CPU time.
        services.setdefault("solver", {}).setdefault("max_tokens", 256)
        services.setdefault("solver", {}).setdefault("n_samples", 2)
        # Small enough windows that a CPU run can reach a training request and a decision.
        services.setdefault("curator", {}).setdefault("window_verdicts", 8)
        services.setdefault("curator", {}).setdefault("train_threshold", 4)
        services.setdefault("evaluator", {}).setdefault("min_samples", 4)
    # The children read their settings from the environment: pass on what the caller may have set
    # in code (tests, benchmarks), so they share this run's topics and data dir (caches, archive).
    return {**os.environ, "KZ_KAFKA__BOOTSTRAP_SERVERS": bootstrap, "KZ_SERVICES": json.dumps(services),
            "KZ_KAFKA__TOPIC_PREFIX": settings.kafka.topic_prefix,
            "KZ_PATHS__DATA_DIR": str(settings.paths.data_dir), "PYTHONUNBUFFERED": "1"}


def _start_services(
    settings: Settings, bootstrap: str, logs: Path, metrics_base_port: int = 0
) -> dict[str, subprocess.Popen[bytes]]:
    env = _service_env(settings, bootstrap)
    procs = {}
    # Every service, plus the archiver: the embedded broker forgets everything when it stops.
    commands = {name: ["service", name] for name in SERVICES} | {"archiver": ["archive", "--follow"]}
    for i, (name, args) in enumerate(commands.items()):
        # One host, so one port each (base + index); the archiver has no metrics. Set for
        # every child, so a configured runner.metrics_port is never bound by all of them.
        port = metrics_base_port + i if metrics_base_port and name in SERVICES else 0
        log = open(logs / f"{name}.log", "ab")
        procs[name] = subprocess.Popen(
            [sys.executable, "-m", "kz_common.cli", *args],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**env, "KZ_RUNNER__METRICS_PORT": str(port)}, start_new_session=True,
        )
    return procs


def _stop_services(procs: dict[str, subprocess.Popen[bytes]]) -> None:
    for proc in procs.values():
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    for proc in procs.values():
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def publish_round(settings: Settings, bootstrap: str, r: int, n: int, seed: int | None = None) -> None:
    """Publish `round.started` for round `r` with `n` challenges (seed: default `r`) on the control topic."""
    event = make_event(RoundStarted(round=r, n_challenges=n, seed=r if seed is None else seed),
                       producer=Producer(service="kz-run", version="1"), correlation_id=f"round-{r}")
    publish_events(settings, bootstrap, "control", [event])


def publish_events(settings: Settings, bootstrap: str, topic: str, events: list[AnyEnvelope]) -> None:
    """Publish envelopes on logical `topic`, keyed by correlation id, acknowledged by all replicas."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for event in events:
        producer.send(physical(settings.kafka, topic), key=event.correlation_id.encode(), value=encode(event))
    producer.flush()
    producer.close()


def _follow(watcher: Watcher, r: int, timeout_s: float, fleet: Fleet, console: Console) -> RoundLedger:
    columns = (TextColumn("{task.description:>10}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    deadline = time.monotonic() + timeout_s
    with Progress(*columns, console=console, transient=False) as bar:
        tasks = {s: bar.add_task(s, total=None) for s in STAGES}
        console.print(f"[bold]round {r}[/]")
        while True:
            watcher.poll()
            ledger = watcher.ledger(r)
            for stage in STAGES:
                bar.update(tasks[stage], completed=ledger.accounted(stage), total=ledger.expected_samples or None)
            if ledger.complete():
                return ledger
            fleet.check_alive()
            if time.monotonic() > deadline:
                raise KernelZeroError(f"round {r} not complete after {timeout_s:.0f} s: {ledger.describe()}")


def _summary(ledgers: list[RoundLedger], watcher: Watcher, console: Console) -> None:
    from rich.table import Table

    table = Table(title="flywheel summary (events read back from the log)")
    for col in ("round", "tasks", "samples", "extract ok", "pass", "kept", "DLQ", "pass rate"):
        table.add_column(col, justify="right")
    for led in ledgers:
        rate = f"{led.passed / led.verified:.0%}" if led.verified else "-"
        table.add_row(str(led.round), str(led.challenges), str(led.samples), f"{led.extracted_ok}/{led.extracted}",
                      f"{led.passed}/{led.verified}", f"{led.kept}/{led.curated}", str(led.dead), rate)
    console.print(table)
    console.print(watcher.training_summary())
