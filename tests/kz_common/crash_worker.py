"""A relay solver in its own process, for the crash test: `python -m tests.kz_common.crash_worker DELAY`."""

from __future__ import annotations

import asyncio
import os
import sys
import time

from kz_common.config import get_settings
from kz_common.runner import ServiceRunner, install_signal_handlers
from schemas import AnyEnvelope
from tests.kz_common.relay import Relay


class SlowRelay(Relay):
    def __init__(self, delay: float) -> None:
        super().__init__("solver", ("challenges",))
        self.delay = delay

    def process(self, event: AnyEnvelope):  # type: ignore[no-untyped-def]
        time.sleep(self.delay)  # so the test can kill us mid-stream
        # model_id names the worker process, so tests can see how the group shared the work
        return [p.model_copy(update={"model_id": f"pid-{os.getpid()}"}) for p in super().process(event)]


async def main(delay: float) -> None:
    settings = get_settings()
    stop = asyncio.Event()
    install_signal_handlers(stop)
    assert settings.kafka.bootstrap_servers
    await ServiceRunner(SlowRelay(delay), settings, settings.kafka.bootstrap_servers).run(stop)


if __name__ == "__main__":
    asyncio.run(main(float(sys.argv[1])))
