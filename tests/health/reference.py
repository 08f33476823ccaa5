"""A small reference model of the breaker state machine, written straight from docs/breaker.md."""

from dataclasses import dataclass, field

from health.breaker import BreakerSettings, Outcome


@dataclass
class Reference:
    cfg: BreakerSettings
    probe_timeout: float
    state: str = "closed"
    generation: int = 0
    events: list[tuple[float, bool]] = field(default_factory=list)
    consecutive_opens: int = 0
    cooldown_until: float | None = None
    probe_at: float | None = None

    def _is_failure(self, outcome: Outcome) -> bool | None:
        if outcome.error == "cancelled":
            return None
        if outcome.error is not None:
            return True
        return outcome.status in self.cfg.failure_status_codes

    def allow(self, now: float) -> tuple[bool, bool, int]:
        """(allowed, probe, generation of the ticket)."""
        if self.state == "closed":
            return True, False, self.generation
        if self.state == "open":
            if now < self.cooldown_until:
                return False, False, self.generation
            self.state = "half_open"
        elif self.probe_at is not None and now < self.probe_at + self.probe_timeout:
            return False, False, self.generation
        self.probe_at = now
        self.generation += 1
        return True, True, self.generation

    def _open(self, now: float) -> None:
        self.consecutive_opens += 1
        cooldown = min(
            self.cfg.initial_cooldown_seconds * 2 ** (self.consecutive_opens - 1), self.cfg.cooldown_cap_seconds
        )
        self.state, self.cooldown_until, self.probe_at = "open", now + cooldown, None
        self.generation += 1

    def record(self, ticket: tuple[bool, bool, int], outcome: Outcome, now: float) -> None:
        allowed, probe, generation = ticket
        failed = self._is_failure(outcome)
        if not allowed or generation != self.generation:
            return
        if failed is None:
            if probe and self.state == "half_open":
                self.probe_at = None
                self.generation += 1
            return
        if probe:
            if failed:
                self._open(now)
            else:
                self.state, self.events, self.consecutive_opens = "closed", [], 0
                self.cooldown_until = self.probe_at = None
                self.generation += 1
            return
        if self.state != "closed":
            return
        self.events.append((now, failed))
        self.events = [(t, f) for t, f in self.events if t > now - self.cfg.window_seconds]
        failures = sum(f for _, f in self.events)
        if failures >= self.cfg.failure_threshold and len(self.events) >= self.cfg.minimum_requests:
            self._open(now)

    def view(self, now: float) -> tuple[str, int, int, int, float | None, bool]:
        """(effective state, failures, total, consecutive opens, cooldown until, probe in flight)."""
        live = [(t, f) for t, f in self.events if t > now - self.cfg.window_seconds]
        state = self.state
        in_flight = False
        if state == "open" and now >= self.cooldown_until:
            state = "half_open"
        elif state == "half_open":
            in_flight = self.probe_at is not None and now < self.probe_at + self.probe_timeout
        return state, sum(f for _, f in live), len(live), self.consecutive_opens, self.cooldown_until, in_flight
