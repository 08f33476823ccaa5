"""Circuit events on their way out of an engine: a bounded in-process buffer, and where production ships them.

Engines append one `BreakerEvent` per transition they make (under their own lock, or in the thread that read
the script's reply) and never wait for anything: whoever drains the buffer (the Redis engine's worker
thread, or the embedded process's history writer) moves the events on, off the request path.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable

from health.breaker.types import BreakerEvent, EventKind

DEFAULT_CAPACITY = 100_000
# The one field of each stream entry: the JSON of BreakerEvent.as_record().
HISTORY_FIELD = "e"
# Entries the history stream keeps (XADD ... MAXLEN ~): the ingest job reads it every second or so.
HISTORY_MAXLEN = 100_000


def history_stream(namespace: str) -> str:
    """The Redis stream production engines ship their events to (one per breaker namespace)."""
    return f"{namespace}:history"


class EventBuffer:
    """Thread-safe FIFO of circuit events, bounded: over `capacity`, the oldest event is dropped and counted.

    `add` is O(1), never raises and never waits beyond a lock held for a few operations. `emitted` counts
    every event added, per EventKind value (for metrics); its keys are fixed, so readers may iterate it.
    """

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity!r}")
        self.capacity = capacity
        self._events: deque[BreakerEvent] = deque()
        self._lock = threading.Lock()
        self.dropped = 0
        self.emitted: dict[str, int] = {str(kind): 0 for kind in EventKind}

    def add(self, event: BreakerEvent) -> None:
        with self._lock:
            events = self._events
            if len(events) >= self.capacity:
                events.popleft()
                self.dropped += 1
            events.append(event)
            kind = str(event.kind)
            self.emitted[kind] = self.emitted.get(kind, 0) + 1

    def drain(self, limit: int = 10_000) -> list[BreakerEvent]:
        """Take up to `limit` events out, oldest first."""
        with self._lock:
            events = self._events
            count = min(limit, len(events))
            return [events.popleft() for _ in range(count)]

    def requeue(self, events: Iterable[BreakerEvent]) -> None:
        """Put events taken by `drain` back at the front (their shipping failed), in their order.

        Newer events are kept first: if the buffer would overflow, the oldest (requeued) ones are dropped.
        """
        back = list(events)
        if not back:
            return
        with self._lock:
            queued = self._events
            room = self.capacity - len(queued)
            if room < len(back):
                lost = len(back) - max(room, 0)
                self.dropped += lost
                back = back[lost:]
            queued.extendleft(reversed(back))

    def __len__(self) -> int:
        return len(self._events)
