"""Value types of the breaker engine: states, outcomes, settings, decisions, snapshots, clocks.

Pure Python (no Django), so gateway processes and test subprocesses import it cheaply.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Protocol


class State(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class ErrorKind(StrEnum):
    """Upstream results that carry no status code."""

    TIMEOUT = "timeout"
    CONNECTION = "connection_error"
    # The client went away or its own deadline passed before the upstream answered.
    CANCELLED = "cancelled"


class Verdict(StrEnum):
    SUCCESS = "s"
    FAILURE = "f"
    IGNORE = "c"


@dataclass(frozen=True, slots=True)
class Outcome:
    """What happened to one upstream call: a status code, or an error kind."""

    status: int | None = None
    error: ErrorKind | None = None

    # Outcomes are immutable values: the common ones are made once (two per proxied request otherwise).
    @classmethod
    def of_status(cls, status: int) -> Outcome:
        known = _BY_STATUS.get(status)
        return known if known is not None else cls(status=status)

    @classmethod
    def timeout(cls) -> Outcome:
        return _BY_ERROR[ErrorKind.TIMEOUT]

    @classmethod
    def connection_error(cls) -> Outcome:
        return _BY_ERROR[ErrorKind.CONNECTION]

    @classmethod
    def cancelled(cls) -> Outcome:
        return _BY_ERROR[ErrorKind.CANCELLED]

    @property
    def label(self) -> str:
        """What the Provider Health tab shows as the last failure's code."""
        return str(self.error) if self.error is not None else str(self.status)


_BY_STATUS = {status: Outcome(status=status) for status in range(100, 600)}
_BY_ERROR = {kind: Outcome(error=kind) for kind in ErrorKind}

DEFAULT_FAILURE_STATUS_CODES: tuple[int, ...] = (429, 500, 502, 503, 504)


# The longest failure window the settings allow (seconds). The Redis engine keeps a circuit's window sets this long
# after their last outcome, so a window widened after a quiet spell still counts what it covers.
WINDOW_MAX = 3600


@dataclass(frozen=True, slots=True)
class BreakerSettings:
    """Effective thresholds of one circuit (the global row merged with its override)."""

    failure_threshold: int = 5
    window_seconds: int = 60
    initial_cooldown_seconds: int = 60
    cooldown_cap_seconds: int = 300
    minimum_requests: int = 10
    failure_status_codes: frozenset[int] = field(default_factory=lambda: frozenset(DEFAULT_FAILURE_STATUS_CODES))

    def cooldown_for(self, consecutive_opens: int) -> int:
        """Seconds of the n-th consecutive open: initial * 2^(n-1), capped (never below the initial)."""
        cap = max(self.cooldown_cap_seconds, self.initial_cooldown_seconds)
        n = max(consecutive_opens, 1)
        # Past 2^20 the cap has long been reached; avoid huge integers.
        return min(self.initial_cooldown_seconds * (1 << min(n - 1, 20)), cap)


def classify(outcome: Outcome, settings: BreakerSettings) -> Verdict:
    """Failure: a configured status code, a timeout, a connection error. Cancelled: neither. Else success."""
    if outcome.error is ErrorKind.CANCELLED:
        return Verdict.IGNORE
    if outcome.error is not None:
        return Verdict.FAILURE
    if outcome.status is not None and outcome.status in settings.failure_status_codes:
        return Verdict.FAILURE
    return Verdict.SUCCESS


class ControlKind(StrEnum):
    """An operator's hold on circuits (the kill switch): no traffic and no probe until released or expired."""

    FORCED_OPEN = "forced_open"  # one (provider, model) circuit
    DRAINED = "drained"  # every circuit of a provider


@dataclass(frozen=True, slots=True)
class Control:
    """One operator hold. `model` is "" for a drain (the whole provider)."""

    kind: ControlKind
    provider: str
    model: str
    reason: str
    until: float | None = None  # epoch seconds; None = until released
    since: float | None = None  # epoch seconds it was set

    def active(self, now: float) -> bool:
        return self.until is None or now < self.until


@dataclass(frozen=True, slots=True)
class ConfigSet:
    """The global settings plus per-(provider, model) overrides, already merged, and the operator holds.

    `controls` is keyed by (provider, model) for a forced-open circuit and (provider, "") for a drain.
    """

    default: BreakerSettings = field(default_factory=BreakerSettings)
    overrides: Mapping[tuple[str, str], BreakerSettings] = field(default_factory=dict)
    controls: Mapping[tuple[str, str], Control] = field(default_factory=dict)

    def for_circuit(self, provider: str, model: str) -> BreakerSettings:
        return self.overrides.get((provider, model), self.default)

    def control_for(self, provider: str, model: str, now: float) -> Control | None:
        """The hold in force on this circuit at `now` (a forced-open circuit wins over its provider's drain)."""
        controls = self.controls
        if not controls:
            return None
        for key in ((provider, model), (provider, "")):
            control = controls.get(key)
            if control is not None and control.active(now):
                return control
        return None


@dataclass(frozen=True, slots=True)
class Decision:
    """Answer of `allow()`. Pass it back to `record()`: it names the generation the call started in."""

    provider: str
    model: str
    allowed: bool
    state: State
    # True when this call holds the circuit's single half-open probe slot.
    probe: bool = False
    # Bumped on every transition and every probe grant; an outcome from another generation is stale.
    generation: int = 0


@dataclass(frozen=True, slots=True)
class CircuitSnapshot:
    """What the engine knows about one circuit at one instant."""

    provider: str
    model: str
    state: State
    failure_count: int
    total_requests: int
    cooldown_until: datetime | None
    consecutive_opens: int
    last_failure_at: datetime | None
    last_failure_status: int | str | None
    opened_at: datetime | None
    generation: int = 0
    probe_in_flight: bool = False
    # An operator's hold in force on this circuit (forced open, or its provider drained), if any.
    control: Control | None = None

    def as_dict(self) -> dict[str, object]:
        return {
            "provider": self.provider,
            "model": self.model,
            "state": str(self.state),
            "failure_count": self.failure_count,
            "total_requests": self.total_requests,
            "cooldown_until": self.cooldown_until,
            "consecutive_opens": self.consecutive_opens,
            "last_failure_at": self.last_failure_at,
            "last_failure_status": self.last_failure_status,
            "opened_at": self.opened_at,
        }


class EventKind(StrEnum):
    """A circuit's state changes, as the history records them."""

    OPENED = "opened"  # closed -> open: the window tripped
    HALF_OPEN = "half_open"  # open -> half_open: a probe was granted
    CLOSED = "closed"  # half_open -> closed: the probe succeeded
    REOPENED = "reopened"  # half_open -> open: the probe failed
    RESET = "reset"  # an operator closed it (Reset)
    FORCED_OPEN = "forced_open"  # an operator held it open
    DRAINED = "drained"  # an operator held every circuit of its provider open
    RELEASED = "released"  # an operator (or the expiry) lifted a hold


@dataclass(frozen=True, slots=True)
class BreakerEvent:
    """One transition, as the engine that made it saw it. Emitted once per transition, off the request path.

    `generation` is the circuit's generation after the transition: (provider, model, generation) names a
    transition uniquely across processes. `local` marks a transition made by a process deciding alone
    (its shared state unreachable), which other processes did not see. `event_id` names this one emission
    (a uuid4 made with the event, kept by a requeue or a redelivery), so the history stores it once even
    when it has no shared generation; it takes no part in equality.
    """

    kind: EventKind
    provider: str
    model: str
    at: float  # epoch seconds
    generation: int | None = None
    failures: int | None = None  # failures in the window when it tripped
    total: int | None = None  # requests in the window when it tripped
    last_status: str = ""  # the last failure's label: a status code ("503") or an error kind ("timeout")
    cooldown_seconds: float | None = None  # the cooldown chosen (opened, reopened)
    local: bool = False
    event_id: str = field(default_factory=lambda: uuid.uuid4().hex, compare=False)

    def as_record(self) -> dict[str, object]:
        return {
            "kind": str(self.kind),
            "provider": self.provider,
            "model": self.model,
            "at": self.at,
            "generation": self.generation,
            "failures": self.failures,
            "total": self.total,
            "last_status": self.last_status,
            "cooldown_seconds": self.cooldown_seconds,
            "local": self.local,
            "event_id": self.event_id,
        }


@dataclass(frozen=True, slots=True)
class ResetResult:
    before: CircuitSnapshot
    after: CircuitSnapshot


def to_datetime(seconds: float | None) -> datetime | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, tz=UTC)


def label_to_status(label: str | None) -> int | str | None:
    """Stored failure label back to the API value: an int status code or an error kind."""
    if label is None or label == "":
        return None
    return int(label) if label.isdigit() else label


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""
        ...


class SystemClock:
    """Wall clock: cooldowns are shown as absolute times, so epoch seconds, not monotonic."""

    # time.time itself (no Python frame of our own): it is asked on the request path.
    now = staticmethod(time.time)


class ManualClock:
    """A clock tests move by hand. Thread-safe; whole milliseconds keep both backends exact."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        with self._lock:
            self._now = round(self._now + seconds, 3)
            return self._now

    def set(self, seconds: float) -> None:
        with self._lock:
            self._now = round(seconds, 3)
