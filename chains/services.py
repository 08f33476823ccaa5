"""Writes of fallback chains. Each service is one transaction and writes its audit event inside it."""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from audit.services import audit_changes, audit_record
from catalog.enums import ScopeType
from catalog.models import LlmModel, Provider
from catalog.scopes import Scope, scope_validate
from catalog.services import actor_locked
from chains.models import MAX_ENTRIES, ChainEntry, FallbackChain, ResilienceDefaults
from chains.resilience import resilience_validate
from chains.selectors import chain_get, chain_snapshot, resilience_defaults_effective, resilience_defaults_get
from core.configbus import config_publish
from core.db import for_update, write_unique
from core.errors import ConflictError, ValidationFailed
from core.types import Actor
from core.validation import FieldErrors, clean_name
from core.validators import CONTROL_CHARACTERS_MESSAGE, has_control_characters

NAME_MAX = 200


@dataclass(frozen=True)
class EntryInput:
    model: str
    provider: str | None = None


@dataclass(frozen=True)
class ChainInput:
    name: str
    source_model: str
    entries: list[EntryInput]
    scope_type: str = ScopeType.GLOBAL
    scope_id: int | None = None
    enabled: bool = True
    # The resilience policy object ({"enabled": true, ...knobs}); None: a new chain starts from the global
    # default's `enabled`, an edited chain keeps its policy.
    resilience: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class _Resolved:
    name: str
    source: LlmModel
    entries: list[tuple[LlmModel, Provider | None]]
    scope: Scope
    enabled: bool
    resilience: dict[str, Any] | None


def _lookup_names(names: list[str]) -> set[str]:
    """The names worth a query: trimmed, not blank, and free of control characters."""
    return {n for n in (name.strip() for name in names) if n and not has_control_characters(n)}


def _resolve(data: ChainInput, *, exclude_chain_id: int | None, creator_pk: int | None = None) -> _Resolved:
    """Validate every rule and collect all field errors before raising."""
    errors = FieldErrors()

    name = clean_name(errors, data.name, max_length=NAME_MAX)

    source_name = (data.source_model or "").strip()
    # A name with a control character names nothing (names cannot hold one) and is not looked up: PostgreSQL
    # refuses NUL in text, and the message would show the character.
    # The models and providers named are locked (models first, each in primary key order: docs/decisions.md, "One
    # lock order"): a delete of one waits for this write and its PROTECT check sees the chain, or this write waits
    # and finds it gone (a 400, not a foreign key failing at COMMIT); a move of the source's default provider
    # waits too, so "a chain cannot fall back to itself" holds for the chain saved.
    named = LlmModel.objects.select_related("provider").filter(
        name__in=_lookup_names([source_name, *[e.model or "" for e in data.entries]])
    )
    models_by_name = {m.name: m for m in for_update(named.order_by("pk"), of=("self",))}
    source = models_by_name.get(source_name)
    if not source_name:
        errors.add("source_model", "Source model is required and cannot be only whitespace.")
    elif has_control_characters(source_name):
        errors.add("source_model", CONTROL_CHARACTERS_MESSAGE)
    elif source is None:
        errors.add("source_model", f"Unknown model “{source_name}”.")

    provider_names = _lookup_names([e.provider or "" for e in data.entries])
    providers = {p.name: p for p in for_update(Provider.objects.filter(name__in=provider_names).order_by("pk"))}

    if not data.entries:
        errors.add("entries", "A chain needs at least one entry.")
    elif len(data.entries) > MAX_ENTRIES:
        errors.add("entries", f"A chain has at most {MAX_ENTRIES} entries (got {len(data.entries)}).")

    resolved_entries: list[tuple[LlmModel, Provider | None]] = []
    seen: dict[tuple[str, str], int] = {}
    for i, entry in enumerate(data.entries):
        field = f"entries.{i}"
        model_name = (entry.model or "").strip()
        provider_name = (entry.provider or "").strip()
        model = models_by_name.get(model_name)
        provider = providers.get(provider_name) if provider_name else None
        if not model_name:
            errors.add(f"{field}.model", f"Entry {i + 1}: model is required and cannot be only whitespace.")
            continue
        unreadable = [
            part for part, n in (("model", model_name), ("provider", provider_name)) if has_control_characters(n)
        ]
        for part in unreadable:
            errors.add(f"{field}.{part}", f"Entry {i + 1}: {CONTROL_CHARACTERS_MESSAGE}")
        if unreadable:
            continue
        if model is None:
            errors.add(f"{field}.model", f"Entry {i + 1}: unknown model “{model_name}”.")
            continue
        if provider_name and provider is None:
            errors.add(f"{field}.provider", f"Entry {i + 1}: unknown provider “{provider_name}”.")
            continue
        served_by = provider or model.provider
        if source is not None and model.pk == source.pk and served_by.pk == source.provider_id:
            errors.add(
                f"{field}.model",
                f"Entry {i + 1}: {model_name} is the source model; a chain cannot fall back to itself.",
            )
            continue
        key = (model.name, served_by.name)
        if key in seen:
            errors.add(
                f"{field}.model", f"Entry {i + 1} repeats entry {seen[key] + 1} ({model.name} via {served_by.name})."
            )
            continue
        seen[key] = i
        resolved_entries.append((model, provider))

    scope: Scope | None = None
    try:
        scope = scope_validate(scope_type=data.scope_type, scope_id=data.scope_id, creator_pk=creator_pk)
    except ValidationFailed as exc:
        errors.extend(exc.errors)

    if source is not None and scope is not None:
        clash = FallbackChain.objects.filter(source_model=source, scope_type=scope.type, scope_id=scope.id)
        if exclude_chain_id is not None:
            clash = clash.exclude(pk=exclude_chain_id)
        other = clash.values_list("name", flat=True).first()
        if other is not None:
            errors.add("source_model", f"Chain “{other}” already covers {source.name} in this scope; edit it instead.")

    resilience: dict[str, Any] | None = None
    if data.resilience is not None:
        resilience, resilience_errors = resilience_validate(data.resilience)
        errors.extend(resilience_errors, prefix="resilience.")

    errors.raise_if_any()
    assert source is not None and scope is not None
    return _Resolved(
        name=name,
        source=source,
        entries=resolved_entries,
        scope=scope,
        enabled=bool(data.enabled),
        resilience=resilience,
    )


def _write_entries(chain: FallbackChain, entries: list[tuple[LlmModel, Provider | None]]) -> None:
    chain.entries.all().delete()
    ChainEntry.objects.bulk_create(
        ChainEntry(chain=chain, position=i, model=model, provider=provider)
        for i, (model, provider) in enumerate(entries)
    )


# Two concurrent writes passed validation; the database constraint caught the second.
_CHAIN_TAKEN = "Another chain already covers this source model in this scope."


@transaction.atomic
def chain_create(*, actor: Actor, data: ChainInput) -> FallbackChain:
    """Create a chain with its entries and audit it."""
    creator = actor if isinstance(actor, get_user_model()) else None
    r = _resolve(data, exclude_chain_id=None, creator_pk=creator.pk if creator is not None else None)
    actor_locked(actor)  # the chain names its creator (after the models and the scope's target, as users come)
    resilience = r.resilience
    if resilience is None:
        resilience = {"enabled": bool(resilience_defaults_effective(resilience_defaults_get())["enabled"])}
    chain = write_unique(
        lambda: FallbackChain.objects.create(
            name=r.name,
            source_model=r.source,
            scope_type=r.scope.type,
            scope_id=r.scope.id,
            enabled=r.enabled,
            resilience=resilience,
            created_by=creator,  # None: created by the system
        ),
        field="source_model",
        message=_CHAIN_TAKEN,
    )
    _write_entries(chain, r.entries)
    chain = chain_get(chain_id=chain.pk)
    audit_record(
        actor=actor,
        action="chain.create",
        object_type="chain",
        object_id=chain.pk,
        object_repr=chain.name,
        after=chain_snapshot(chain),
    )
    transaction.on_commit(config_publish)
    return chain


def _lock(chain_id: int, version: int | None) -> FallbackChain:
    """Lock the row and check the caller edited the current version."""
    try:
        chain = FallbackChain.objects.select_for_update().get(pk=chain_id)
    except FallbackChain.DoesNotExist:
        raise ConflictError("This chain no longer exists; it was deleted by someone else.") from None
    if version is not None and chain.version != version:
        raise ConflictError(
            f"This chain was changed by someone else (you edited version {version}, it is now at version "
            f"{chain.version}). Reload to see their changes, then apply yours again.",
            errors={"version": [f"Stale version {version}; current is {chain.version}."]},
        )
    return chain


def _resolved_snapshot(r: _Resolved, resilience: dict[str, Any]) -> dict[str, object]:
    """What chain_snapshot would return once `r` is saved."""
    return {
        "name": r.name,
        "source_model": r.source.name,
        "entries": [
            {"model": model.name, "provider": provider.name if provider else None} for model, provider in r.entries
        ],
        "scope": {"type": r.scope.type, "id": r.scope.id},
        "enabled": r.enabled,
        "resilience": resilience,
    }


@transaction.atomic
def chain_update(*, actor: Actor, chain_id: int, version: int, data: ChainInput) -> FallbackChain:
    """Replace a chain's fields and entries if `version` is current; audit the changed fields.

    An update that changes nothing keeps the version and writes no audit event.
    """
    if version is None:
        raise ValidationFailed("version is required.", errors={"version": ["Send the version you edited."]})
    locked = _lock(chain_id, version)
    before = chain_snapshot(chain_get(chain_id=locked.pk))
    r = _resolve(data, exclude_chain_id=locked.pk)
    resilience = r.resilience if r.resilience is not None else dict(locked.resilience or {})
    if _resolved_snapshot(r, resilience) == before:
        # Nothing changed: keep the version, so other editors holding it get no spurious conflict.
        return chain_get(chain_id=locked.pk)
    write_unique(
        lambda: FallbackChain.objects.filter(pk=locked.pk).update(
            name=r.name,
            source_model=r.source,
            scope_type=r.scope.type,
            scope_id=r.scope.id,
            enabled=r.enabled,
            resilience=resilience,
            version=F("version") + 1,
            updated_at=timezone.now(),
        ),
        field="source_model",
        message=_CHAIN_TAKEN,
    )
    chain = chain_get(chain_id=locked.pk)
    _write_entries(chain, r.entries)
    chain = chain_get(chain_id=locked.pk)
    audit_changes(
        actor=actor,
        action="chain.update",
        object_type="chain",
        object_id=chain.pk,
        object_repr=chain.name,
        before=before,
        after=chain_snapshot(chain),
    )
    transaction.on_commit(config_publish)
    return chain


@transaction.atomic
def chain_set_enabled(*, actor: Actor, chain_id: int, enabled: bool, version: int | None = None) -> FallbackChain:
    """Enable or disable a chain and audit the change (no event when nothing changes)."""
    locked = _lock(chain_id, version)
    if locked.enabled != enabled:
        FallbackChain.objects.filter(pk=locked.pk).update(
            enabled=enabled, version=F("version") + 1, updated_at=timezone.now()
        )
        audit_record(
            actor=actor,
            action="chain.enable" if enabled else "chain.disable",
            object_type="chain",
            object_id=locked.pk,
            object_repr=locked.name,
            before={"enabled": locked.enabled},
            after={"enabled": enabled},
        )
        transaction.on_commit(config_publish)
    return chain_get(chain_id=locked.pk)


@transaction.atomic
def chain_delete(*, actor: Actor, chain_id: int, version: int | None = None) -> None:
    """Delete a chain; the audit event keeps a full snapshot."""
    locked = _lock(chain_id, version)
    snapshot = chain_snapshot(chain_get(chain_id=locked.pk))
    snapshot["version"] = locked.version
    locked.delete()
    audit_record(
        actor=actor,
        action="chain.delete",
        object_type="chain",
        object_id=chain_id,
        object_repr=str(snapshot["name"]),
        before=snapshot,
    )
    transaction.on_commit(config_publish)


@transaction.atomic
def resilience_defaults_update(*, actor: Actor, version: int, policy: Mapping[str, Any]) -> ResilienceDefaults:
    """Replace the global default policy if `version` is current; knobs not in `policy` take the built-in
    defaults. Audited with the changed knobs' before/after (effective values); no change, no event."""
    if version is None:
        raise ValidationFailed("version is required.", errors={"version": ["Send the version you edited."]})
    clean, problems = resilience_validate(policy)
    errors = FieldErrors()
    errors.extend(problems, prefix="policy.")
    errors.raise_if_any()
    row, _ = ResilienceDefaults.objects.get_or_create(pk=ResilienceDefaults.SINGLETON_ID)
    row = ResilienceDefaults.objects.select_for_update().get(pk=row.pk)
    if row.version != version:
        raise ConflictError(
            f"The default resilience policy was changed by someone else (you edited version {version}, it is "
            f"now at version {row.version}). Reload to see their changes, then apply yours again.",
            errors={"version": [f"Stale version {version}; current is {row.version}."]},
        )
    if clean == (row.policy or {}):
        return row
    before = {"policy": dict(row.policy or {}), **resilience_defaults_effective(row)}
    row.policy = clean
    row.version += 1
    row.updated_by = actor if isinstance(actor, get_user_model()) else None
    actor_locked(actor)  # the row names its editor
    row.save()
    audit_changes(
        actor=actor,
        action="resilience_defaults.update",
        object_type="resilience_defaults",
        object_id=row.pk,
        object_repr="Resilience defaults",
        before=before,
        after={"policy": dict(row.policy), **resilience_defaults_effective(row)},
    )
    transaction.on_commit(config_publish)
    return row
