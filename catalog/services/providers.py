"""Writes of providers: the upstream APIs the gateway calls."""

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from audit.services import audit_record
from catalog.enums import Protocol
from catalog.models import LlmModel, Provider, base_url_problem
from catalog.references import provider_references, provider_renamed
from catalog.selectors import models_of_provider
from catalog.services._shared import (
    audit_update,
    delete_checked,
    lock_stored,
    name_checked,
    refuse_if_referenced,
    save_named,
)
from core.configbus import config_publish
from core.db import for_update
from core.types import Actor
from core.validation import FieldErrors
from core.validators import SECRET_CONTROL_CHARACTERS_MESSAGE, has_control_characters


@dataclass(frozen=True)
class ProviderInput:
    name: str
    base_url: str
    protocol: str = Protocol.OPENAI
    connect_timeout: float = 5.0
    read_timeout: float = 60.0
    # Resilient chains' stream timeouts; None = the chain policy's value.
    first_token_timeout_seconds: float | None = None
    idle_timeout_seconds: float | None = None
    # Azure OpenAI only: the `api-version` query parameter (required there) and model name → deployment name.
    api_version: str = ""
    deployments: dict[str, str] = field(default_factory=dict)


STREAM_TIMEOUT_BOUNDS = (0.5, 600.0)
API_VERSION_MAX = 32
DEPLOYMENT_NAME_MAX = 128
# Azure's api-version values are dates with an optional suffix ("2024-10-21", "2025-01-01-preview").
_API_VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z.\-]*")


def _provider_snapshot(provider: Provider) -> dict[str, Any]:
    # The API key itself never enters the audit log; only whether one is set.
    return {
        "name": provider.name,
        "protocol": provider.protocol,
        "base_url": provider.base_url,
        "has_api_key": bool(provider.api_key),
        "connect_timeout": provider.connect_timeout,
        "read_timeout": provider.read_timeout,
        "first_token_timeout_seconds": provider.first_token_timeout_seconds,
        "idle_timeout_seconds": provider.idle_timeout_seconds,
        "api_version": provider.api_version,
        "deployments": dict(provider.deployments or {}),
    }


def _provider_validate(data: ProviderInput, *, exclude_pk: int | None, api_key: str | None = None) -> dict[str, Any]:
    errors = FieldErrors()
    if api_key and has_control_characters(api_key.strip()):
        # It is sent in the Authorization header of every upstream call.
        errors.add("api_key", SECRET_CONTROL_CHARACTERS_MESSAGE)
    taken = Provider.objects.exclude(pk=exclude_pk) if exclude_pk else Provider.objects.all()
    name = name_checked(errors, data.name, label="Provider", max_length=64, taken=taken)
    if "/" in name:
        # Circuits are keyed "provider/model"; a slash would make the key ambiguous.
        errors.add("name", "Provider name cannot contain “/” (circuits are named provider/model).")
    if data.protocol not in Protocol.values:
        errors.add("protocol", f"Protocol must be one of: {', '.join(Protocol.values)}.")
    base_url = (data.base_url or "").strip()
    if not base_url:
        errors.add("base_url", "Base URL is required.")
    elif len(base_url) > 500:
        errors.add("base_url", "Base URL is at most 500 characters.")
    elif problem := base_url_problem(base_url):
        errors.add("base_url", problem)
    for field_name in ("connect_timeout", "read_timeout"):
        value = getattr(data, field_name)
        if not math.isfinite(value) or value < 0.1:
            errors.add(field_name, "Timeout must be at least 0.1 seconds.")
    low, high = STREAM_TIMEOUT_BOUNDS
    for field_name in ("first_token_timeout_seconds", "idle_timeout_seconds"):
        value = getattr(data, field_name)
        if value is not None and not (math.isfinite(value) and low <= value <= high):
            errors.add(field_name, f"Timeout must be between {low:g} and {high:g} seconds, or empty for the default.")
    api_version = _api_version_checked(errors, data.api_version, protocol=data.protocol)
    deployments = _deployments_checked(errors, data.deployments)
    errors.raise_if_any()
    return {
        "name": name,
        "protocol": data.protocol,
        "base_url": base_url,
        "connect_timeout": data.connect_timeout,
        "read_timeout": data.read_timeout,
        "first_token_timeout_seconds": data.first_token_timeout_seconds,
        "idle_timeout_seconds": data.idle_timeout_seconds,
        "api_version": api_version,
        "deployments": deployments,
    }


def _api_version_checked(errors: FieldErrors, value: str | None, *, protocol: str) -> str:
    """Azure refuses every call without `api-version`, so an Azure provider cannot be saved without one."""
    api_version = (value or "").strip()
    if not api_version:
        if protocol == Protocol.AZURE:
            errors.add("api_version", "API version is required for Azure OpenAI providers (e.g. “2024-10-21”).")
    elif len(api_version) > API_VERSION_MAX:
        errors.add("api_version", f"API version is at most {API_VERSION_MAX} characters.")
    elif not _API_VERSION.fullmatch(api_version):
        # It goes into the query string of every call.
        errors.add("api_version", "API version may contain only letters, digits, “.” and “-” (e.g. “2024-10-21”).")
    return api_version


def _deployment_problem(model: object, deployment: object) -> str | None:
    if not isinstance(model, str) or not isinstance(deployment, str):
        return "Deployments map model names to deployment names, both strings."
    if not model.strip() or not deployment.strip():
        return "Model and deployment names cannot be empty."
    if has_control_characters(model) or has_control_characters(deployment) or not deployment.isprintable():
        return "Model and deployment names cannot contain control characters."
    if len(deployment) > DEPLOYMENT_NAME_MAX:
        return f"Deployment “{deployment[:40]}…” is longer than {DEPLOYMENT_NAME_MAX} characters."
    if "/" in deployment or "?" in deployment or "#" in deployment:
        # It becomes a path segment of the upstream URL.
        return f"Deployment “{deployment}” cannot contain “/”, “?” or “#”."
    return None


def _models_locked(names: Iterable[str]) -> list[LlmModel]:
    """The models with these names, locked in primary key order."""
    return list(for_update(LlmModel.objects.filter(name__in=set(names)).order_by("pk")))


def provider_update_locks_first(data: Mapping[str, Any], stored: Provider) -> None:
    """The locks provider_update takes before the provider's row: the models its deployments will name (models
    come first)."""
    deployments = data.get("deployments", stored.deployments)
    # As _deployments_checked: deployments it refuses lock nothing.
    if isinstance(deployments, dict) and not any(_deployment_problem(m, d) for m, d in deployments.items()):
        _models_locked(m.strip() for m in deployments)


def _deployments_checked(errors: FieldErrors, value: object) -> dict[str, str]:
    """An object of catalog model name → deployment name. An unknown model is an error, not a warning: a typo
    would silently send that model to a deployment named after itself."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        errors.add("deployments", "Deployments must be an object of model name → deployment name.")
        return {}
    for model, deployment in value.items():
        if problem := _deployment_problem(model, deployment):
            errors.add("deployments", problem)
            return {}
    cleaned = {model.strip(): deployment.strip() for model, deployment in value.items()}
    # Locked (in primary key order), before the provider row itself: a rename or a delete of a model locks it
    # first, so the deployment either waits and finds the new name refused, or the rename carries it over.
    known = {model.name for model in _models_locked(cleaned)}
    if unknown := [m for m in cleaned if m not in known]:
        names = ", ".join(f"“{m}”" for m in unknown)
        errors.add(
            "deployments", f"Unknown model{'s' if len(unknown) > 1 else ''} {names}; keys must be catalog model names."
        )
    return dict(sorted(cleaned.items()))


def provider_validate(*, data: ProviderInput, provider: Provider | None = None) -> None:
    """Raise ValidationFailed as provider_create (or provider_update of `provider`) would; writes nothing."""
    _provider_validate(data, exclude_pk=provider.pk if provider else None)


@transaction.atomic
def provider_create(*, actor: Actor, data: ProviderInput, api_key: str = "") -> Provider:
    """Create a provider; its API key is stored encrypted and never returned."""
    fields = _provider_validate(data, exclude_pk=None, api_key=api_key)
    provider = Provider(**fields, api_key=(api_key or "").strip())
    save_named(provider, label="Provider")
    audit_record(
        actor=actor,
        action="provider.create",
        object_type="provider",
        object_id=provider.pk,
        object_repr=str(provider),
        after=_provider_snapshot(provider),
    )
    transaction.on_commit(config_publish)
    return provider


@transaction.atomic
def provider_update(*, actor: Actor, provider: Provider, data: ProviderInput, api_key: str | None = None) -> Provider:
    """Replace a provider's fields; `api_key=None` keeps the stored key, "" clears it."""
    fields = _provider_validate(data, exclude_pk=provider.pk, api_key=api_key)
    before = _provider_snapshot(provider)
    key_replaced = api_key is not None and bool(provider.api_key) and bool(api_key.strip())
    old_name = provider.name
    for name, value in fields.items():
        setattr(provider, name, value)
    if api_key is not None:
        provider.api_key = api_key.strip()
    save_named(provider, label="Provider")
    if provider.name != old_name:
        # Before the first audit event: the rows are locked before the audit log's lock, as every service does.
        provider_renamed(actor=actor, old=old_name, new=provider.name)
    after = _provider_snapshot(provider)
    if key_replaced:
        before["api_key"], after["api_key"] = "(previous key)", "(replaced)"
    audit_update(actor=actor, object_type="provider", obj=provider, before=before, after=after)
    transaction.on_commit(config_publish)
    return provider


@transaction.atomic
def provider_delete(*, actor: Actor, provider: Provider) -> None:
    """Delete a provider that no chain or model uses (ConflictError names them otherwise). The row is locked
    before the check, as a model's delete locks its own."""
    provider = lock_stored(provider, what=f"Provider “{provider.name}”")
    refs = provider_references(provider=provider)
    if model_names := models_of_provider(provider=provider):
        refs["models"] = model_names
    refuse_if_referenced(f"Provider “{provider.name}”", refs)
    snapshot, pk = _provider_snapshot(provider), provider.pk
    delete_checked(provider, what=f"Provider “{provider.name}”")
    audit_record(
        actor=actor,
        action="provider.delete",
        object_type="provider",
        object_id=pk,
        object_repr=snapshot["name"],
        before=snapshot,
    )
    transaction.on_commit(config_publish)
