"""Reads of breaker configuration and circuit state."""

import hashlib
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Q
from django.utils.text import slugify

from health.breaker import BreakerSettings, CircuitSnapshot, ConfigSet, State, get_engine
from health.breaker.types import Control, ControlKind
from health.models import BreakerConfig, BreakerOverride, CircuitControl

# Every tunable field, in the order forms and the API show them.
CONFIG_FIELDS: tuple[str, ...] = (
    "failure_threshold",
    "window_seconds",
    "minimum_requests",
    "initial_cooldown_seconds",
    "cooldown_cap_seconds",
    "failure_status_codes",
)


@dataclass(frozen=True)
class BreakerConfigValues:
    """The global thresholds (defaults until the row is first saved)."""

    failure_threshold: int
    window_seconds: int
    minimum_requests: int
    initial_cooldown_seconds: int
    cooldown_cap_seconds: int
    failure_status_codes: tuple[int, ...]
    updated_at: datetime | None

    def as_dict(self) -> dict[str, object]:
        return {
            "failure_threshold": self.failure_threshold,
            "window_seconds": self.window_seconds,
            "minimum_requests": self.minimum_requests,
            "initial_cooldown_seconds": self.initial_cooldown_seconds,
            "cooldown_cap_seconds": self.cooldown_cap_seconds,
            "failure_status_codes": list(self.failure_status_codes),
        }

    def settings(self) -> BreakerSettings:
        return BreakerSettings(
            failure_threshold=self.failure_threshold,
            window_seconds=self.window_seconds,
            initial_cooldown_seconds=self.initial_cooldown_seconds,
            cooldown_cap_seconds=self.cooldown_cap_seconds,
            minimum_requests=self.minimum_requests,
            failure_status_codes=frozenset(self.failure_status_codes),
        )


@dataclass(frozen=True)
class BreakerOverrideValues:
    """One per-(provider, model) override; None means "inherit the global value"."""

    provider: str
    model: str
    failure_threshold: int | None
    window_seconds: int | None
    minimum_requests: int | None
    initial_cooldown_seconds: int | None
    cooldown_cap_seconds: int | None
    failure_status_codes: tuple[int, ...] | None
    effective: BreakerSettings

    def as_dict(self) -> dict[str, object]:
        codes = self.failure_status_codes
        return {
            "provider": self.provider,
            "model": self.model,
            "failure_threshold": self.failure_threshold,
            "window_seconds": self.window_seconds,
            "minimum_requests": self.minimum_requests,
            "initial_cooldown_seconds": self.initial_cooldown_seconds,
            "cooldown_cap_seconds": self.cooldown_cap_seconds,
            "failure_status_codes": list(codes) if codes is not None else None,
        }


@dataclass(frozen=True)
class CircuitRow:
    """A circuit as the Provider Health tab and the API show it, with the thresholds that apply to it."""

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
    failure_threshold: int
    minimum_requests: int
    window_seconds: int
    has_override: bool
    probe_in_flight: bool = False  # half-open: the one probe was granted and has not answered yet


def _config_values(row: BreakerConfig | None) -> BreakerConfigValues:
    if row is None:
        d = BreakerSettings()
        return BreakerConfigValues(
            failure_threshold=d.failure_threshold,
            window_seconds=d.window_seconds,
            minimum_requests=d.minimum_requests,
            initial_cooldown_seconds=d.initial_cooldown_seconds,
            cooldown_cap_seconds=d.cooldown_cap_seconds,
            failure_status_codes=tuple(sorted(d.failure_status_codes)),
            updated_at=None,
        )
    return BreakerConfigValues(
        failure_threshold=row.failure_threshold,
        window_seconds=row.window_seconds,
        minimum_requests=row.minimum_requests,
        initial_cooldown_seconds=row.initial_cooldown_seconds,
        cooldown_cap_seconds=row.cooldown_cap_seconds,
        failure_status_codes=tuple(row.failure_status_codes),
        updated_at=row.updated_at,
    )


def breaker_config_get() -> BreakerConfigValues:
    """The global thresholds (the defaults when never saved)."""
    return _config_values(BreakerConfig.objects.filter(pk=BreakerConfig.SINGLETON_PK).first())


def _merge(base: BreakerConfigValues, o: BreakerOverride) -> BreakerSettings:
    def pick(value: int | None, default: int) -> int:
        return default if value is None else value

    codes = base.failure_status_codes if o.failure_status_codes is None else o.failure_status_codes
    return BreakerSettings(
        failure_threshold=pick(o.failure_threshold, base.failure_threshold),
        window_seconds=pick(o.window_seconds, base.window_seconds),
        initial_cooldown_seconds=pick(o.initial_cooldown_seconds, base.initial_cooldown_seconds),
        cooldown_cap_seconds=pick(o.cooldown_cap_seconds, base.cooldown_cap_seconds),
        minimum_requests=pick(o.minimum_requests, base.minimum_requests),
        failure_status_codes=frozenset(codes),
    )


def _override_values(base: BreakerConfigValues, o: BreakerOverride) -> BreakerOverrideValues:
    codes = o.failure_status_codes
    return BreakerOverrideValues(
        provider=o.provider,
        model=o.model,
        failure_threshold=o.failure_threshold,
        window_seconds=o.window_seconds,
        minimum_requests=o.minimum_requests,
        initial_cooldown_seconds=o.initial_cooldown_seconds,
        cooldown_cap_seconds=o.cooldown_cap_seconds,
        failure_status_codes=tuple(codes) if codes is not None else None,
        effective=_merge(base, o),
    )


def breaker_override_list() -> list[BreakerOverrideValues]:
    """Every override, by provider then model, with its effective settings."""
    base = breaker_config_get()
    return [_override_values(base, o) for o in BreakerOverride.objects.order_by("provider", "model")]


def breaker_override_get(*, provider: str, model: str) -> BreakerOverrideValues | None:
    """One override, or None. The names are stripped, as breaker_override_set stores them."""
    row = BreakerOverride.objects.filter(provider=provider.strip(), model=model.strip()).first()
    return _override_values(breaker_config_get(), row) if row is not None else None


def circuit_controls() -> dict[tuple[str, str], Control]:
    """Every operator hold, expired or not (the engines compare `until` with their clock), keyed as ConfigSet's."""
    return {
        (c.provider, c.model): Control(
            kind=ControlKind(c.kind),
            provider=c.provider,
            model=c.model,
            reason=c.reason,
            until=c.expires_at.timestamp() if c.expires_at is not None else None,
            since=c.created_at.timestamp(),
        )
        for c in CircuitControl.objects.all()
    }


def circuit_holds_in_force(*, now: datetime) -> list[CircuitControl]:
    """The operator holds in force at `now` (not past their expiry), by provider then model. One query."""
    return list(
        CircuitControl.objects.filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now)).order_by("provider", "model")
    )


def breaker_config_snapshot() -> ConfigSet:
    """Global settings and every override, merged, plus the operator holds, for the engine."""
    base = breaker_config_get()
    overrides = {(o.provider, o.model): _merge(base, o) for o in BreakerOverride.objects.all()}
    return ConfigSet(default=base.settings(), overrides=overrides, controls=circuit_controls())


def _row(snapshot: CircuitSnapshot, config: ConfigSet) -> CircuitRow:
    settings = config.for_circuit(snapshot.provider, snapshot.model)
    return CircuitRow(
        provider=snapshot.provider,
        model=snapshot.model,
        state=snapshot.state,
        failure_count=snapshot.failure_count,
        total_requests=snapshot.total_requests,
        cooldown_until=snapshot.cooldown_until,
        consecutive_opens=snapshot.consecutive_opens,
        last_failure_at=snapshot.last_failure_at,
        last_failure_status=snapshot.last_failure_status,
        opened_at=snapshot.opened_at,
        failure_threshold=settings.failure_threshold,
        minimum_requests=settings.minimum_requests,
        window_seconds=settings.window_seconds,
        has_override=(snapshot.provider, snapshot.model) in config.overrides,
        probe_in_flight=snapshot.probe_in_flight,
    )


def circuit_list() -> list[CircuitRow]:
    """Every tracked circuit of this process's engine, sorted by provider and model. No database query."""
    engine = get_engine()
    config = engine.config
    return [_row(s, config) for s in engine.list_circuits()]


def circuits_local_only() -> bool:
    """True while this process's engine cannot reach the shared state (Redis) and decides from its own view.

    Read it after `circuit_list()`: a listing that fails to reach Redis switches the engine to local state.
    """
    return get_engine().degraded


def circuit_default_window() -> int:
    """The failure window (seconds) of circuits without an override, as this process's engine applies it.
    No database query, so the polled table can name it."""
    return get_engine().config.default.window_seconds


def circuit_get(*, provider: str, model: str) -> CircuitRow:
    """One circuit (a fresh closed one when untracked)."""
    engine = get_engine()
    return _row(engine.get(provider, model), engine.config)


def circuit_anchor(provider: str, model: str) -> str:
    """Element-id-safe key of a circuit (its Provider Health row is `circuit-row-<key>`): readable slug plus a
    digest, so distinct names never collide."""
    digest = hashlib.sha1(f"{provider}\0{model}".encode(), usedforsecurity=False).hexdigest()[:8]
    return f"{slugify(provider)}-{slugify(model)}-{digest}".strip("-")
