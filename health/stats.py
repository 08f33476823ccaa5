"""Traffic figures per circuit (error share, p50 latency), read from a source a higher app registers.

The figures come from the request logs, which sit above this app: the requestlogs app registers the
function that reads its per-minute attempt aggregates (`register_circuit_stats`, from its AppConfig.ready),
so Provider Health shows them without this app importing requestlogs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class CircuitStats:
    """Upstream attempts on one (provider, model) since a moment."""

    attempts: int
    errors: int  # attempts that failed (a failure status code, a timeout or a connection error)
    p50_ms: float | None  # median attempt duration, None without attempts

    @property
    def error_share(self) -> float | None:
        return self.errors / self.attempts if self.attempts else None


StatsSource = Callable[[datetime], Mapping[tuple[str, str], CircuitStats]]

_source: StatsSource | None = None


def register_circuit_stats(source: StatsSource) -> None:
    global _source
    _source = source


def circuit_stats(since: datetime) -> Mapping[tuple[str, str], CircuitStats]:
    """Figures per (provider, model) since `since`; empty when no source is registered."""
    return _source(since) if _source is not None else {}
