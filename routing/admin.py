from typing import Any

from django import forms
from django.contrib import admin

from audit.admin_mixins import AuditedAdminMixin
from catalog.scopes import scope_validate
from controlplane.errors import ValidationFailed
from routing.models import Alias, Guardrail, GuardrailAction, RoutingRule


class RoutingRuleForm(forms.ModelForm):
    class Meta:
        model = RoutingRule
        fields = ["name", "source_model", "target_model", "scope_type", "scope_id", "enabled"]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        try:
            scope_validate(scope_type=data.get("scope_type", ""), scope_id=data.get("scope_id"))
        except ValidationFailed as exc:
            self.add_error("scope_id", exc.message)
        if data.get("source_model") and data.get("source_model") == data.get("target_model"):
            self.add_error("target_model", "The target must differ from the source model.")
        return data


@admin.register(RoutingRule)
class RoutingRuleAdmin(AuditedAdminMixin, admin.ModelAdmin):
    form = RoutingRuleForm
    list_display = ["name", "source_model", "target_model", "scope_type", "scope_id", "enabled"]
    list_filter = ["enabled", "scope_type"]
    search_fields = ["name", "source_model__name", "target_model__name"]


@admin.register(Alias)
class AliasAdmin(AuditedAdminMixin, admin.ModelAdmin):
    list_display = ["name", "model"]
    search_fields = ["name", "model__name"]


class GuardrailForm(forms.ModelForm):
    class Meta:
        model = Guardrail
        fields = ["name", "model", "action", "target_model", "message", "scope_type", "scope_id", "enabled"]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        try:
            scope_validate(scope_type=data.get("scope_type", ""), scope_id=data.get("scope_id"))
        except ValidationFailed as exc:
            self.add_error("scope_id", exc.message)
        if data.get("action") == GuardrailAction.REWRITE and not data.get("target_model"):
            self.add_error("target_model", "A rewrite guardrail needs the model to call instead.")
        if data.get("action") == GuardrailAction.DENY and not (data.get("message") or "").strip():
            self.add_error("message", "Say why the request is refused; the client sees this message.")
        return data


@admin.register(Guardrail)
class GuardrailAdmin(AuditedAdminMixin, admin.ModelAdmin):
    form = GuardrailForm
    list_display = ["name", "model", "action", "target_model", "scope_type", "scope_id", "enabled"]
    list_filter = ["enabled", "action", "scope_type"]
