"""Reads of circuit history (CircuitEvent): a circuit's events, and its states over a time range.

A circuit's state over time comes from two layers: the breaker's own transitions (opened, half_open,
closed, reopened, reset) and the operator holds on it (forced_open and released with its model; drained
and released with model "" for its whole provider). A hold ends at its release event, or at its `until`
when no release came first. A drain overrides the breaker's state while it lasts; a forced hold on the
circuit itself wins over its provider's drain, as `ConfigSet.control_for` decides for the engines.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Case, F, Q, QuerySet, Value, When, Window
from django.db.models.functions import RowNumber

from health.models import CircuitEvent

CLOSED = "closed"
OPEN = "open"
HALF_OPEN = "half_open"
FORCED_OPEN = "forced_open"
DRAINED = "drained"

Kind = CircuitEvent.Kind
# The breaker's own state after each of its transitions.
BREAKER_STATE: dict[str, str] = {
    Kind.OPENED: OPEN,
    Kind.REOPENED: OPEN,
    Kind.HALF_OPEN: HALF_OPEN,
    Kind.CLOSED: CLOSED,
    Kind.RESET: CLOSED,
}
HOLD_KINDS = (Kind.FORCED_OPEN, Kind.DRAINED, Kind.RELEASED)


@dataclass(frozen=True)
class Segment:
    """One stretch of one circuit's state; `model` is "" for a provider-wide drain (circuit_segments)."""

    provider: str
    model: str
    state: str  # "closed", "open", "half_open", "forced_open", "drained"
    start: datetime
    end: datetime


def circuit_event_list(*, provider: str, model: str, limit: int = 50) -> list[CircuitEvent]:
    """The circuit's last `limit` events, newest first, with its provider's drains and their releases."""
    return list(CircuitEvent.objects.filter(provider=provider, model__in=_models(model)).order_by("-at", "-id")[:limit])


def circuit_timeline(*, provider: str, model: str, since: datetime, until: datetime) -> list[Segment]:
    """Contiguous segments covering [since, until]: the state at `since` from the last events before it
    (closed when none), then every change. Two queries."""
    scope = Q(provider=provider, model__in=_models(model))
    before, during = _before(scope, since), _during(scope, since, until)
    track = _Track(provider, model)
    for event in before:
        track.apply(event, drains=True)
    segments = _Segments(provider, model, track.state(since, drains=True), since)
    for event in during:
        _advance_to(segments, track, event.at, drains=True)
        track.apply(event, drains=True)
        segments.at(event.at, track.state(event.at, drains=True))
    _advance_to(segments, track, until, drains=True)
    return segments.close(until)


def circuit_segments(*, since: datetime, until: datetime) -> list[Segment]:
    """The non-closed segments in [since, until] of every circuit with events, by provider, model and start.

    A provider's drains are segments of their own (model "", state "drained"); the circuits' segments
    carry their breaker states and forced holds only, so a drained provider is counted once. Two queries.
    """
    scope = Q()
    before, during = _before(scope, since), _during(scope, since, until)
    by_key: dict[tuple[str, str], list[CircuitEvent]] = defaultdict(list)
    for event in before:
        by_key[(event.provider, event.model)].append(event)
    starts = {key: len(events) for key, events in by_key.items()}  # events before `since` come first
    for event in during:
        by_key[(event.provider, event.model)].append(event)
    out: list[Segment] = []
    for (provider, model), events in sorted(by_key.items()):
        track = _Track(provider, model)
        first = starts.get((provider, model), 0)
        for event in events[:first]:
            track.apply(event, drains=False)
        segments = _Segments(provider, model, track.state(since, drains=False), since)
        for event in events[first:]:
            _advance_to(segments, track, event.at, drains=False)
            track.apply(event, drains=False)
            segments.at(event.at, track.state(event.at, drains=False))
        _advance_to(segments, track, until, drains=False)
        out += [s for s in segments.close(until) if s.state != CLOSED]
    return out


def circuit_events_last_before(scope: Q, since: datetime) -> QuerySet[CircuitEvent]:
    """The last event before `since` of each layer of each circuit (breaker state, forced hold, drain): all
    a timeline starting at `since` or later needs of the events before it (the retention job keeps these).

    One query: a row number per (provider, model, layer), newest first, keeping the first of each.
    """
    layer = Case(
        When(kind__in=list(BREAKER_STATE), then=Value("state")),
        When(model="", then=Value("drain")),
        default=Value("hold"),
    )
    ranked = (
        CircuitEvent.objects.filter(scope, at__lt=since)
        .annotate(
            layer=layer,
            rank=Window(
                RowNumber(), partition_by=[F("provider"), F("model"), layer], order_by=[F("at").desc(), F("id").desc()]
            ),
        )
        .filter(rank=1)
    )
    return ranked


# ---------- Internals ----------


def _models(model: str) -> list[str]:
    return [model, ""] if model else [""]


def _before(scope: Q, since: datetime) -> list[CircuitEvent]:
    return sorted(circuit_events_last_before(scope, since), key=lambda e: (e.at, e.id))


def _during(scope: Q, since: datetime, until: datetime) -> QuerySet[CircuitEvent]:
    return CircuitEvent.objects.filter(scope, at__gte=since, at__lte=until).order_by("at", "id")


class _Track:
    """The layers of one circuit (or of a provider, for model "") as events are applied in time order."""

    def __init__(self, provider: str, model: str) -> None:
        self.provider = provider
        self.model = model
        self.breaker = CLOSED
        self.hold_until: datetime | None = None
        self.held = False
        self.drain_until: datetime | None = None
        self.drained = False

    def apply(self, event: CircuitEvent, *, drains: bool) -> None:
        if event.kind in BREAKER_STATE:
            if event.model == self.model:
                self.breaker = BREAKER_STATE[event.kind]
            return
        provider_wide = event.model == ""
        if provider_wide and not drains and self.model != "":
            return
        if event.kind == Kind.RELEASED:
            if provider_wide:
                self.drained, self.drain_until = False, None
            else:
                self.held, self.hold_until = False, None
        elif event.kind == Kind.DRAINED or provider_wide:
            self.drained, self.drain_until = True, event.until
        else:
            self.held, self.hold_until = True, event.until

    def expiries(self, after: datetime, before: datetime) -> Iterable[datetime]:
        """Hold expiries strictly inside (after, before], in time order."""
        ends = [
            t
            for on, t in ((self.held, self.hold_until), (self.drained, self.drain_until))
            if on and t is not None and after < t <= before
        ]
        return sorted(ends)

    def state(self, at: datetime, *, drains: bool) -> str:
        if self.held and (self.hold_until is None or at < self.hold_until):
            return FORCED_OPEN
        if self.drained and (self.drain_until is None or at < self.drain_until):
            return DRAINED if (drains or self.model == "") else self.breaker
        return self.breaker


class _Segments:
    def __init__(self, provider: str, model: str, state: str, start: datetime) -> None:
        self.provider = provider
        self.model = model
        self.state = state
        self.start = start
        self.done: list[Segment] = []

    def at(self, when: datetime, state: str) -> None:
        if state == self.state:
            return
        if when > self.start:
            self.done.append(Segment(self.provider, self.model, self.state, self.start, when))
        self.state, self.start = state, max(when, self.start)

    def close(self, until: datetime) -> list[Segment]:
        self.done.append(Segment(self.provider, self.model, self.state, self.start, max(until, self.start)))
        return self.done


def _advance_to(segments: _Segments, track: _Track, when: datetime, *, drains: bool) -> None:
    """Record the holds that expired before `when` (no event marks an expiry)."""
    for end in track.expiries(segments.start, when):
        segments.at(end, track.state(end, drains=drains))
