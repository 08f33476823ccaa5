"""Writes of breaker configuration, circuit resets and operator holds (force open, drain, release).

One transaction each, audited inside it; resets and holds also write their CircuitEvent in it.
"""

import re
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, TypeGuard

from django.db import IntegrityError, transaction
from django.utils import timezone

from audit.services import audit_record, diff_fields
from catalog.models import LlmModel, Provider
from chains.selectors import chains_for_circuits
from core.configbus import config_publish
from core.errors import ConflictError, NotFound, ServiceUnavailable, ValidationFailed
from core.types import Actor
from core.validation import FieldErrors
from core.validators import has_control_characters
from health.breaker import BreakerUnavailable, CircuitSnapshot, get_engine
from health.breaker.types import WINDOW_MAX
from health.models import BreakerConfig, BreakerOverride, CircuitControl, CircuitEvent
from health.selectors import CONFIG_FIELDS, BreakerConfigValues, breaker_config_get, breaker_override_list

LABELS = {
    "failure_threshold": "Failure threshold",
    "window_seconds": "Failure window",
    "minimum_requests": "Minimum requests",
    "initial_cooldown_seconds": "Initial cooldown",
    "cooldown_cap_seconds": "Cooldown cap",
    "failure_status_codes": "Failure status codes",
}
COOLDOWN_MIN = 30
COOLDOWN_MAX = 86400
# Far above any sensible threshold, and below the database's integer limit.
COUNT_MAX = 1_000_000
_INT_RE = re.compile(r"[+-]?[0-9]+")
# A string of more digits than this is read as ±WHOLE_BEYOND, above every bound the thresholds allow.
WHOLE_DIGITS_MAX = 18
WHOLE_BEYOND: int = 10**WHOLE_DIGITS_MAX


def is_blank(value: Any) -> bool:
    """None or an empty string: "required" for the global thresholds, "inherit" for an override."""
    return value is None or (isinstance(value, str) and not value.strip())


def whole_number(value: Any) -> int | None:
    """An integer from an int or a string of digits; None for anything else (floats, bools, words)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and _INT_RE.fullmatch(value.strip()):
        text = value.strip()
        if len(text.lstrip("+-").lstrip("0")) > WHOLE_DIGITS_MAX:
            # Beyond every bound here, and int() refuses more than 4,300 digits: the range checks that
            # follow name the bound.
            return -WHOLE_BEYOND if text.startswith("-") else WHOLE_BEYOND
        return int(text)
    return None


def not_whole_number_message(field: str, value: Any) -> str:
    return f"{LABELS[field]} must be a whole number (got {value!r})."


def code_items(value: Any) -> list[Any] | None:
    """The items of a status-code list: a list, or a string of them separated by commas or spaces; None if neither."""
    if isinstance(value, str):
        return [part for part in re.split(r"[\s,]+", value.strip()) if part]
    if isinstance(value, list | tuple):
        return list(value)
    return None


CODES_SHAPE_MESSAGE = "Failure status codes must be a list of whole numbers, such as [429, 500, 503]."


def not_a_code_message(item: Any) -> str:
    return f"{item!r} is not a whole number."


def unknown_field_message(key: str, allowed: tuple[str, ...]) -> str:
    return f"Unknown field “{key}”; expected one of: {', '.join(allowed)}."


def _parse_int(errors: FieldErrors, field: str, value: Any) -> int | None:
    number = whole_number(value)
    if number is None:
        errors.add(field, not_whole_number_message(field, value))
        return None
    if field in ("failure_threshold", "minimum_requests"):
        if number < 1:
            errors.add(field, f"{LABELS[field]} must be at least 1.")
        elif number > COUNT_MAX:
            errors.add(field, f"{LABELS[field]} must be at most {COUNT_MAX}.")
    elif field == "window_seconds":
        if not 1 <= number <= WINDOW_MAX:
            errors.add(field, f"Failure window must be between 1 and {WINDOW_MAX} seconds (1 hour).")
    elif field == "initial_cooldown_seconds":
        if number < COOLDOWN_MIN:
            errors.add(field, f"Initial cooldown must be at least {COOLDOWN_MIN} seconds.")
        elif number > COOLDOWN_MAX:
            errors.add(field, f"Initial cooldown must be at most {COOLDOWN_MAX} seconds (24 hours).")
    elif field == "cooldown_cap_seconds" and number > COOLDOWN_MAX:
        errors.add(field, f"Cooldown cap must be at most {COOLDOWN_MAX} seconds (24 hours).")
    return number


def _parse_codes(errors: FieldErrors, value: Any) -> list[int] | None:
    field = "failure_status_codes"
    items = code_items(value)
    if items is None:
        errors.add(field, CODES_SHAPE_MESSAGE)
        return None
    codes: list[int] = []
    ok = True
    for item in items:
        code = whole_number(item)
        if code is None:
            errors.add(field, not_a_code_message(item))
            ok = False
        elif not 100 <= code <= 599:
            shown = code if abs(code) < WHOLE_BEYOND else f"of more than {WHOLE_DIGITS_MAX} digits"
            errors.add(field, f"Status code {shown} is outside 100–599.")
            ok = False
        elif code in codes:
            errors.add(field, f"Status code {code} is listed more than once.")
            ok = False
        else:
            codes.append(code)
    return codes if ok else None


def _check_unknown(errors: FieldErrors, data: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
    for key in data:
        if key not in allowed:
            errors.add(key, unknown_field_message(key, allowed))


def _check_cap(errors: FieldErrors, initial: int | None, cap: int | None, *, field: str) -> None:
    if initial is not None and cap is not None and cap < initial and not errors.has(field):
        errors.add(field, f"Cooldown cap ({cap} s) must be at least the initial cooldown ({initial} s).")


def _check_overrides(errors: FieldErrors, values: Mapping[str, Any]) -> None:
    """Refuse global cooldowns that would leave an override with a cap below its initial cooldown."""
    initial, cap = values["initial_cooldown_seconds"], values["cooldown_cap_seconds"]
    if initial is None or cap is None:
        return  # the field itself is invalid and already reported
    # An override that sets only one of the two inherits the other from the global row.
    low_caps: list[str] = []
    high_initials: list[str] = []
    for o in breaker_override_list():
        if (
            o.cooldown_cap_seconds is not None
            and o.initial_cooldown_seconds is None
            and o.cooldown_cap_seconds < initial
        ):
            low_caps.append(f"{o.provider}/{o.model} ({o.cooldown_cap_seconds} s)")
        if (
            o.initial_cooldown_seconds is not None
            and o.cooldown_cap_seconds is None
            and o.initial_cooldown_seconds > cap
        ):
            high_initials.append(f"{o.provider}/{o.model} ({o.initial_cooldown_seconds} s)")
    if low_caps and not errors.has("initial_cooldown_seconds"):
        errors.add(
            "initial_cooldown_seconds",
            f"Initial cooldown ({initial} s) is above the cooldown cap of the override(s) {', '.join(low_caps)}, "
            "which inherit the initial cooldown; change or delete those overrides first.",
        )
    if high_initials and not errors.has("cooldown_cap_seconds"):
        errors.add(
            "cooldown_cap_seconds",
            f"Cooldown cap ({cap} s) is below the initial cooldown of the override(s) {', '.join(high_initials)}, "
            "which inherit the cap; change or delete those overrides first.",
        )


# Any constant works (as the audit log's): it serialises the writers of the breaker thresholds on PostgreSQL.
_BREAKER_CONFIG_LOCK_ID = 0x627265616B6572


def _lock_breaker_config() -> None:
    """Serialise breaker_config_update and breaker_override_set until the transaction ends.

    Each validates against what the other writes (an override's cap against the global initial cooldown and
    the reverse) and the global row is created on first save: a row lock locks nothing until that row exists,
    so two first saves went through together (a lost update, a duplicate override's IntegrityError, a cap
    below the initial cooldown). Taken after the catalog rows an override names and before the first audit
    event, whose lock comes last in every write. SQLite: transactions are IMMEDIATE, so writers are already
    serialised.
    """
    connection = transaction.get_connection()
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_BREAKER_CONFIG_LOCK_ID])


def _same_codes(values: dict[str, Any], previous: Mapping[str, Any]) -> None:
    """Status codes listed again in another order are no change: keep the stored order (no audit event)."""
    codes, before = values.get("failure_status_codes"), previous.get("failure_status_codes")
    if codes is not None and before is not None and sorted(codes) == sorted(before):
        values["failure_status_codes"] = before


@transaction.atomic
def breaker_config_update(*, actor: Actor, data: Mapping[str, Any]) -> BreakerConfigValues:
    """Change the global thresholds (fields left out keep their value); audit the changed fields.

    Saving applies at once to every circuit in every process (config_publish on commit).
    """
    errors = FieldErrors()
    _check_unknown(errors, data, CONFIG_FIELDS)
    # Before reading the global values and the overrides: breaker_override_set takes the same lock, so neither
    # can validate against a value the other is about to change, whether or not the global row exists yet.
    _lock_breaker_config()
    current = breaker_config_get()
    values: dict[str, Any] = current.as_dict()
    for field in CONFIG_FIELDS:
        if field not in data:
            continue
        value = data[field]
        if field == "failure_status_codes":
            if value is None:
                errors.add(field, "Failure status codes are required (an empty list counts only timeouts).")
            else:
                values[field] = _parse_codes(errors, value)
        elif is_blank(value):
            errors.add(field, f"{LABELS[field]} is required.")
        else:
            values[field] = _parse_int(errors, field, value)
    _check_cap(errors, values["initial_cooldown_seconds"], values["cooldown_cap_seconds"], field="cooldown_cap_seconds")
    _check_overrides(errors, values)
    errors.raise_if_any()

    _same_codes(values, current.as_dict())
    before, after = diff_fields(current.as_dict(), values)
    if not after:
        return current
    row, _ = BreakerConfig.objects.select_for_update().get_or_create(pk=BreakerConfig.SINGLETON_PK)
    # Only the fields changed (what the audit event names): nothing else is written back.
    for field, value in after.items():
        setattr(row, field, value)
    row.save()
    audit_record(
        actor=actor,
        action="breaker_config.update",
        object_type="breaker_config",
        object_id="global",
        object_repr="Breaker configuration",
        before=before,
        after=after,
    )
    transaction.on_commit(config_publish)
    return breaker_config_get()


def _override_dict(row: BreakerOverride) -> dict[str, Any]:
    return {field: getattr(row, field) for field in CONFIG_FIELDS}


@transaction.atomic
def breaker_override_set(*, actor: Actor, provider: str, model: str, data: Mapping[str, Any]) -> BreakerOverride:
    """Create or replace the override of one (provider, model); a field left out or empty inherits the global value."""
    errors = FieldErrors()
    provider = (provider or "").strip()
    model = (model or "").strip()
    found_model = _lock_model(model) if model else None
    found_provider = _lock_provider(provider) if provider else None
    if not provider:
        errors.add("provider", "Provider is required.")
    elif found_provider is None:
        errors.add("provider", f"Unknown provider “{provider}”.")
    if not model:
        errors.add("model", "Model is required.")
    elif found_model is None:
        errors.add("model", f"Unknown model “{model}”.")
    _check_unknown(errors, data, CONFIG_FIELDS)
    values: dict[str, Any] = dict.fromkeys(CONFIG_FIELDS)
    for field in CONFIG_FIELDS:
        value = data.get(field)
        if field == "failure_status_codes":
            if value is not None and not (isinstance(value, str) and not value.strip()):
                values[field] = _parse_codes(errors, value)
        elif not is_blank(value):
            values[field] = _parse_int(errors, field, value)
    if all(values[f] is None for f in CONFIG_FIELDS) and not any(errors.has(f) for f in CONFIG_FIELDS):
        errors.add("__all__", "Set at least one field; an override with every field empty changes nothing.")
    # The lock breaker_config_update takes: the global cooldowns cannot change under this check.
    _lock_breaker_config()
    base = breaker_config_get()
    initial = values["initial_cooldown_seconds"]
    initial = base.initial_cooldown_seconds if initial is None else initial
    cap = values["cooldown_cap_seconds"]
    cap = base.cooldown_cap_seconds if cap is None else cap
    cap_field = "cooldown_cap_seconds" if values["cooldown_cap_seconds"] is not None else "initial_cooldown_seconds"
    if values["cooldown_cap_seconds"] is not None or values["initial_cooldown_seconds"] is not None:
        _check_cap(errors, initial, cap, field=cap_field)
    errors.raise_if_any()

    row = BreakerOverride.objects.select_for_update().filter(provider=provider, model=model).first()
    previous = _override_dict(row) if row is not None else None
    if row is None:
        row = BreakerOverride(provider=provider, model=model)
    if previous is not None:
        _same_codes(values, previous)
    for field, value in values.items():
        setattr(row, field, value)
    if previous is not None:
        before, after = diff_fields(previous, values)
        if not after:
            return row
        row.save()
    else:
        before, after = {}, values
        try:
            with transaction.atomic():
                row.save(force_insert=True)
        except IntegrityError:  # the same override saved concurrently (the lock above should prevent it): a 409
            message = f"A breaker override for {provider}/{model} was saved at the same time; reload and try again."
            raise ConflictError(message, errors={"__all__": [message]}) from None
    audit_record(
        actor=actor,
        action="breaker_override.set",
        object_type="breaker_override",
        object_id=f"{provider}/{model}",
        object_repr=f"Breaker override {provider}/{model}",
        before={"provider": provider, "model": model, **before} if previous is not None else None,
        after={"provider": provider, "model": model, **after},
    )
    transaction.on_commit(config_publish)
    return row


@transaction.atomic
def breaker_override_delete(*, actor: Actor, provider: str, model: str) -> None:
    """Remove one override (the circuit goes back to the global thresholds); audit a full snapshot. The names are
    stripped, as breaker_override_set stores them."""
    provider, model = provider.strip(), model.strip()
    row = BreakerOverride.objects.select_for_update().filter(provider=provider, model=model).first()
    if row is None:  # 404: a concurrent delete may have removed it since the caller looked
        raise NotFound(
            f"No breaker override exists for {provider}/{model}.",
            errors={"__all__": [f"No breaker override exists for {provider}/{model}."]},
        )
    snapshot = {"provider": provider, "model": model, **_override_dict(row)}
    row.delete()
    audit_record(
        actor=actor,
        action="breaker_override.delete",
        object_type="breaker_override",
        object_id=f"{provider}/{model}",
        object_repr=f"Breaker override {provider}/{model}",
        before=snapshot,
    )
    transaction.on_commit(config_publish)


def _state_record(snapshot: CircuitSnapshot) -> dict[str, Any]:
    data = snapshot.as_dict()
    data["state"] = str(snapshot.state)
    return data


@transaction.atomic
def circuit_reset(*, actor: Actor, provider: str, model: str) -> CircuitSnapshot:
    """Close one tracked circuit and forget its window and cooldown growth; audit the state it had.

    The audit event is written first and the engine reset is the transaction's last step, so a failed
    audit write leaves the circuit alone, and the row reads Closed as soon as the service returns.
    While Redis is unreachable nothing is reset or audited (ServiceUnavailable): a reset of this process's
    local state alone would be dropped when Redis returns. Returns the circuit as it was when reset.
    """
    errors = FieldErrors()
    provider = (provider or "").strip() if isinstance(provider, str) else ""
    model = (model or "").strip() if isinstance(model, str) else ""
    if not provider:
        errors.add("provider", "Provider is required.")
    if not model:
        errors.add("model", "Model is required.")
    errors.raise_if_any()
    engine = get_engine()
    tracked = {(s.provider, s.model): s for s in engine.list_circuits()}
    if engine.degraded:  # also when listing just found Redis gone
        raise _reset_unavailable()
    before = tracked.get((provider, model))
    if before is None:
        raise ValidationFailed(
            f"No circuit is tracked for {provider}/{model}.",
            errors={"__all__": [f"No circuit is tracked for {provider}/{model}."]},
        )
    audit_record(
        actor=actor,
        action="circuit.reset",
        object_type="circuit",
        object_id=f"{provider}/{model}",
        object_repr=f"{provider}/{model}",
        before=_state_record(before),
        after={"provider": provider, "model": model, "state": "closed"},
    )
    try:
        result = engine.reset(provider, model)
    except BreakerUnavailable:
        raise _reset_unavailable() from None  # rolls the audit event back with the transaction
    _event_record(
        CircuitEvent(
            provider=provider,
            model=model,
            kind=CircuitEvent.Kind.RESET,
            at=timezone.now(),
            generation=result.after.generation,
            actor=_actor_name(actor),
        )
    )
    return before


RESET_UNAVAILABLE = (
    "Redis is unreachable: the circuit cannot be reset on every gateway now; try again when Redis is back."
)


def _reset_unavailable() -> ServiceUnavailable:
    return ServiceUnavailable(RESET_UNAVAILABLE, errors={"__all__": [RESET_UNAVAILABLE]})


def _actor_name(actor: Actor) -> str:
    return actor.get_username() if actor is not None and actor.is_authenticated else "system"


def _event_record(event: CircuitEvent) -> CircuitEvent:
    """Insert an operator's CircuitEvent inside the caller's transaction.

    A reset names the generation it produced; if that (provider, model, generation) is already stored (the
    engine's generations restarted, e.g. a new embedded process or an emptied Redis), the reset is still
    recorded, without its generation, rather than failing the operator's action.
    """
    try:
        with transaction.atomic():
            event.save(force_insert=True)
    except IntegrityError:
        if event.generation is None:
            raise
        event.pk = None
        event.generation = None
        event.save(force_insert=True)
    return event


REASON_MAX = 500
HOLD_MINUTES_MAX = 10080  # 7 days


def _hold_reason(errors: FieldErrors, value: Any) -> str:
    reason = value.strip() if isinstance(value, str) else ""
    if not reason:
        errors.add("reason", "Reason is required: say why traffic is held off this target.")
    elif len(reason) > REASON_MAX:
        errors.add("reason", f"Reason is at most {REASON_MAX} characters (got {len(reason)}).")
    elif has_control_characters(reason.replace("\n", " ").replace("\r", " ").replace("\t", " ")):
        errors.add("reason", "Reason cannot contain control or invisible formatting characters.")
    return reason


def _hold_minutes(errors: FieldErrors, value: Any) -> int | None:
    """None (until released) or a whole number of minutes, 1..7 days; an empty string reads as None."""
    if is_blank(value):
        return None
    minutes = whole_number(value)
    if minutes is None:
        errors.add("minutes", f"Minutes must be a whole number (got {value!r}); leave it empty to hold until released.")
    elif not 1 <= minutes <= HOLD_MINUTES_MAX:
        errors.add("minutes", f"Minutes must be between 1 and {HOLD_MINUTES_MAX} (7 days).")
        return None
    return minutes


def _lock_provider(name: str) -> Provider | None:
    """The provider named `name`, its row locked until the transaction ends; None if no provider has the name.

    A rename updates that row: it waits for this transaction, or this one waits for it and then finds no
    provider of the old name. Either way a hold or an override saved under the name is one the rename's
    carry-over (circuit_names_renamed) moves, never one left under the old name. Catalog rows first, then
    health's rows, then the audit log: the order a rename keeps (docs/decisions.md, "One lock order"). FOR NO
    KEY UPDATE, as core.api's edits:
    rows that only refer to this one stay insertable meanwhile.
    """
    return Provider.objects.select_for_update(no_key=True).filter(name=name).first()


def _lock_model(name: str) -> LlmModel | None:
    """The model named `name`, its row locked as `_lock_provider` locks a provider's. Lock it before the
    provider's: a model rename locks its own row, then the providers that deploy it."""
    return LlmModel.objects.select_for_update(no_key=True).filter(name=name).first()


def _hold_name(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def _hold_provider(errors: FieldErrors, value: Any) -> Provider | None:
    name = _hold_name(value)
    if not name:
        errors.add("provider", "Provider is required.")
        return None
    provider = _lock_provider(name)
    if provider is None:
        errors.add("provider", f"Unknown provider “{name}”.")
    return provider


def _hold_model(errors: FieldErrors, name: str, model: LlmModel | None, provider: Provider | None) -> None:
    """`model` (named `name`, locked by the caller) must be served by `provider`: its default provider, a chain
    entry that sends it through `provider`, or a circuit the breaker already tracks."""
    if not name:
        errors.add("model", "Model is required.")
    elif model is None:
        errors.add("model", f"Unknown model “{name}”.")
    elif provider is not None and model.provider_id != provider.pk:
        routed = any(
            link.position is not None
            for link in chains_for_circuits(circuits=[(provider.name, name)])[(provider.name, name)]
        )
        if not routed and (provider.name, name) not in {(s.provider, s.model) for s in get_engine().list_circuits()}:
            errors.add("model", f"Model “{name}” is not served by provider “{provider.name}”.")


def circuit_names_renamed(*, actor: Actor, field: str, old: str, new: str) -> Callable[[], None]:
    """Carry the holds and breaker overrides saved under a provider's or a model's old name (`field`) over to its
    new name: catalog calls this in the rename's transaction. They name circuits as text, so left behind a drain
    or a forced-open hold was lifted and an override dropped, silently, and came back if a new row took the old
    name. One audit event per row moved. A row the new name already has (a hold or override saved for a
    circuit tracked under that name) refuses the rename (ConflictError), which rolls it back.

    Locks the rows and checks them; the function returned moves and audits them (`catalog.references`).
    """
    if field not in ("provider", "model"):
        raise ValueError(field)
    now = timezone.now()
    kinds: tuple[tuple[type[BreakerOverride] | type[CircuitControl], str, str, str], ...] = (
        (BreakerOverride, "breaker_override", "breaker override", "delete one of them"),
        (CircuitControl, "circuit_control", "hold", "release one of them"),
    )
    # Holds past their expiry hold nothing: released as the expiry job would release them, not moved (under the
    # old name) nor in the way (under the new one, as `_hold` releases one).
    releases: list[CircuitControl] = []
    # (row, its audit type, its noun, where it was, where it goes)
    moves: list[tuple[BreakerOverride | CircuitControl, str, str, dict[str, str], dict[str, str]]] = []
    for model_class, object_type, noun, way_out in kinds:
        for row in model_class.objects.select_for_update().filter(**{field: old}).order_by("pk"):
            if _expired(row, now):
                releases.append(row)
                continue
            before = {"provider": row.provider, "model": row.model}
            after = {**before, field: new}
            there = model_class.objects.select_for_update().filter(**after).first()
            if _expired(there, now):
                releases.append(there)
            elif there is not None:
                message = (
                    f"{_target(**after)} already has a {noun} of its own, so the {noun} of {_target(**before)} "
                    f"cannot move to it: {way_out} first."
                )
                raise ConflictError(message, errors={"name": [message]})
            moves.append((row, object_type, noun, before, after))

    def move() -> None:
        for hold in releases:
            _release(actor=None, row=hold, who=EXPIRY_ACTOR, reason=EXPIRY_REASON, now=hold.expires_at or now)
        for row, object_type, noun, before, after in moves:
            setattr(row, field, new)
            row.save()
            target = _target(after["provider"], after["model"])
            audit_record(
                actor=actor,
                action=f"{object_type}.rename",
                object_type=object_type,
                object_id=target,
                object_repr=f"{noun.capitalize()} {target}",
                before=before,
                after=after,
            )
            if isinstance(row, CircuitControl):
                _hold_renamed_in_history(row, actor=actor, old=before, now=now)

    return move


def _expired(row: object, now: datetime) -> TypeGuard[CircuitControl]:
    """True for a hold past its expiry: the engines no longer honour it, whether or not the expiry job has run."""
    return isinstance(row, CircuitControl) and row.expires_at is not None and row.expires_at <= now


def _hold_renamed_in_history(row: CircuitControl, *, actor: Actor, old: dict[str, str], now: datetime) -> None:
    """The circuit history keys holds by name: without these two events the old name stayed held for ever (its
    release never comes) and the new name's hold had no start."""
    who = _actor_name(actor)
    new = _target(row.provider, row.model)
    _event_record(CircuitEvent(**old, kind=CircuitEvent.Kind.RELEASED, at=now, actor=who, reason=f"renamed to {new}"))
    _event_record(
        CircuitEvent(
            provider=row.provider,
            model=row.model,
            kind=row.kind,
            at=now,
            actor=who,
            reason=row.reason,
            until=row.expires_at,
        )
    )


def circuit_names_referencing(*, field: str, name: str) -> list[str]:
    """The holds in force and the breaker overrides that name a provider or a model (`field`), for a refused
    delete (a hold past its expiry holds nothing, whether or not the expiry job has run)."""
    holds = (
        CircuitControl.objects.filter(**{field: name})
        .exclude(expires_at__lte=timezone.now())
        .order_by("provider", "model")
    )
    overrides = BreakerOverride.objects.filter(**{field: name}).order_by("provider", "model")
    return [f"{_target(r.provider, r.model)} ({r.get_kind_display().lower()})" for r in holds] + [
        f"{_target(r.provider, r.model)} (breaker override)" for r in overrides
    ]


def _target(provider: str, model: str) -> str:
    return f"{provider}/{model}" if model else provider


def _control_record(row: CircuitControl) -> dict[str, Any]:
    return {
        "kind": row.kind,
        "provider": row.provider,
        "model": row.model,
        "reason": row.reason,
        "expires_at": row.expires_at.isoformat() if row.expires_at is not None else None,
    }


def _hold(
    *, actor: Actor, kind: str, provider: str, model: str, reason: str, minutes: int | None, now: datetime
) -> CircuitControl:
    target = _target(provider, model)
    row = CircuitControl(
        provider=provider,
        model=model,
        kind=kind,
        reason=reason,
        expires_at=now + timedelta(minutes=minutes) if minutes is not None else None,
        created_by=_actor_name(actor),
    )
    existing = CircuitControl.objects.filter(provider=provider, model=model).first()
    if _expired(existing, now):
        # Past its expiry the engines no longer honour it; the expiry job may not have run yet (or beat is
        # down). Released here as that job would release it, so the new hold is not refused for it.
        _release(actor=None, row=existing, who=EXPIRY_ACTOR, reason=EXPIRY_REASON, now=existing.expires_at or now)
        existing = None
    conflict = ConflictError(
        f"{target} is already {'drained' if model == '' else 'forced open'}; release it first to change the hold.",
        errors={"__all__": [f"{target} already has a hold; release it first."]},
    )
    if existing is not None:
        raise conflict
    try:
        with transaction.atomic():
            row.save(force_insert=True)
    except IntegrityError:  # a concurrent request set the same hold first
        raise conflict from None
    action = "circuit.force_open" if kind == CircuitControl.Kind.FORCED_OPEN else "provider.drain"
    audit_record(
        actor=actor,
        action=action,
        object_type="circuit_control",
        object_id=target,
        object_repr=f"{target} {row.get_kind_display().lower()}",
        after=_control_record(row),
    )
    _event_record(
        CircuitEvent(
            provider=provider,
            model=model,
            kind=kind,
            at=now,
            actor=row.created_by,
            reason=reason,
            until=row.expires_at,
        )
    )
    transaction.on_commit(config_publish)
    return row


@transaction.atomic
def circuit_force_open(
    *, actor: Actor, provider: str, model: str, reason: str, minutes: int | str | None
) -> CircuitControl:
    """Hold one circuit open (no traffic, no probe) until released or `minutes` from now; audited, recorded in
    the circuit's history, and applied by every gateway process when the change is published (on commit)."""
    errors = FieldErrors()
    model_name = _hold_name(model)
    # The model's row before the provider's (see _lock_model).
    found_model = _lock_model(model_name) if model_name else None
    found = _hold_provider(errors, provider)
    _hold_model(errors, model_name, found_model, found)
    text = _hold_reason(errors, reason)
    length = _hold_minutes(errors, minutes)
    errors.raise_if_any()
    assert found is not None
    return _hold(
        actor=actor,
        kind=CircuitControl.Kind.FORCED_OPEN,
        provider=found.name,
        model=model_name,
        reason=text,
        minutes=length,
        now=timezone.now(),
    )


@transaction.atomic
def provider_drain(*, actor: Actor, provider: str, reason: str, minutes: int | str | None) -> CircuitControl:
    """Hold every circuit of a provider open until released or `minutes` from now (as circuit_force_open)."""
    errors = FieldErrors()
    found = _hold_provider(errors, provider)
    text = _hold_reason(errors, reason)
    length = _hold_minutes(errors, minutes)
    errors.raise_if_any()
    assert found is not None
    return _hold(
        actor=actor,
        kind=CircuitControl.Kind.DRAINED,
        provider=found.name,
        model="",
        reason=text,
        minutes=length,
        now=timezone.now(),
    )


def _release(*, actor: Actor | None, row: CircuitControl, who: str, reason: str, now: datetime) -> bool:
    """Delete one hold (if still there), audit it and record its release. False when another caller won."""
    deleted, _ = CircuitControl.objects.filter(pk=row.pk).delete()
    if deleted != 1:
        return False
    target = _target(row.provider, row.model)
    audit_record(
        actor=actor,
        action="circuit.release",
        object_type="circuit_control",
        object_id=target,
        object_repr=f"{target} released",
        before=_control_record(row),
        after={"reason": reason} if reason else None,
    )
    _event_record(
        CircuitEvent(
            provider=row.provider,
            model=row.model,
            kind=CircuitEvent.Kind.RELEASED,
            at=now,
            actor=who,
            reason=reason,
        )
    )
    return True


def circuit_release(*, actor: Actor, provider: str, model: str = "") -> CircuitControl:
    """Lift the hold on one circuit (`model`) or the drain of a provider (model ""); returns the hold lifted.

    NotFound when there is no such hold. A hold past its expiry holds nothing (the engines no longer honour it)
    even if the expiry job has not removed it yet: it is released as that job would release it (by "expiry", at
    its expiry; committed) and the answer is NotFound too. Traffic resumes through the circuit's own state (a
    tripped circuit stays open until its cooldown and probe).
    """
    provider = provider.strip() if isinstance(provider, str) else ""
    model = model.strip() if isinstance(model, str) else ""
    errors = FieldErrors()
    if not provider:
        errors.add("provider", "Provider is required.")
    errors.raise_if_any()
    target = _target(provider, model)
    with transaction.atomic():
        row = CircuitControl.objects.select_for_update().filter(provider=provider, model=model).first()
        now = timezone.now()
        released = None
        if _expired(row, now):
            if _release(actor=None, row=row, who=EXPIRY_ACTOR, reason=EXPIRY_REASON, now=row.expires_at or now):
                transaction.on_commit(config_publish)
        elif row is not None and _release(actor=actor, row=row, who=_actor_name(actor), reason="", now=now):
            transaction.on_commit(config_publish)
            released = row
    # Raised after the commit, so that an expired hold's release is kept.
    if released is None:
        raise NotFound(
            f"{target} is not {'drained' if not model else 'forced open'}: there is nothing to release.",
            errors={"__all__": [f"{target} has no hold to release."]},
        )
    return released


EXPIRY_ACTOR = "expiry"
EXPIRY_REASON = "hold expired"


@transaction.atomic
def circuit_controls_expire(*, now: datetime | None = None) -> int:
    """Delete the holds past their expiry, each audited (by the system) and recorded as released by "expiry".

    The engines stop honouring a hold at its expiry on their own; this tidies the table and the history.
    Returns how many were removed (a concurrent run removes each once).
    """
    now = now or timezone.now()
    # Every hold locked before the first release's audit event takes the audit log's lock (the order every write
    # keeps); one another write holds (a rename moving it) is skipped, and left to the next run.
    expired = list(
        CircuitControl.objects.select_for_update(skip_locked=True)
        .filter(expires_at__lte=now)
        .order_by("expires_at", "id")
    )
    released = 0
    for row in expired:
        at = row.expires_at or now
        if _release(actor=None, row=row, who=EXPIRY_ACTOR, reason=EXPIRY_REASON, now=at):
            released += 1
    if released:
        transaction.on_commit(config_publish)
    return released
