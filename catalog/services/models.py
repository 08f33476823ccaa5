"""Writes of LLM models: what clients ask the gateway for, each with a default provider and prices."""

from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import Q

from audit.services import audit_record
from catalog.enums import Capability
from catalog.models import LlmModel, Provider
from catalog.references import (
    model_name_claimed_as,
    model_name_lock,
    model_references,
    model_renamed,
    provider_move_problems,
)
from catalog.selectors import providers_deploying
from catalog.services._shared import (
    audit_update,
    delete_checked,
    lock_named,
    lock_stored,
    name_checked,
    refuse_if_referenced,
    save_named,
)
from core.configbus import config_publish
from core.types import Actor
from core.validation import FieldErrors

# Largest value a DecimalField(max_digits=12, decimal_places=4) holds.
PRICE_MAX = Decimal("99999999.9999")
# PositiveIntegerField's range on every supported database.
INT_MAX = 2_147_483_647


@dataclass(frozen=True)
class LlmModelInput:
    name: str
    provider: str
    capabilities: list[str] = field(default_factory=list)
    input_price_per_mtok: Decimal = Decimal(0)
    output_price_per_mtok: Decimal = Decimal(0)
    context_window: int = 8192
    # `max_tokens` for upstreams that require it (Anthropic) when the client omits it.
    max_output_tokens: int = 4096


def _llm_model_snapshot(model: LlmModel) -> dict[str, Any]:
    return {
        "name": model.name,
        "provider": model.provider.name,
        "capabilities": list(model.capabilities),
        "input_price_per_mtok": str(model.input_price_per_mtok),
        "output_price_per_mtok": str(model.output_price_per_mtok),
        "context_window": model.context_window,
        "max_output_tokens": model.max_output_tokens,
    }


def _llm_model_validate(data: LlmModelInput, *, exclude_pk: int | None) -> dict[str, Any]:
    errors = FieldErrors()
    taken = LlmModel.objects.exclude(pk=exclude_pk) if exclude_pk else LlmModel.objects.all()
    name = name_checked(errors, data.name, label="Model", max_length=128, taken=taken)
    if name and (what := model_name_claimed_as(name=name)):
        # Clients could not tell the alias from the model.
        errors.add("name", f"“{name}” is already {what}; choose another name.")
    provider_name = (data.provider or "").strip()
    # Locked: a provider deleted meanwhile waits for this write, then its PROTECT check sees the model.
    provider = lock_named(Provider, provider_name) if provider_name else None
    if not provider_name:
        errors.add("provider", "Provider is required.")
    elif provider is None:
        errors.add("provider", f"Unknown provider “{provider_name}”.")
    elif exclude_pk is not None and (stored := LlmModel.objects.filter(pk=exclude_pk).first()) is not None:
        if stored.provider_id != provider.pk:
            for problem in provider_move_problems(model=stored, provider=provider):
                errors.add("provider", problem)
    unknown = [c for c in data.capabilities if c not in Capability.values]
    if unknown:
        errors.add(
            "capabilities", f"Unknown capabilities {', '.join(unknown)}; allowed: {', '.join(Capability.values)}."
        )
    for field_name in ("input_price_per_mtok", "output_price_per_mtok"):
        price = Decimal(getattr(data, field_name))
        if not price.is_finite() or price < 0:
            errors.add(field_name, "Price cannot be negative.")
        elif price > PRICE_MAX:
            errors.add(field_name, f"Price is at most {PRICE_MAX}.")
    if not 1 <= data.context_window <= INT_MAX:
        errors.add("context_window", f"Context window must be between 1 and {INT_MAX} tokens.")
    if not 1 <= data.max_output_tokens <= INT_MAX:
        errors.add("max_output_tokens", f"Max output tokens must be between 1 and {INT_MAX}.")
    errors.raise_if_any()
    # Stored once each, in the enum's order, so equal sets compare equal.
    capabilities = [c for c in Capability.values if c in data.capabilities]
    return {
        "name": name,
        "provider": provider,
        "capabilities": capabilities,
        "input_price_per_mtok": data.input_price_per_mtok,
        "output_price_per_mtok": data.output_price_per_mtok,
        "context_window": data.context_window,
        "max_output_tokens": data.max_output_tokens,
    }


def llm_model_validate(*, data: LlmModelInput, model: LlmModel | None = None) -> None:
    """Raise ValidationFailed as llm_model_create (or llm_model_update of `model`) would; writes nothing."""
    _llm_model_validate(data, exclude_pk=model.pk if model else None)


@transaction.atomic
def llm_model_create(*, actor: Actor, data: LlmModelInput) -> LlmModel:
    """Add a model to the catalog."""
    model_name_lock(name=data.name)
    model = LlmModel(**_llm_model_validate(data, exclude_pk=None))
    save_named(model, label="Model")
    audit_record(
        actor=actor,
        action="model.create",
        object_type="model",
        object_id=model.pk,
        object_repr=str(model),
        after=_llm_model_snapshot(model),
    )
    transaction.on_commit(config_publish)
    return model


@transaction.atomic
def llm_model_update(*, actor: Actor, model: LlmModel, data: LlmModelInput) -> LlmModel:
    """Replace a model's fields. A model deleted meanwhile is a ConflictError.

    The stored row is locked before anything is checked (after the new name's lock, which comes first): a chain
    that names the model locks it too, so a provider move and a chain cannot both pass their checks."""
    model_name_lock(name=data.name)
    model = lock_stored(model, what=f"Model “{model.name}”", related=("provider",))
    _providers_locked(model=model, data=data)
    fields = _llm_model_validate(data, exclude_pk=model.pk)
    before = _llm_model_snapshot(model)
    old_name = model.name
    for name, value in fields.items():
        setattr(model, name, value)
    save_named(model, label="Model")
    if model.name != old_name:
        # Every row locked before the first audit event, which takes the audit log's lock (the order every service
        # keeps, so a rename cannot deadlock with another write).
        move_deployments = _deployments_rename(actor=actor, old=old_name, new=model.name)
        model_renamed(actor=actor, old=old_name, new=model.name)
        move_deployments()
    audit_update(actor=actor, object_type="model", obj=model, before=before, after=_llm_model_snapshot(model))
    transaction.on_commit(config_publish)
    return model


def _providers_locked(*, model: LlmModel, data: LlmModelInput) -> None:
    """Lock, in one query in primary key order, every provider the update locks: the one the model will be
    served by and, on a rename, those deploying it (which the rename edits). Locked one by one, the first before
    the others, two updates could each hold a provider the other waits for."""
    wanted = Q(name=(data.provider or "").strip())
    if (data.name or "").strip() != model.name:
        wanted |= Q(pk__in=[provider.pk for provider in providers_deploying(model_name=model.name)])
    list(Provider.objects.select_for_update().filter(wanted).order_by("pk").values_list("pk", flat=True))


def _deployments_rename(*, actor: Actor, old: str, new: str) -> Callable[[], None]:
    """Carry a renamed model's Azure deployment over to its new name, so routing does not silently change.

    Locks the providers (read again under the lock: a provider PATCH in flight would otherwise overwrite the
    change, or be overwritten); the function returned moves and audits (as `catalog.references`' renames)."""
    # The model is locked already: a provider write naming it in its deployments locks it first, so none is in
    # flight. Several rows of one table are locked in primary key order, as everywhere.
    deploying = [provider.pk for provider in providers_deploying(model_name=old)]
    locked = Provider.objects.select_for_update().filter(pk__in=deploying).order_by("pk")
    providers = sorted((p for p in locked if old in (p.deployments or {})), key=lambda p: p.name)

    def move() -> None:
        for provider in providers:
            deployments = dict(provider.deployments)
            deployments[new] = deployments.pop(old)
            before = {"deployments": dict(provider.deployments)}
            provider.deployments = dict(sorted(deployments.items()))
            provider.save(update_fields=["deployments", "updated_at"])
            audit_update(
                actor=actor,
                object_type="provider",
                obj=provider,
                before=before,
                after={"deployments": provider.deployments},
            )

    return move


@transaction.atomic
def llm_model_delete(*, actor: Actor, model: LlmModel) -> None:
    """Delete a model no chain, routing rule, guardrail or alias uses (ConflictError names them otherwise).

    The row is locked before the check: a write that names the model locks it too, so it commits first (and the
    check sees it) or waits and finds the model gone."""
    model = lock_stored(model, what=f"Model “{model.name}”", related=("provider",))
    refuse_if_referenced(f"Model “{model.name}”", model_references(model=model))
    snapshot, pk = _llm_model_snapshot(model), model.pk
    delete_checked(model, what=f"Model “{model.name}”")
    audit_record(
        actor=actor,
        action="model.delete",
        object_type="model",
        object_id=pk,
        object_repr=snapshot["name"],
        before=snapshot,
    )
    transaction.on_commit(config_publish)
