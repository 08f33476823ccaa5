"""Writes of catalog objects. Each service is one transaction and writes its audit event inside it."""

import math
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.db import IntegrityError, models, transaction
from django.db.models.deletion import ProtectedError
from django.utils import timezone

from audit.services import audit_changes, audit_record
from catalog.enums import Capability, Protocol, ScopeType
from catalog.keys import key_generate, key_hash
from catalog.models import Agent, ApiKey, Application, ConsoleToken, LlmModel, Provider, Team, base_url_problem
from catalog.selectors import (
    api_keys_of_user,
    api_keys_usable_count,
    models_of_provider,
    scope_references,
    user_by_username,
)
from chains.selectors import chains_referencing_model, chains_referencing_provider
from core.configbus import config_publish
from core.errors import ConflictError, ValidationFailed
from core.validators import (
    CONTROL_CHARACTERS_MESSAGE,
    SECRET_CONTROL_CHARACTERS_MESSAGE,
    has_control_characters,
)
from routing.models import Alias
from routing.selectors import (
    aliases_referencing_model,
    guardrails_referencing_model,
    routing_rules_referencing_model,
)

Errors = dict[str, list[str]]

# Largest value a DecimalField(max_digits=12, decimal_places=4) holds.
PRICE_MAX = Decimal("99999999.9999")
# PositiveIntegerField's range on every supported database.
INT_MAX = 2_147_483_647


# --- shared validation helpers (also used by routing.services) ---------------------------------


def raise_if_errors(errors: Errors) -> None:
    """Raise ValidationFailed with every collected field error; the first message is the summary."""
    if errors:
        first = next(iter(errors.values()))[0]
        raise ValidationFailed(first, errors=errors)


def name_checked(
    errors: Errors,
    value: str | None,
    *,
    label: str,
    max_length: int,
    taken: models.QuerySet[Any],
    field_name: str = "name",
) -> str:
    """Strip a name and check it is present, printable, short enough and not used by another row of `taken`."""
    name = (value or "").strip()
    if not name:
        errors.setdefault(field_name, []).append(f"{label} name is required and cannot be only whitespace.")
    elif has_control_characters(name):
        errors.setdefault(field_name, []).append(CONTROL_CHARACTERS_MESSAGE)
    elif len(name) > max_length:
        errors.setdefault(field_name, []).append(f"{label} name is at most {max_length} characters.")
    elif taken.filter(name=name).exists():
        article = "An" if label[0].lower() in "aeiou" else "A"
        errors.setdefault(field_name, []).append(f"{article} {label.lower()} named “{name}” already exists.")
    return name


def refuse_if_referenced(what: str, refs: dict[str, list[str]]) -> None:
    """Raise ConflictError naming every object that still refers to `what`."""
    if not refs:
        return
    labels = {
        "chains": "chains",
        "routing_rules": "routing rules",
        "guardrails": "guardrails",
        "aliases": "aliases",
        "models": "models",
    }
    parts = [f"{labels.get(kind, kind)} {', '.join(f'“{n}”' for n in names)}" for kind, names in refs.items()]
    raise ConflictError(f"{what} is still used by {'; '.join(parts)}. Change or delete those first.", errors=refs)


def _unique_violation(field_name: str, label: str) -> ValidationFailed:
    # Two concurrent writes passed validation; the database constraint caught the second.
    message = f"Another {label.lower()} with this name was saved at the same time; choose another name."
    return ValidationFailed(message, errors={field_name: [message]})


def _save(obj: models.Model, *, label: str) -> None:
    try:
        with transaction.atomic():
            obj.save()
    except IntegrityError:
        raise _unique_violation("name", label) from None


def _delete(obj: models.Model, *, what: str) -> None:
    try:
        with transaction.atomic():
            obj.delete()
    except ProtectedError:
        # Referenced by a row created after our reference check.
        raise ConflictError(f"{what} is still referenced; reload and try again.") from None


def _audit_update(
    *, actor: Any, object_type: str, obj: models.Model, before: dict[str, Any], after: dict[str, Any]
) -> None:
    audit_changes(
        actor=actor,
        action=f"{object_type}.update",
        object_type=object_type,
        object_id=obj.pk,
        object_repr=str(obj),
        before=before,
        after=after,
    )


def _named(errors: Errors, field_name: str, value: str | None, *, label: str, lookup: Callable[[str], Any]) -> Any:
    """Resolve an optional reference by name; None or blank means no reference."""
    name = (value or "").strip()
    if not name:
        return None
    found = lookup(name)
    if found is None:
        errors.setdefault(field_name, []).append(f"Unknown {label} “{name}”.")
    return found


# --- providers --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProviderInput:
    name: str
    base_url: str
    protocol: str = Protocol.OPENAI
    connect_timeout: float = 5.0
    read_timeout: float = 60.0


def _provider_snapshot(provider: Provider) -> dict[str, Any]:
    # The API key itself never enters the audit log; only whether one is set.
    return {
        "name": provider.name,
        "protocol": provider.protocol,
        "base_url": provider.base_url,
        "has_api_key": bool(provider.api_key),
        "connect_timeout": provider.connect_timeout,
        "read_timeout": provider.read_timeout,
    }


def _provider_validate(data: ProviderInput, *, exclude_pk: int | None, api_key: str | None = None) -> dict[str, Any]:
    errors: Errors = {}
    if api_key and has_control_characters(api_key.strip()):
        # It is sent in the Authorization header of every upstream call.
        errors.setdefault("api_key", []).append(SECRET_CONTROL_CHARACTERS_MESSAGE)
    taken = Provider.objects.exclude(pk=exclude_pk) if exclude_pk else Provider.objects.all()
    name = name_checked(errors, data.name, label="Provider", max_length=64, taken=taken)
    if "/" in name:
        # Circuits are keyed "provider/model"; a slash would make the key ambiguous.
        errors.setdefault("name", []).append("Provider name cannot contain “/” (circuits are named provider/model).")
    if data.protocol not in Protocol.values:
        errors.setdefault("protocol", []).append(f"Protocol must be one of: {', '.join(Protocol.values)}.")
    base_url = (data.base_url or "").strip()
    if not base_url:
        errors.setdefault("base_url", []).append("Base URL is required.")
    elif len(base_url) > 500:
        errors.setdefault("base_url", []).append("Base URL is at most 500 characters.")
    elif problem := base_url_problem(base_url):
        errors.setdefault("base_url", []).append(problem)
    for field_name in ("connect_timeout", "read_timeout"):
        value = getattr(data, field_name)
        if not math.isfinite(value) or value < 0.1:
            errors.setdefault(field_name, []).append("Timeout must be at least 0.1 seconds.")
    raise_if_errors(errors)
    return {
        "name": name,
        "protocol": data.protocol,
        "base_url": base_url,
        "connect_timeout": data.connect_timeout,
        "read_timeout": data.read_timeout,
    }


def provider_validate(*, data: ProviderInput, provider: Provider | None = None) -> None:
    """Raise ValidationFailed as provider_create (or provider_update of `provider`) would; writes nothing."""
    _provider_validate(data, exclude_pk=provider.pk if provider else None)


@transaction.atomic
def provider_create(*, actor: Any, data: ProviderInput, api_key: str = "") -> Provider:
    """Create a provider; its API key is stored encrypted and never returned."""
    fields = _provider_validate(data, exclude_pk=None, api_key=api_key)
    provider = Provider(**fields, api_key=(api_key or "").strip())
    _save(provider, label="Provider")
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
def provider_update(*, actor: Any, provider: Provider, data: ProviderInput, api_key: str | None = None) -> Provider:
    """Replace a provider's fields; `api_key=None` keeps the stored key, "" clears it."""
    fields = _provider_validate(data, exclude_pk=provider.pk, api_key=api_key)
    before = _provider_snapshot(provider)
    key_replaced = api_key is not None and bool(provider.api_key) and bool(api_key.strip())
    for name, value in fields.items():
        setattr(provider, name, value)
    if api_key is not None:
        provider.api_key = api_key.strip()
    _save(provider, label="Provider")
    after = _provider_snapshot(provider)
    if key_replaced:
        before["api_key"], after["api_key"] = "(previous key)", "(replaced)"
    _audit_update(actor=actor, object_type="provider", obj=provider, before=before, after=after)
    transaction.on_commit(config_publish)
    return provider


@transaction.atomic
def provider_delete(*, actor: Any, provider: Provider) -> None:
    """Delete a provider that no chain or model uses (ConflictError names them otherwise)."""
    refs: dict[str, list[str]] = {}
    if chains := chains_referencing_provider(provider=provider):
        refs["chains"] = chains
    if model_names := models_of_provider(provider=provider):
        refs["models"] = model_names
    refuse_if_referenced(f"Provider “{provider.name}”", refs)
    snapshot, pk = _provider_snapshot(provider), provider.pk
    _delete(provider, what=f"Provider “{provider.name}”")
    audit_record(
        actor=actor,
        action="provider.delete",
        object_type="provider",
        object_id=pk,
        object_repr=snapshot["name"],
        before=snapshot,
    )
    transaction.on_commit(config_publish)


# --- models -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LlmModelInput:
    name: str
    provider: str
    capabilities: list[str] = field(default_factory=list)
    input_price_per_mtok: Decimal = Decimal(0)
    output_price_per_mtok: Decimal = Decimal(0)
    context_window: int = 8192


def _llm_model_snapshot(model: LlmModel) -> dict[str, Any]:
    return {
        "name": model.name,
        "provider": model.provider.name,
        "capabilities": list(model.capabilities),
        "input_price_per_mtok": str(model.input_price_per_mtok),
        "output_price_per_mtok": str(model.output_price_per_mtok),
        "context_window": model.context_window,
    }


def _llm_model_validate(data: LlmModelInput, *, exclude_pk: int | None) -> dict[str, Any]:
    errors: Errors = {}
    taken = LlmModel.objects.exclude(pk=exclude_pk) if exclude_pk else LlmModel.objects.all()
    name = name_checked(errors, data.name, label="Model", max_length=128, taken=taken)
    if name and Alias.objects.filter(name=name).exists():
        # Clients could not tell the alias from the model.
        errors.setdefault("name", []).append(f"“{name}” is already an alias; choose another name.")
    provider_name = (data.provider or "").strip()
    provider = Provider.objects.filter(name=provider_name).first() if provider_name else None
    if not provider_name:
        errors.setdefault("provider", []).append("Provider is required.")
    elif provider is None:
        errors.setdefault("provider", []).append(f"Unknown provider “{provider_name}”.")
    unknown = [c for c in data.capabilities if c not in Capability.values]
    if unknown:
        errors.setdefault("capabilities", []).append(
            f"Unknown capabilities {', '.join(unknown)}; allowed: {', '.join(Capability.values)}."
        )
    for field_name in ("input_price_per_mtok", "output_price_per_mtok"):
        price = Decimal(getattr(data, field_name))
        if not price.is_finite() or price < 0:
            errors.setdefault(field_name, []).append("Price cannot be negative.")
        elif price > PRICE_MAX:
            errors.setdefault(field_name, []).append(f"Price is at most {PRICE_MAX}.")
    if not 1 <= data.context_window <= INT_MAX:
        errors.setdefault("context_window", []).append(f"Context window must be between 1 and {INT_MAX} tokens.")
    raise_if_errors(errors)
    # Stored once each, in the enum's order, so equal sets compare equal.
    capabilities = [c for c in Capability.values if c in data.capabilities]
    return {
        "name": name,
        "provider": provider,
        "capabilities": capabilities,
        "input_price_per_mtok": data.input_price_per_mtok,
        "output_price_per_mtok": data.output_price_per_mtok,
        "context_window": data.context_window,
    }


def llm_model_validate(*, data: LlmModelInput, model: LlmModel | None = None) -> None:
    """Raise ValidationFailed as llm_model_create (or llm_model_update of `model`) would; writes nothing."""
    _llm_model_validate(data, exclude_pk=model.pk if model else None)


@transaction.atomic
def llm_model_create(*, actor: Any, data: LlmModelInput) -> LlmModel:
    """Add a model to the catalog."""
    model = LlmModel(**_llm_model_validate(data, exclude_pk=None))
    _save(model, label="Model")
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
def llm_model_update(*, actor: Any, model: LlmModel, data: LlmModelInput) -> LlmModel:
    """Replace a model's fields."""
    fields = _llm_model_validate(data, exclude_pk=model.pk)
    before = _llm_model_snapshot(model)
    for name, value in fields.items():
        setattr(model, name, value)
    _save(model, label="Model")
    _audit_update(actor=actor, object_type="model", obj=model, before=before, after=_llm_model_snapshot(model))
    transaction.on_commit(config_publish)
    return model


@transaction.atomic
def llm_model_delete(*, actor: Any, model: LlmModel) -> None:
    """Delete a model no chain, routing rule, guardrail or alias uses (ConflictError names them otherwise)."""
    refs: dict[str, list[str]] = {}
    if chains := chains_referencing_model(model=model):
        refs["chains"] = chains
    if rules := routing_rules_referencing_model(model=model):
        refs["routing_rules"] = rules
    if guardrails := guardrails_referencing_model(model=model):
        refs["guardrails"] = guardrails
    if aliases := aliases_referencing_model(model=model):
        refs["aliases"] = aliases
    refuse_if_referenced(f"Model “{model.name}”", refs)
    snapshot, pk = _llm_model_snapshot(model), model.pk
    _delete(model, what=f"Model “{model.name}”")
    audit_record(
        actor=actor,
        action="model.delete",
        object_type="model",
        object_id=pk,
        object_repr=snapshot["name"],
        before=snapshot,
    )
    transaction.on_commit(config_publish)


# --- teams, applications, agents --------------------------------------------------------------


def _scoped_target_delete(
    *,
    actor: Any,
    obj: Team | Application | Agent,
    scope_type: str,
    object_type: str,
    label: str,
    snapshot: dict[str, Any],
) -> None:
    what = f"{label} “{obj.name}”"
    refuse_if_referenced(what, scope_references(scope_type=scope_type, scope_id=obj.pk))
    pk = obj.pk
    _delete(obj, what=what)
    audit_record(
        actor=actor,
        action=f"{object_type}.delete",
        object_type=object_type,
        object_id=pk,
        object_repr=snapshot["name"],
        before=snapshot,
    )
    transaction.on_commit(config_publish)


@dataclass(frozen=True)
class TeamInput:
    name: str


def _team_snapshot(team: Team) -> dict[str, Any]:
    return {"name": team.name}


def _team_validate(data: TeamInput, *, exclude_pk: int | None) -> str:
    errors: Errors = {}
    taken = Team.objects.exclude(pk=exclude_pk) if exclude_pk else Team.objects.all()
    name = name_checked(errors, data.name, label="Team", max_length=128, taken=taken)
    raise_if_errors(errors)
    return name


def team_validate(*, data: TeamInput, team: Team | None = None) -> None:
    """Raise ValidationFailed as team_create (or team_update of `team`) would; writes nothing."""
    _team_validate(data, exclude_pk=team.pk if team else None)


@transaction.atomic
def team_create(*, actor: Any, data: TeamInput) -> Team:
    team = Team(name=_team_validate(data, exclude_pk=None))
    _save(team, label="Team")
    audit_record(
        actor=actor,
        action="team.create",
        object_type="team",
        object_id=team.pk,
        object_repr=str(team),
        after=_team_snapshot(team),
    )
    transaction.on_commit(config_publish)
    return team


@transaction.atomic
def team_update(*, actor: Any, team: Team, data: TeamInput) -> Team:
    name = _team_validate(data, exclude_pk=team.pk)
    before = _team_snapshot(team)
    team.name = name
    _save(team, label="Team")
    _audit_update(actor=actor, object_type="team", obj=team, before=before, after=_team_snapshot(team))
    transaction.on_commit(config_publish)
    return team


@transaction.atomic
def team_delete(*, actor: Any, team: Team) -> None:
    """Delete a team no chain, routing rule or guardrail is scoped to; its applications and keys lose the team."""
    _scoped_target_delete(
        actor=actor,
        obj=team,
        scope_type=ScopeType.TEAM,
        object_type="team",
        label="Team",
        snapshot=_team_snapshot(team),
    )


@dataclass(frozen=True)
class ApplicationInput:
    name: str
    team: str | None = None


def _application_snapshot(application: Application) -> dict[str, Any]:
    return {"name": application.name, "team": application.team.name if application.team else None}


def _application_validate(data: ApplicationInput, *, exclude_pk: int | None) -> dict[str, Any]:
    errors: Errors = {}
    taken = Application.objects.exclude(pk=exclude_pk) if exclude_pk else Application.objects.all()
    name = name_checked(errors, data.name, label="Application", max_length=128, taken=taken)
    team = _named(errors, "team", data.team, label="team", lookup=lambda n: Team.objects.filter(name=n).first())
    raise_if_errors(errors)
    return {"name": name, "team": team}


def application_validate(*, data: ApplicationInput, application: Application | None = None) -> None:
    """Raise ValidationFailed as application_create (or application_update of `application`) would; writes nothing."""
    _application_validate(data, exclude_pk=application.pk if application else None)


@transaction.atomic
def application_create(*, actor: Any, data: ApplicationInput) -> Application:
    application = Application(**_application_validate(data, exclude_pk=None))
    _save(application, label="Application")
    audit_record(
        actor=actor,
        action="application.create",
        object_type="application",
        object_id=application.pk,
        object_repr=str(application),
        after=_application_snapshot(application),
    )
    transaction.on_commit(config_publish)
    return application


@transaction.atomic
def application_update(*, actor: Any, application: Application, data: ApplicationInput) -> Application:
    fields = _application_validate(data, exclude_pk=application.pk)
    before = _application_snapshot(application)
    for name, value in fields.items():
        setattr(application, name, value)
    _save(application, label="Application")
    _audit_update(
        actor=actor,
        object_type="application",
        obj=application,
        before=before,
        after=_application_snapshot(application),
    )
    transaction.on_commit(config_publish)
    return application


@transaction.atomic
def application_delete(*, actor: Any, application: Application) -> None:
    """Delete an application no chain, routing rule or guardrail is scoped to."""
    _scoped_target_delete(
        actor=actor,
        obj=application,
        scope_type=ScopeType.APPLICATION,
        object_type="application",
        label="Application",
        snapshot=_application_snapshot(application),
    )


@dataclass(frozen=True)
class AgentInput:
    name: str
    application: str | None = None


def _agent_snapshot(agent: Agent) -> dict[str, Any]:
    return {"name": agent.name, "application": agent.application.name if agent.application else None}


def _agent_validate(data: AgentInput, *, exclude_pk: int | None) -> dict[str, Any]:
    errors: Errors = {}
    taken = Agent.objects.exclude(pk=exclude_pk) if exclude_pk else Agent.objects.all()
    name = name_checked(errors, data.name, label="Agent", max_length=128, taken=taken)
    application = _named(
        errors,
        "application",
        data.application,
        label="application",
        lookup=lambda n: Application.objects.filter(name=n).first(),
    )
    raise_if_errors(errors)
    return {"name": name, "application": application}


def agent_validate(*, data: AgentInput, agent: Agent | None = None) -> None:
    """Raise ValidationFailed as agent_create (or agent_update of `agent`) would; writes nothing."""
    _agent_validate(data, exclude_pk=agent.pk if agent else None)


@transaction.atomic
def agent_create(*, actor: Any, data: AgentInput) -> Agent:
    agent = Agent(**_agent_validate(data, exclude_pk=None))
    _save(agent, label="Agent")
    audit_record(
        actor=actor,
        action="agent.create",
        object_type="agent",
        object_id=agent.pk,
        object_repr=str(agent),
        after=_agent_snapshot(agent),
    )
    transaction.on_commit(config_publish)
    return agent


@transaction.atomic
def agent_update(*, actor: Any, agent: Agent, data: AgentInput) -> Agent:
    fields = _agent_validate(data, exclude_pk=agent.pk)
    before = _agent_snapshot(agent)
    for name, value in fields.items():
        setattr(agent, name, value)
    _save(agent, label="Agent")
    _audit_update(actor=actor, object_type="agent", obj=agent, before=before, after=_agent_snapshot(agent))
    transaction.on_commit(config_publish)
    return agent


@transaction.atomic
def agent_delete(*, actor: Any, agent: Agent) -> None:
    """Delete an agent no chain, routing rule or guardrail is scoped to."""
    _scoped_target_delete(
        actor=actor,
        obj=agent,
        scope_type=ScopeType.AGENT,
        object_type="agent",
        label="Agent",
        snapshot=_agent_snapshot(agent),
    )


# --- users ------------------------------------------------------------------------------------


@transaction.atomic
def user_delete(*, actor: Any, user: Any) -> None:
    """Delete a user no chain, routing rule or guardrail is scoped to and who owns no gateway key.

    Keys are revoked, never deleted (request logs name them), and deleting a user would delete theirs:
    such a user is deactivated instead.
    """
    what = f"User “{user.get_username()}”"
    refuse_if_referenced(what, scope_references(scope_type=ScopeType.USER, scope_id=user.pk))
    if keys := api_keys_of_user(user=user):
        raise ConflictError(
            f"{what} owns gateway keys {', '.join(f'“{k}”' for k in keys)}. Keys are revoked, never deleted: "
            "deactivate the user instead.",
            errors={"api_keys": keys},
        )
    snapshot = {
        "username": user.get_username(),
        "email": user.email,
        "is_active": user.is_active,
        "is_staff": user.is_staff,
        "is_superuser": user.is_superuser,
        "groups": sorted(user.groups.values_list("name", flat=True)),
    }
    pk = user.pk
    _delete(user, what=what)
    audit_record(
        actor=actor,
        action="user.delete",
        object_type="user",
        object_id=pk,
        object_repr=snapshot["username"],
        before=snapshot,
    )


@transaction.atomic
def user_set_active(*, actor: Any, user: Any, active: bool) -> int:
    """Activate or deactivate a user, audited; returns how many of their gateway keys this stops (or restores).

    The gateway refuses the keys of an inactive user (the config reload follows the commit); the keys are not
    revoked, so reactivating the user makes them work again. Setting the state the user already has changes,
    audits and publishes nothing, and returns 0.
    """
    updated = type(user)._default_manager.filter(pk=user.pk, is_active=not active).update(is_active=active)
    user.is_active = active
    if not updated:
        return 0
    audit_record(
        actor=actor,
        action="user.update",
        object_type="user",
        object_id=user.pk,
        object_repr=user.get_username(),
        before={"is_active": not active},
        after={"is_active": active},
    )
    transaction.on_commit(config_publish)
    return api_keys_usable_count(users=[user])


# --- gateway API keys -------------------------------------------------------------------------


@dataclass(frozen=True)
class CreatedKey:
    key: ApiKey
    secret: str  # shown once, never stored


@dataclass(frozen=True)
class ApiKeyInput:
    """A key's editable fields; team, application and agent by name (None or blank: none)."""

    name: str
    team: str | None = None
    application: str | None = None
    agent: str | None = None


def _api_key_snapshot(key: ApiKey) -> dict[str, Any]:
    return {
        "name": key.name,
        "prefix": key.prefix,
        "user": key.user.get_username(),
        "team": key.team.name if key.team else None,
        "application": key.application.name if key.application else None,
        "agent": key.agent.name if key.agent else None,
    }


def _api_key_name_checked(errors: Errors, value: str | None) -> str:
    name = (value or "").strip()
    if not name:
        errors.setdefault("name", []).append("Key name is required and cannot be only whitespace.")
    elif has_control_characters(name):
        errors.setdefault("name", []).append(CONTROL_CHARACTERS_MESSAGE)
    elif len(name) > 128:
        errors.setdefault("name", []).append("Key name is at most 128 characters.")
    return name


def _api_key_owner_checked(errors: Errors, user: Any) -> None:
    if user is None:
        errors.setdefault("user", []).append("A key needs an owner.")
    elif not user.is_active:
        # The gateway refuses an inactive user's keys; a key issued now would look valid and never work.
        errors.setdefault("user", []).append(
            f"User “{user.get_username()}” is deactivated: their keys do not work. Reactivate the user first."
        )


def api_key_validate(*, name: str, user: Any) -> None:
    """Raise ValidationFailed as api_key_create would for this name and owner; writes nothing."""
    errors: Errors = {}
    _api_key_name_checked(errors, name)
    _api_key_owner_checked(errors, user)
    raise_if_errors(errors)


def _api_key_fields(errors: Errors, data: ApiKeyInput) -> dict[str, Any]:
    name = _api_key_name_checked(errors, data.name)
    team = _named(errors, "team", data.team, label="team", lookup=lambda n: Team.objects.filter(name=n).first())
    application = _named(
        errors,
        "application",
        data.application,
        label="application",
        lookup=lambda n: Application.objects.filter(name=n).first(),
    )
    agent = _named(errors, "agent", data.agent, label="agent", lookup=lambda n: Agent.objects.filter(name=n).first())
    return {"name": name, "team": team, "application": application, "agent": agent}


@transaction.atomic
def api_key_create(
    *,
    actor: Any,
    name: str,
    user: Any,
    team: Team | None = None,
    application: Application | None = None,
    agent: Agent | None = None,
) -> CreatedKey:
    """Issue a gateway key to an active user; only its hash is stored, the secret is returned once."""
    errors: Errors = {}
    name = _api_key_name_checked(errors, name)
    _api_key_owner_checked(errors, user)
    raise_if_errors(errors)
    secret, prefix, hashed = key_generate()
    key = ApiKey.objects.create(
        name=name, prefix=prefix, hashed_secret=hashed, user=user, team=team, application=application, agent=agent
    )
    audit_record(
        actor=actor,
        action="api_key.create",
        object_type="api_key",
        object_id=key.pk,
        object_repr=str(key),
        after=_api_key_snapshot(key),
    )
    transaction.on_commit(config_publish)
    return CreatedKey(key=key, secret=secret)


@transaction.atomic
def api_key_issue(*, actor: Any, data: ApiKeyInput, username: str | None = None) -> CreatedKey:
    """Issue a key for the user named `username` (default: the actor), resolving team/application/agent by name."""
    errors: Errors = {}
    user = actor
    wanted = (username or "").strip()
    if wanted:
        user = user_by_username(username=wanted)
        if user is None:
            errors["user"] = [f"Unknown user “{wanted}”."]
    if user is not None:
        _api_key_owner_checked(errors, user)
    fields = _api_key_fields(errors, data)
    raise_if_errors(errors)
    return api_key_create(actor=actor, user=user, **fields)


@transaction.atomic
def api_key_update(*, actor: Any, key: ApiKey, data: ApiKeyInput) -> ApiKey:
    """Rename a key or change the team, application and agent it names; its owner and secret never change."""
    errors: Errors = {}
    fields = _api_key_fields(errors, data)
    raise_if_errors(errors)
    before = _api_key_snapshot(key)
    for name, value in fields.items():
        setattr(key, name, value)
    key.save(update_fields=list(fields))
    _audit_update(actor=actor, object_type="api_key", obj=key, before=before, after=_api_key_snapshot(key))
    transaction.on_commit(config_publish)
    return key


@transaction.atomic
def api_key_revoke(*, actor: Any, key: ApiKey) -> ApiKey:
    """Revoke a key at once (idempotent)."""
    updated = ApiKey.objects.filter(pk=key.pk, revoked_at=None).update(revoked_at=timezone.now())
    key.refresh_from_db()
    if updated:
        audit_record(
            actor=actor,
            action="api_key.revoke",
            object_type="api_key",
            object_id=key.pk,
            object_repr=str(key),
            before={"revoked_at": None},
            after={"revoked_at": key.revoked_at},
        )
        transaction.on_commit(config_publish)
    return key


# --- console API tokens (REST API scripts) -----------------------------------------------------

_CONSOLE_TOKEN_PREFIX = "cpt-"


def _console_token_snapshot(token: ConsoleToken) -> dict[str, Any]:
    # Never the secret nor its hash.
    return {"name": token.name, "prefix": token.prefix, "user": token.user.get_username()}


@transaction.atomic
def console_token_create(*, actor: Any, user: Any, name: str) -> tuple[ConsoleToken, str]:
    """Issue a REST API token for `user`; only its SHA-256 is stored, the secret is returned once."""
    errors: Errors = {}
    name = (name or "").strip()
    if not name:
        errors["name"] = ["Token name is required and cannot be only whitespace."]
    elif has_control_characters(name):
        errors["name"] = [CONTROL_CHARACTERS_MESSAGE]
    elif len(name) > 128:
        errors["name"] = ["Token name is at most 128 characters."]
    raise_if_errors(errors)
    # Same shape as the gateway keys (catalog.keys), with its own prefix so the two are never confused.
    ident = secrets.token_hex(4)
    secret = f"{_CONSOLE_TOKEN_PREFIX}{ident}-{secrets.token_urlsafe(32)}"
    token = ConsoleToken.objects.create(
        user=user, name=name, prefix=f"{_CONSOLE_TOKEN_PREFIX}{ident}", hashed_secret=key_hash(secret)
    )
    audit_record(
        actor=actor,
        action="console_token.create",
        object_type="console_token",
        object_id=token.pk,
        object_repr=str(token),
        after=_console_token_snapshot(token),
    )
    return token, secret


@transaction.atomic
def console_token_revoke(*, actor: Any, token: ConsoleToken) -> ConsoleToken:
    """Revoke a REST API token at once (idempotent: revoking it again changes and audits nothing)."""
    updated = ConsoleToken.objects.filter(pk=token.pk, revoked_at=None).update(revoked_at=timezone.now())
    token.refresh_from_db()
    if updated:
        audit_record(
            actor=actor,
            action="console_token.revoke",
            object_type="console_token",
            object_id=token.pk,
            object_repr=str(token),
            before={"revoked_at": None},
            after={"revoked_at": token.revoked_at},
        )
    return token
