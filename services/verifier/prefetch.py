"""Reference bundles built ahead of verify_batch's workers (core.py): which problem's
bundle to build next, and how far ahead of the workers a build may start."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from services.verifier import reference
from services.verifier.options import VerifyOptions
from services.verifier.static_check import check_solution

if TYPE_CHECKING:  # core imports this module
    from services.verifier.core import Session


class Progress:
    """The highest item index a worker has started, for the prefetcher to stay close behind."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._top = -1
        self._stopped = False

    def started(self, i: int) -> None:
        with self._cv:
            self._top = max(self._top, i)
            self._cv.notify_all()

    def stop(self) -> None:
        with self._cv:
            self._stopped = True
            self._cv.notify_all()

    def wait_for(self, i: int) -> bool:
        """Block until item `i` or a later one has started; False once stopped."""
        with self._cv:
            self._cv.wait_for(lambda: self._stopped or self._top >= i)
            return not self._stopped


class Plan:
    """The first use of each problem that needs a bundle, handed out in item order to
    however many builders share it, each with the item its build waits for: the one
    `ahead` sandboxed items before it (candidates that fail the static check take no
    time, and their problems need no bundle)."""

    def __init__(self, items: list[tuple[str, str]], options: VerifyOptions,
                 ahead: int) -> None:
        self._todo = iter(enumerate(items))
        self._seen: set[str] = set()
        self._sandboxed: list[int] = []  # items so far that pass the static check
        self._options, self._ahead = options, ahead
        self._lock = threading.Lock()

    def next(self) -> tuple[int, str, int] | None:
        """(first use, problem, the item whose start lets its build begin), or None."""
        with self._lock:
            for i, (problem, solution) in self._todo:
                if not check_solution(solution, self._options.policy).ok:
                    continue
                self._sandboxed.append(i)
                key = reference.problem_key(problem, self._options)
                if key in self._seen:
                    continue
                self._seen.add(key)
                k = len(self._sandboxed) - 1 - self._ahead
                return i, problem, self._sandboxed[k] if k >= 0 else -1
            return None


def prefetch(session: Session, progress: Progress, plan: Plan) -> None:
    """Build each problem's bundle before the workers reach it (a build is an own sandboxed
    reference run, ~5-15 s on the H200: workers that met an unbuilt problem waited for it
    about as long as they spent verifying), at most the plan's `ahead` sandboxed items
    ahead of the workers, so the bundles held do not grow with the batch. Several builders
    may share one plan."""
    while (job := plan.next()) is not None:
        _, problem, after = job
        if not progress.wait_for(after):
            return
        try:
            session.ensure(problem)
        except Exception:  # noqa: BLE001 - the worker that needs it builds it and reports
            continue
