"""Routing admin. Writes go through routing.services (core.admin), so the admin validates and audits exactly
like the API; a refusal becomes an error message and nothing changes."""

from collections.abc import Callable

from django.contrib import admin

from core.admin import ServiceForm, ServiceModelAdmin
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
class RoutingRuleAdmin(ServiceModelAdmin):
    form = RoutingRuleForm
    list_display = ["name", "source_model", "target_model", "scope_type", "scope_id", "enabled"]
    list_filter = ["enabled", "scope_type"]
    search_fields = ["name", "source_model__name", "target_model__name"]
    create_service = staticmethod(routing_rule_create)
    update_service = staticmethod(routing_rule_update)
    delete_service = staticmethod(routing_rule_delete)
    service_keyword = "rule"
    stored_related = ("source_model", "target_model")


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
class AliasAdmin(ServiceModelAdmin):
    form = AliasForm
    list_display = ["name", "model"]
    search_fields = ["name", "model__name"]
    create_service = staticmethod(alias_create)
    update_service = staticmethod(alias_update)
    delete_service = staticmethod(alias_delete)
    service_keyword = "alias"
    stored_related = ("model",)


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
        _scope_errors_on_scope_id(lambda: guardrail_validate(data=data, guardrail=self.current))


@admin.register(Guardrail)
class GuardrailAdmin(ServiceModelAdmin):
    form = GuardrailForm
    list_display = ["name", "model", "action", "target_model", "scope_type", "scope_id", "enabled"]
    list_filter = ["enabled", "action", "scope_type"]
    create_service = staticmethod(guardrail_create)
    update_service = staticmethod(guardrail_update)
    delete_service = staticmethod(guardrail_delete)
    service_keyword = "guardrail"
    stored_related = ("model", "target_model")
