"""Routing admin. Writes go through routing.services, so the admin validates and audits exactly like the API;
a refusal becomes an error message and nothing changes."""

from collections.abc import Callable
from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from catalog.admin import ServiceAdmin, ServiceForm
from core.errors import ValidationFailed
from routing.models import Alias, Guardrail, RoutingRule
from routing.services import (
    AliasInput,
    GuardrailInput,
    RoutingRuleInput,
    alias_create,
    alias_delete,
    alias_update,
    alias_validate,
    guardrail_create,
    guardrail_delete,
    guardrail_update,
    guardrail_validate,
    routing_rule_create,
    routing_rule_delete,
    routing_rule_update,
    routing_rule_validate,
)


def _scope_errors_on_scope_id(validate: Callable[[], None]) -> None:
    # The services report scope problems under "scope" (the API's nested object); the admin form
    # edits it as scope_type and scope_id, and the target id is what is wrong or missing.
    try:
        validate()
    except ValidationFailed as exc:
        errors = {("scope_id" if field == "scope" else field): problems for field, problems in exc.errors.items()}
        raise ValidationFailed(exc.message, errors=errors) from None


def _saved(obj: Any, saved: Any) -> None:
    # The admin redirects and logs with `obj`; give it the row the service wrote.
    obj.pk = saved.pk
    obj.refresh_from_db()


# --- routing rules -----------------------------------------------------------------------------


class RoutingRuleForm(ServiceForm):
    class Meta:
        model = RoutingRule
        fields = ["name", "source_model", "target_model", "scope_type", "scope_id", "enabled"]

    def service_input(self) -> RoutingRuleInput:
        data = self.cleaned_data
        return RoutingRuleInput(
            name=data["name"],
            source_model=data["source_model"].name,
            target_model=data["target_model"].name,
            scope_type=data["scope_type"],
            scope_id=data["scope_id"],
            enabled=data["enabled"],
        )

    def service_validate(self, data: RoutingRuleInput) -> None:
        _scope_errors_on_scope_id(lambda: routing_rule_validate(data=data, rule=self.current))


@admin.register(RoutingRule)
class RoutingRuleAdmin(ServiceAdmin):
    form = RoutingRuleForm
    list_display = ["name", "source_model", "target_model", "scope_type", "scope_id", "enabled"]
    list_filter = ["enabled", "scope_type"]
    search_fields = ["name", "source_model__name", "target_model__name"]

    def save_model(self, request: HttpRequest, obj: RoutingRule, form: RoutingRuleForm, change: bool) -> None:
        if change:
            current = RoutingRule.objects.select_related("source_model", "target_model").get(pk=obj.pk)
            saved = routing_rule_update(actor=request.user, rule=current, data=form.service_input())
        else:
            saved = routing_rule_create(actor=request.user, data=form.service_input())
        _saved(obj, saved)

    def delete_model(self, request: HttpRequest, obj: RoutingRule) -> None:
        routing_rule_delete(actor=request.user, rule=obj)


# --- aliases -----------------------------------------------------------------------------------


class AliasForm(ServiceForm):
    class Meta:
        model = Alias
        fields = ["name", "model"]

    def service_input(self) -> AliasInput:
        return AliasInput(name=self.cleaned_data["name"], model=self.cleaned_data["model"].name)

    def service_validate(self, data: AliasInput) -> None:
        alias_validate(data=data, alias=self.current)


@admin.register(Alias)
class AliasAdmin(ServiceAdmin):
    form = AliasForm
    list_display = ["name", "model"]
    search_fields = ["name", "model__name"]

    def save_model(self, request: HttpRequest, obj: Alias, form: AliasForm, change: bool) -> None:
        if change:
            current = Alias.objects.select_related("model").get(pk=obj.pk)
            saved = alias_update(actor=request.user, alias=current, data=form.service_input())
        else:
            saved = alias_create(actor=request.user, data=form.service_input())
        _saved(obj, saved)

    def delete_model(self, request: HttpRequest, obj: Alias) -> None:
        alias_delete(actor=request.user, alias=obj)


# --- guardrails --------------------------------------------------------------------------------


class GuardrailForm(ServiceForm):
    class Meta:
        model = Guardrail
        fields = ["name", "model", "action", "target_model", "message", "scope_type", "scope_id", "enabled"]

    def service_input(self) -> GuardrailInput:
        data = self.cleaned_data
        return GuardrailInput(
            name=data["name"],
            model=data["model"].name if data["model"] else None,
            action=data["action"],
            target_model=data["target_model"].name if data["target_model"] else None,
            message=data["message"],
            scope_type=data["scope_type"],
            scope_id=data["scope_id"],
            enabled=data["enabled"],
        )

    def service_validate(self, data: GuardrailInput) -> None:
        _scope_errors_on_scope_id(lambda: guardrail_validate(data=data))


@admin.register(Guardrail)
class GuardrailAdmin(ServiceAdmin):
    form = GuardrailForm
    list_display = ["name", "model", "action", "target_model", "scope_type", "scope_id", "enabled"]
    list_filter = ["enabled", "action", "scope_type"]

    def save_model(self, request: HttpRequest, obj: Guardrail, form: GuardrailForm, change: bool) -> None:
        if change:
            current = Guardrail.objects.select_related("model", "target_model").get(pk=obj.pk)
            saved = guardrail_update(actor=request.user, guardrail=current, data=form.service_input())
        else:
            saved = guardrail_create(actor=request.user, data=form.service_input())
        _saved(obj, saved)

    def delete_model(self, request: HttpRequest, obj: Guardrail) -> None:
        guardrail_delete(actor=request.user, guardrail=obj)
