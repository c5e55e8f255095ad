"""Bounded memory of event ids, for idempotent consumers."""

from __future__ import annotations

from collections import OrderedDict


class SeenIds:
    """An insertion-ordered set that forgets its oldest ids beyond `capacity`."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity = capacity
        self._ids: OrderedDict[str, None] = OrderedDict()

    def __contains__(self, event_id: object) -> bool:
        return event_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, event_id: str) -> None:
        self._ids[event_id] = None
        self._ids.move_to_end(event_id)
        if len(self._ids) > self.capacity:
            self._ids.popitem(last=False)
