"""Circuit breaker engine: one circuit per (provider, model), memory and Redis backends.

Usage on the request path:

    decision = engine.allow(provider, model)
    if decision.allowed:
        ... call upstream ...
        engine.record(decision, Outcome.of_status(503))   # or Outcome.timeout(), .cancelled(), ...
"""

from health.breaker.base import DEFAULT_PROBE_TIMEOUT_SECONDS, BreakerEngine, BreakerUnavailable
from health.breaker.events import HISTORY_FIELD, EventBuffer, history_stream
from health.breaker.factory import build_engine, get_engine, peek_engine, set_config_source, use_engine
from health.breaker.memory import MemoryEngine
from health.breaker.types import (
    DEFAULT_FAILURE_STATUS_CODES,
    BreakerEvent,
    BreakerSettings,
    CircuitSnapshot,
    Clock,
    ConfigSet,
    Control,
    ControlKind,
    Decision,
    ErrorKind,
    EventKind,
    ManualClock,
    Outcome,
    ResetResult,
    State,
    SystemClock,
    Verdict,
    classify,
)

__all__ = [
    "DEFAULT_FAILURE_STATUS_CODES",
    "DEFAULT_PROBE_TIMEOUT_SECONDS",
    "HISTORY_FIELD",
    "BreakerEngine",
    "BreakerEvent",
    "BreakerSettings",
    "BreakerUnavailable",
    "CircuitSnapshot",
    "Clock",
    "ConfigSet",
    "Control",
    "ControlKind",
    "Decision",
    "ErrorKind",
    "EventBuffer",
    "EventKind",
    "ManualClock",
    "MemoryEngine",
    "Outcome",
    "ResetResult",
    "State",
    "SystemClock",
    "Verdict",
    "build_engine",
    "classify",
    "get_engine",
    "history_stream",
    "peek_engine",
    "set_config_source",
    "use_engine",
]
