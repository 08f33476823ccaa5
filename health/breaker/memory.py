"""In-process breaker (embedded mode): one lock, a deque of timestamps per circuit."""

from __future__ import annotations

import bisect
import threading
from collections import deque
from operator import itemgetter

from health.breaker.base import DEFAULT_PROBE_TIMEOUT_SECONDS, BreakerEngine
from health.breaker.events import EventBuffer
from health.breaker.types import (
    BreakerEvent,
    CircuitSnapshot,
    Clock,
    ConfigSet,
    Control,
    Decision,
    EventKind,
    Outcome,
    ResetResult,
    State,
    SystemClock,
    Verdict,
    classify,
    label_to_status,
    to_datetime,
)

_at = itemgetter(0)  # an event's time


class _Circuit:
    __slots__ = (
        "closed_decision",
        "consecutive_opens",
        "cooldown_until",
        "events",
        "failures",
        "generation",
        "last_failure_at",
        "last_failure_label",
        "model",
        "opened_at",
        "probe_at",
        "provider",
        "state",
        "tracked",
    )

    def __init__(self, provider: str, model: str, generation: int = 0) -> None:
        self.provider = provider
        self.model = model
        self.state = State.CLOSED
        self.generation = generation
        # (timestamp, is_failure), oldest first: a rolling window with no fixed boundaries.
        self.events: deque[tuple[float, bool]] = deque()
        self.failures = 0
        self.opened_at: float | None = None
        self.cooldown_until: float | None = None
        self.consecutive_opens = 0
        self.last_failure_at: float | None = None
        self.last_failure_label: str | None = None
        self.probe_at: float | None = None
        self.tracked = False
        self.closed_decision = self._closed_decision()

    def _closed_decision(self) -> Decision:
        # Cached: the hot path (closed circuit) returns it without allocating.
        return Decision(self.provider, self.model, True, State.CLOSED, False, self.generation)

    def bump(self) -> None:
        self.generation += 1
        self.closed_decision = self._closed_decision()

    def trim(self, now: float, window: float) -> None:
        horizon = now - window
        events = self.events
        while events and events[0][0] <= horizon:
            _, failed = events.popleft()
            if failed:
                self.failures -= 1


class MemoryEngine(BreakerEngine):
    """Thread-safe, per-process. Times come from `clock` (epoch seconds).

    `local=True` marks the events it emits as decided by this process alone (the Redis engine's fallback
    while Redis is unreachable).
    """

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        config: ConfigSet | None = None,
        probe_timeout_seconds: float = DEFAULT_PROBE_TIMEOUT_SECONDS,
        events: EventBuffer | None = None,
        local: bool = False,
    ) -> None:
        self.events = events if events is not None else EventBuffer()
        self._local = local
        self._clock = clock or SystemClock()
        self._config = config or ConfigSet()
        self._controls = self._config.controls  # read on the hot path without going through the config
        if not probe_timeout_seconds > 0:
            raise ValueError(f"probe_timeout_seconds must be positive, got {probe_timeout_seconds!r}")
        self._probe_timeout = probe_timeout_seconds
        self._circuits: dict[tuple[str, str], _Circuit] = {}
        self._lock = threading.Lock()

    @property
    def config(self) -> ConfigSet:
        return self._config

    def configure(self, config: ConfigSet) -> None:
        # The holds first: a caller that can see the new config (in a snapshot) is refused by its holds too.
        self._controls = config.controls
        self._config = config

    def _circuit(self, provider: str, model: str) -> _Circuit:
        key = (provider, model)
        circuit = self._circuits.get(key)
        if circuit is None:
            circuit = self._circuits[key] = _Circuit(provider, model)
        return circuit

    def allow(self, provider: str, model: str) -> Decision:
        now = self._clock.now()
        with self._lock:
            c = self._circuit(provider, model)
            # An operator's hold refuses every call and every probe. No holds: one falsy check; holds on
            # other circuits: two dict lookups.
            controls = self._controls
            if (
                controls
                and ((provider, model) in controls or (provider, "") in controls)
                and self._config.control_for(provider, model, now) is not None
            ):
                return Decision(provider, model, False, State.OPEN, False, c.generation)
            if c.state is State.CLOSED:
                return c.closed_decision
            if c.state is State.OPEN:
                assert c.cooldown_until is not None
                if now < c.cooldown_until:
                    return Decision(provider, model, False, State.OPEN, False, c.generation)
                c.state = State.HALF_OPEN
            elif c.probe_at is not None and now < c.probe_at + self._probe_timeout:
                return Decision(provider, model, False, State.HALF_OPEN, False, c.generation)
            # Half-open with a free (or abandoned) slot: this call is the probe.
            c.probe_at = now
            c.bump()
            self._emit(EventKind.HALF_OPEN, c, now)
            return Decision(provider, model, True, State.HALF_OPEN, True, c.generation)

    def record(self, decision: Decision, outcome: Outcome) -> None:
        if not decision.allowed:
            return
        self.apply(decision, outcome, self._clock.now())

    def apply(self, decision: Decision, outcome: Outcome, now: float) -> None:
        """Apply one outcome at time `now` (the Redis backend replays outcomes here while Redis is down)."""
        settings = self._config.for_circuit(decision.provider, decision.model)
        verdict = classify(outcome, settings)
        with self._lock:
            c = self._circuit(decision.provider, decision.model)
            if decision.generation != c.generation:
                return  # started before a transition: it does not move the circuit
            if verdict is Verdict.IGNORE:
                if decision.probe and c.state is State.HALF_OPEN:
                    c.probe_at = None  # a cancelled probe gives the slot back at once
                    c.bump()
                return
            failed = verdict is Verdict.FAILURE
            if decision.probe:
                if c.state is not State.HALF_OPEN:
                    return
                c.tracked = True
                if failed:
                    self._note_failure(c, now, outcome)
                    cooldown = settings.cooldown_for(c.consecutive_opens + 1)
                    self._open(c, now, cooldown)
                    self._emit(EventKind.REOPENED, c, now, cooldown=cooldown)
                else:
                    c.state = State.CLOSED
                    c.events.clear()
                    c.failures = 0
                    c.consecutive_opens = 0
                    c.cooldown_until = None
                    c.opened_at = None
                    c.probe_at = None
                    c.bump()
                    self._emit(EventKind.CLOSED, c, now)
                return
            if c.state is not State.CLOSED:
                return
            c.tracked = True
            events = c.events
            if events and now < events[-1][0]:
                # The wall clock stepped back (an NTP step, a resumed VM): kept in time order, which the trim and
                # the reads rely on to stop at the first event inside the window, as Redis's sorted sets are.
                events.insert(bisect.bisect_right(events, now, key=_at), (now, failed))
            else:
                events.append((now, failed))
            if failed:
                c.failures += 1
                self._note_failure(c, now, outcome)
            c.trim(now, settings.window_seconds)
            if c.failures >= settings.failure_threshold and len(c.events) >= settings.minimum_requests:
                cooldown = settings.cooldown_for(c.consecutive_opens + 1)
                self._open(c, now, cooldown)
                self._emit(EventKind.OPENED, c, now, cooldown=cooldown, window=(c.failures, len(c.events)))

    def _emit(
        self,
        kind: EventKind,
        c: _Circuit,
        now: float,
        *,
        cooldown: float | None = None,
        window: tuple[int, int] | None = None,
    ) -> None:
        """One event for the transition just made (called under the lock, after the generation moved)."""
        self.events.add(
            BreakerEvent(
                kind=kind,
                provider=c.provider,
                model=c.model,
                at=now,
                generation=c.generation,
                failures=window[0] if window is not None else None,
                total=window[1] if window is not None else None,
                last_status=(c.last_failure_label or "") if cooldown is not None else "",
                cooldown_seconds=float(cooldown) if cooldown is not None else None,
                local=self._local,
            )
        )

    @staticmethod
    def _note_failure(c: _Circuit, now: float, outcome: Outcome) -> None:
        c.last_failure_at = now
        c.last_failure_label = outcome.label

    @staticmethod
    def _open(c: _Circuit, now: float, cooldown: float) -> None:
        c.consecutive_opens += 1
        c.state = State.OPEN
        c.opened_at = now
        c.cooldown_until = now + cooldown
        c.probe_at = None
        c.bump()

    def _snapshot(self, c: _Circuit, now: float) -> CircuitSnapshot:
        settings = self._config.for_circuit(c.provider, c.model)
        # Count without trimming: reads never drop events (only recording does, as in Redis).
        horizon = now - settings.window_seconds
        total = failures = 0
        for ts, failed in reversed(c.events):
            if ts <= horizon:
                break
            total += 1
            failures += failed
        state = c.state
        probe_in_flight = False
        if state is State.OPEN and c.cooldown_until is not None and now >= c.cooldown_until:
            state = State.HALF_OPEN
        elif state is State.HALF_OPEN:
            probe_in_flight = c.probe_at is not None and now < c.probe_at + self._probe_timeout
        return CircuitSnapshot(
            provider=c.provider,
            model=c.model,
            state=state,
            failure_count=failures,
            total_requests=total,
            cooldown_until=to_datetime(c.cooldown_until),
            consecutive_opens=c.consecutive_opens,
            last_failure_at=to_datetime(c.last_failure_at),
            last_failure_status=label_to_status(c.last_failure_label),
            opened_at=to_datetime(c.opened_at),
            generation=c.generation,
            probe_in_flight=probe_in_flight,
            control=self._config.control_for(c.provider, c.model, now),
        )

    def hold(self, provider: str, model: str) -> Control | None:
        return self._config.control_for(provider, model, self._clock.now())

    def get(self, provider: str, model: str) -> CircuitSnapshot:
        now = self._clock.now()
        with self._lock:
            c = self._circuits.get((provider, model)) or _Circuit(provider, model)
            return self._snapshot(c, now)

    def list_circuits(self) -> list[CircuitSnapshot]:
        now = self._clock.now()
        with self._lock:
            rows = [self._snapshot(c, now) for c in self._circuits.values() if c.tracked]
        return sorted(rows, key=lambda s: (s.provider, s.model))

    def reset(self, provider: str, model: str) -> ResetResult:
        now = self._clock.now()
        with self._lock:
            old = self._circuits.get((provider, model)) or _Circuit(provider, model)
            before = self._snapshot(old, now)
            # Keep the generation moving so outcomes of calls started before the reset are stale.
            fresh = _Circuit(provider, model, generation=old.generation + 1)
            fresh.tracked = True
            self._circuits[(provider, model)] = fresh
            return ResetResult(before=before, after=self._snapshot(fresh, now))

    def seed(
        self,
        *,
        provider: str,
        model: str,
        state: State,
        generation: int,
        consecutive_opens: int,
        cooldown_until: float | None,
        opened_at: float | None,
    ) -> None:
        """Start a circuit from a known state (the Redis backend's local fallback, seeded from its mirror)."""
        with self._lock:
            c = _Circuit(provider, model, generation=generation)
            c.tracked = True
            c.consecutive_opens = consecutive_opens
            if state is not State.CLOSED and cooldown_until is not None:
                # Half-open becomes open with a past cooldown: the next caller here takes the probe.
                c.state = State.OPEN
                c.cooldown_until = cooldown_until
                c.opened_at = opened_at
            self._circuits[(provider, model)] = c
