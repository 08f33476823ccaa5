"""The interface every breaker backend implements (one contract suite drives them all)."""

from __future__ import annotations

from abc import ABC, abstractmethod

from health.breaker.events import EventBuffer
from health.breaker.types import CircuitSnapshot, ConfigSet, Control, Decision, Outcome, ResetResult

# A probe that never reports (its process died) frees the half-open slot after this long. At least the
# gateway's upstream deadline (GATEWAY_DEADLINE_SECONDS, 300 s by default) so a slow but live probe keeps
# its slot; deployments set it with BREAKER_PROBE_TIMEOUT_SECONDS (checked against the deadline at startup).
DEFAULT_PROBE_TIMEOUT_SECONDS = 330.0


class BreakerUnavailable(Exception):
    """The shared circuit state cannot be reached, so a change every process must see cannot be made now."""


class ConfigUnreadable(Exception):
    """A configuration loader could not read the thresholds and holds now (it said why); try again later."""


class BreakerEngine(ABC):
    """One circuit per (provider, model): closed -> open -> half_open (docs/breaker.md).

    `events` receives one BreakerEvent per transition this engine makes (opened, half_open, closed, reopened;
    not resets, which the health service records with their actor). Engines take it as the `events` keyword
    (default: a buffer of their own).
    """

    events: EventBuffer

    @abstractmethod
    def allow(self, provider: str, model: str) -> Decision:
        """May the target be called now? Takes the half-open probe slot atomically when granting it. Never raises."""

    @abstractmethod
    def record(self, decision: Decision, outcome: Outcome) -> None:
        """Report the outcome of a call `allow()` let through. Never raises, never waits on the network."""

    @abstractmethod
    def hold(self, provider: str, model: str) -> Control | None:
        """The operator hold (forced open, or its provider drained) in force on this circuit now, if any."""

    @abstractmethod
    def get(self, provider: str, model: str) -> CircuitSnapshot:
        """The circuit's current state (a fresh closed one when untracked)."""

    @abstractmethod
    def list_circuits(self) -> list[CircuitSnapshot]:
        """Every tracked circuit (one that recorded an outcome or was reset), sorted by provider, model."""

    @abstractmethod
    def reset(self, provider: str, model: str) -> ResetResult:
        """Close the circuit at once and forget its window and cooldown growth.

        Raises BreakerUnavailable when the shared state is unreachable (a local reset would be lost).
        """

    @abstractmethod
    def configure(self, config: ConfigSet) -> None:
        """Swap the thresholds; the next decision and outcome of every circuit use them."""

    @property
    @abstractmethod
    def config(self) -> ConfigSet: ...

    @property
    def degraded(self) -> bool:
        """True while the shared state is unreachable and decisions come from this process alone."""
        return False

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every recorded outcome has been applied and every event emitted so far shipped (a
        backend that ships them). True when drained in time."""
        return True

    def close(self) -> None:  # noqa: B027 - optional hook, a no-op for backends without background work
        """Stop background work (threads, connections)."""
