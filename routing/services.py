"""Writes of routing rules, aliases and guardrails.

Each service is one transaction and writes its audit event inside it."""

from dataclasses import dataclass
from typing import Any

from django.db import models, transaction

from audit.services import audit_changes, audit_record
from catalog.enums import ScopeType
from catalog.models import LlmModel
from catalog.references import model_name_lock
from catalog.scopes import Scope, scope_validate
from catalog.services import lock_all_named, lock_named, name_checked, named
from core import db
from core.configbus import config_publish
from core.db import save_unique
from core.errors import ConflictError, ValidationFailed
from core.types import Actor
from core.validation import FieldErrors, clean_name
from routing.models import Alias, Guardrail, GuardrailAction, RoutingRule

RULE_NAME_MAX = 200
ALIAS_NAME_MAX = 128
GUARDRAIL_NAME_MAX = 200
GUARDRAIL_MESSAGE_MAX = 300


def _stored[M: models.Model](row: M, *, what: str, related: tuple[str, ...]) -> M:
    """The row as stored, locked for the rest of the transaction (the caller's instance may be stale).

    A row deleted since the caller read it is a 409: saving the caller's instance would insert it again
    (Django's save() inserts when its UPDATE finds no row) and audit an update of a row nobody can see."""
    # of=self: PostgreSQL cannot lock the nullable side of the outer joins select_related makes.
    rows = type(row)._default_manager.select_for_update(of=("self",)).select_related(*related)
    stored = rows.filter(pk=row.pk).first()
    if stored is None:
        raise ConflictError(f"This {what} no longer exists; it was deleted by someone else.")
    return stored


@dataclass(frozen=True)
class RoutingRuleInput:
    name: str
    source_model: str
    target_model: str
    scope_type: str = ScopeType.GLOBAL
    scope_id: int | None = None
    enabled: bool = True


def _routing_rule_snapshot(rule: RoutingRule) -> dict[str, Any]:
    return {
        "name": rule.name,
        "source_model": rule.source_model.name,
        "target_model": rule.target_model.name,
        "scope": {"type": rule.scope_type, "id": rule.scope_id},
        "enabled": rule.enabled,
    }


def _model_named(errors: FieldErrors, field_name: str, value: str | None, *, label: str) -> LlmModel | None:
    name = (value or "").strip()
    if not name:
        errors.add(field_name, f"{label} is required and cannot be only whitespace.")
        return None
    model = lock_named(LlmModel, name)
    if model is None:
        errors.add(field_name, f"Unknown model “{name}”.")
    return model


def _routing_rule_validate(data: RoutingRuleInput, *, exclude_pk: int | None) -> dict[str, Any]:
    """Check every rule and collect all field errors before raising."""
    errors = FieldErrors()
    name = clean_name(errors, data.name, max_length=RULE_NAME_MAX, label="Rule name")
    # The models are locked as they are resolved (a delete waits, or this finds the model gone); both first, in
    # primary key order.
    lock_all_named(LlmModel, data.source_model, data.target_model)
    source = _model_named(errors, "source_model", data.source_model, label="Source model")
    target = _model_named(errors, "target_model", data.target_model, label="Target model")
    if source is not None and target is not None and source.pk == target.pk:
        errors.add("target_model", "Target model must differ from the source model.")
    scope: Scope | None = None
    try:
        scope = scope_validate(scope_type=data.scope_type, scope_id=data.scope_id)
    except ValidationFailed as exc:
        errors.extend(exc.errors)
    if source is not None and scope is not None:
        clash = RoutingRule.objects.filter(source_model=source, scope_type=scope.type, scope_id=scope.id)
        if exclude_pk is not None:
            clash = clash.exclude(pk=exclude_pk)
        other = clash.values_list("name", flat=True).first()
        if other is not None:
            errors.add("source_model", f"Rule “{other}” already rewrites {source.name} in this scope; edit it instead.")
    errors.raise_if_any()
    assert scope is not None
    return {
        "name": name,
        "source_model": source,
        "target_model": target,
        "scope_type": scope.type,
        "scope_id": scope.id,
        "enabled": bool(data.enabled),
    }


def routing_rule_validate(*, data: RoutingRuleInput, rule: RoutingRule | None = None) -> None:
    """Raise ValidationFailed as routing_rule_create (or routing_rule_update of `rule`) would; writes nothing."""
    _routing_rule_validate(data, exclude_pk=rule.pk if rule else None)


# Two concurrent writes passed validation; the database constraint caught the second.
_RULE_TAKEN = "Another rule already rewrites this source model in this scope."


@transaction.atomic
def routing_rule_create(*, actor: Actor, data: RoutingRuleInput) -> RoutingRule:
    """Create a routing rule (at most one per source model and scope)."""
    rule = RoutingRule(**_routing_rule_validate(data, exclude_pk=None))
    save_unique(rule, field="source_model", message=_RULE_TAKEN)
    audit_record(
        actor=actor,
        action="routing_rule.create",
        object_type="routing_rule",
        object_id=rule.pk,
        object_repr=rule.name,
        after=_routing_rule_snapshot(rule),
    )
    transaction.on_commit(config_publish)
    return rule


@transaction.atomic
def routing_rule_update(*, actor: Actor, rule: RoutingRule, data: RoutingRuleInput) -> RoutingRule:
    """Replace a routing rule's fields; audit the changed ones. A rule deleted meanwhile is a ConflictError."""
    rule = _stored(rule, what="routing rule", related=("source_model", "target_model"))
    fields = _routing_rule_validate(data, exclude_pk=rule.pk)
    before = _routing_rule_snapshot(rule)
    for name, value in fields.items():
        setattr(rule, name, value)
    save_unique(rule, field="source_model", message=_RULE_TAKEN)
    audit_changes(
        actor=actor,
        action="routing_rule.update",
        object_type="routing_rule",
        object_id=rule.pk,
        object_repr=rule.name,
        before=before,
        after=_routing_rule_snapshot(rule),
    )
    transaction.on_commit(config_publish)
    return rule


@transaction.atomic
def routing_rule_delete(*, actor: Actor, rule: RoutingRule) -> None:
    """Delete a routing rule; the audit event keeps a full snapshot. A rule deleted meanwhile is a ConflictError."""
    rule = _stored(rule, what="routing rule", related=("source_model", "target_model"))
    snapshot, pk = _routing_rule_snapshot(rule), rule.pk
    rule.delete()
    audit_record(
        actor=actor,
        action="routing_rule.delete",
        object_type="routing_rule",
        object_id=pk,
        object_repr=snapshot["name"],
        before=snapshot,
    )
    transaction.on_commit(config_publish)


@dataclass(frozen=True)
class AliasInput:
    name: str
    model: str


def _alias_snapshot(alias: Alias) -> dict[str, Any]:
    return {"name": alias.name, "model": alias.model.name}


def _alias_validate(data: AliasInput, *, exclude_pk: int | None) -> dict[str, Any]:
    errors = FieldErrors()
    taken = Alias.objects.exclude(pk=exclude_pk) if exclude_pk else Alias.objects.all()
    name = name_checked(errors, data.name, label="Alias", max_length=ALIAS_NAME_MAX, taken=taken)
    if name and LlmModel.objects.filter(name=name).exists():
        # An alias may not shadow a real model: clients could not tell which one they get.
        errors.add("name", f"“{name}” is the name of a model; an alias cannot shadow it.")
    model = _model_named(errors, "model", data.model, label="Model")
    errors.raise_if_any()
    return {"name": name, "model": model}


def alias_validate(*, data: AliasInput, alias: Alias | None = None) -> None:
    """Raise ValidationFailed as alias_create (or alias_update of `alias`) would; writes nothing."""
    _alias_validate(data, exclude_pk=alias.pk if alias else None)


_ALIAS_TAKEN = "Another alias with this name was saved at the same time; choose another name."


@transaction.atomic
def alias_create(*, actor: Actor, data: AliasInput) -> Alias:
    """Create an alias naming a catalog model; its name must not be a model's name."""
    model_name_lock(name=data.name)
    alias = Alias(**_alias_validate(data, exclude_pk=None))
    save_unique(alias, field="name", message=_ALIAS_TAKEN)
    audit_record(
        actor=actor,
        action="alias.create",
        object_type="alias",
        object_id=alias.pk,
        object_repr=alias.name,
        after=_alias_snapshot(alias),
    )
    transaction.on_commit(config_publish)
    return alias


@transaction.atomic
def alias_update(*, actor: Actor, alias: Alias, data: AliasInput) -> Alias:
    """Rename an alias or point it at another model. An alias deleted meanwhile is a ConflictError."""
    model_name_lock(name=data.name)  # before any row lock
    alias = _stored(alias, what="alias", related=("model",))
    fields = _alias_validate(data, exclude_pk=alias.pk)
    before = _alias_snapshot(alias)
    for name, value in fields.items():
        setattr(alias, name, value)
    save_unique(alias, field="name", message=_ALIAS_TAKEN)
    audit_changes(
        actor=actor,
        action="alias.update",
        object_type="alias",
        object_id=alias.pk,
        object_repr=alias.name,
        before=before,
        after=_alias_snapshot(alias),
    )
    transaction.on_commit(config_publish)
    return alias


@transaction.atomic
def alias_delete(*, actor: Actor, alias: Alias) -> None:
    """Delete an alias. An alias deleted meanwhile is a ConflictError."""
    alias = _stored(alias, what="alias", related=("model",))
    snapshot, pk = _alias_snapshot(alias), alias.pk
    alias.delete()
    audit_record(
        actor=actor,
        action="alias.delete",
        object_type="alias",
        object_id=pk,
        object_repr=snapshot["name"],
        before=snapshot,
    )
    transaction.on_commit(config_publish)


@dataclass(frozen=True)
class GuardrailInput:
    name: str
    action: str
    model: str | None = None  # None or blank: the guardrail matches every model
    target_model: str | None = None
    message: str = ""
    scope_type: str = ScopeType.GLOBAL
    scope_id: int | None = None
    enabled: bool = True


def _guardrail_snapshot(guardrail: Guardrail) -> dict[str, Any]:
    return {
        "name": guardrail.name,
        "model": guardrail.model.name if guardrail.model is not None else None,
        "action": guardrail.action,
        "target_model": guardrail.target_model.name if guardrail.target_model is not None else None,
        "message": guardrail.message,
        "scope": {"type": guardrail.scope_type, "id": guardrail.scope_id},
        "enabled": guardrail.enabled,
    }


def _model_or_none(name: str) -> LlmModel | None:
    return lock_named(LlmModel, name)


def _guardrail_validate(data: GuardrailInput, *, exclude_pk: int | None, writing: bool = False) -> dict[str, Any]:
    """Check every rule and collect all field errors before raising. `writing`: the caller saves what this
    returns, so the (model, scope) pair is locked before it is checked."""
    errors = FieldErrors()
    name = clean_name(errors, data.name, max_length=GUARDRAIL_NAME_MAX, label="Guardrail name")
    if data.action not in GuardrailAction.values:
        errors.add("action", f"Action must be one of: {', '.join(GuardrailAction.values)}.")
    lock_all_named(LlmModel, data.model, data.target_model)  # both first, in primary key order
    model = named(errors, "model", data.model, label="model", lookup=_model_or_none)
    target = named(errors, "target_model", data.target_model, label="model", lookup=_model_or_none)
    message = (data.message or "").strip()
    if len(message) > GUARDRAIL_MESSAGE_MAX:
        errors.add("message", f"Message is at most {GUARDRAIL_MESSAGE_MAX} characters.")
    if data.action == GuardrailAction.REWRITE:
        if not (data.target_model or "").strip():
            errors.add("target_model", "A rewrite guardrail needs the model to call instead.")
        elif model is not None and target is not None and model.pk == target.pk:
            errors.add("target_model", "Target model must differ from the model it rewrites.")
    if data.action == GuardrailAction.DENY and not message:
        errors.add("message", "Say why the request is refused; the client sees this message.")
    scope: Scope | None = None
    try:
        scope = scope_validate(scope_type=data.scope_type, scope_id=data.scope_id)
    except ValidationFailed as exc:
        errors.extend(exc.errors)
    if scope is not None and not errors.has("model"):
        # One guardrail per (model or every model, scope), as one rule and one chain: the gateway could only
        # apply one of two (the oldest), and the other would be a write that silently changes nothing. No
        # constraint can say it (a catch-all's model is null), so two writes of one pair take one lock first:
        # the later waits and sees the earlier. It is the write's last lock before its audit event.
        if writing:
            pair = f"guardrail:{scope.type}:{scope.id}:{model.pk if model is not None else '*'}"
            db.advisory_lock(pair, space=db.LAST_BEFORE_AUDIT)
        clash = Guardrail.objects.filter(model=model, scope_type=scope.type, scope_id=scope.id)
        if exclude_pk is not None:
            clash = clash.exclude(pk=exclude_pk)
        other = clash.order_by("pk").values_list("name", flat=True).first()
        if other is not None:
            what = model.name if model is not None else "every model"
            errors.add("model", f"Guardrail “{other}” already covers {what} in this scope; edit it instead.")
    errors.raise_if_any()
    assert scope is not None
    return {
        "name": name,
        "model": model,
        "action": data.action,
        "target_model": target,
        "message": message,
        "scope_type": scope.type,
        "scope_id": scope.id,
        "enabled": bool(data.enabled),
    }


def guardrail_validate(*, data: GuardrailInput, guardrail: Guardrail | None = None) -> None:
    """Raise ValidationFailed as guardrail_create (or guardrail_update of `guardrail`) would; writes nothing."""
    _guardrail_validate(data, exclude_pk=guardrail.pk if guardrail else None)


@transaction.atomic
def guardrail_create(*, actor: Actor, data: GuardrailInput) -> Guardrail:
    """Create a guardrail: deny needs a message, rewrite a target model other than the matched one; at most one
    guardrail per (model or every model, scope)."""
    guardrail = Guardrail(**_guardrail_validate(data, exclude_pk=None, writing=True))
    guardrail.save()
    audit_record(
        actor=actor,
        action="guardrail.create",
        object_type="guardrail",
        object_id=guardrail.pk,
        object_repr=guardrail.name,
        after=_guardrail_snapshot(guardrail),
    )
    transaction.on_commit(config_publish)
    return guardrail


@transaction.atomic
def guardrail_update(*, actor: Actor, guardrail: Guardrail, data: GuardrailInput) -> Guardrail:
    """Replace a guardrail's fields; audit the changed ones. A guardrail deleted meanwhile is a ConflictError."""
    guardrail = _stored(guardrail, what="guardrail", related=("model", "target_model"))
    fields = _guardrail_validate(data, exclude_pk=guardrail.pk, writing=True)
    before = _guardrail_snapshot(guardrail)
    for name, value in fields.items():
        setattr(guardrail, name, value)
    guardrail.save()
    audit_changes(
        actor=actor,
        action="guardrail.update",
        object_type="guardrail",
        object_id=guardrail.pk,
        object_repr=guardrail.name,
        before=before,
        after=_guardrail_snapshot(guardrail),
    )
    transaction.on_commit(config_publish)
    return guardrail


@transaction.atomic
def guardrail_delete(*, actor: Actor, guardrail: Guardrail) -> None:
    """Delete a guardrail; the audit event keeps a full snapshot. A guardrail deleted meanwhile is a ConflictError."""
    guardrail = _stored(guardrail, what="guardrail", related=("model", "target_model"))
    snapshot, pk = _guardrail_snapshot(guardrail), guardrail.pk
    guardrail.delete()
    audit_record(
        actor=actor,
        action="guardrail.delete",
        object_type="guardrail",
        object_id=pk,
        object_repr=snapshot["name"],
        before=snapshot,
    )
    transaction.on_commit(config_publish)
