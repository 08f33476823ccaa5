from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db import transaction
from django.db.models.deletion import ProtectedError
from django.http import HttpRequest

from audit.admin_mixins import AuditedAdminMixin
from catalog.enums import Capability
from catalog.models import Agent, ApiKey, Application, LlmModel, Provider, Team
from catalog.services import api_key_create, api_key_revoke


class ProviderForm(forms.ModelForm):
    api_key = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Stored encrypted and never shown again. Leave blank to keep the current key.",
    )

    class Meta:
        model = Provider
        fields = ["name", "protocol", "base_url", "api_key", "connect_timeout", "read_timeout"]

    def clean_api_key(self) -> str:
        value = self.cleaned_data.get("api_key", "")
        if not value and self.instance.pk:
            return self.instance.api_key  # keep the stored key
        return value


class ProtectedDeleteMixin:
    """Turn a ProtectedError into a message naming what still references the object."""

    def delete_view(self, request: HttpRequest, object_id: str, extra_context: Any = None) -> Any:
        try:
            with transaction.atomic():
                return super().delete_view(request, object_id, extra_context)  # type: ignore[misc]
        except ProtectedError as exc:
            names = sorted({str(o) for o in exc.protected_objects})
            self.message_user(request, f"Cannot delete: still used by {', '.join(names)}.", messages.ERROR)  # type: ignore[attr-defined]
            from django.shortcuts import redirect

            return redirect(request.path.rsplit("/delete/", 1)[0] + "/change/")


@admin.register(Provider)
class ProviderAdmin(ProtectedDeleteMixin, AuditedAdminMixin, admin.ModelAdmin):
    form = ProviderForm
    list_display = ["name", "protocol", "base_url", "has_api_key", "connect_timeout", "read_timeout"]
    search_fields = ["name"]

    @admin.display(boolean=True, description="API key set")
    def has_api_key(self, obj: Provider) -> bool:
        return bool(obj.api_key)


class LlmModelForm(forms.ModelForm):
    capabilities = forms.MultipleChoiceField(
        choices=Capability.choices, widget=forms.CheckboxSelectMultiple, required=False
    )

    class Meta:
        model = LlmModel
        fields = ["name", "provider", "capabilities", "input_price_per_mtok", "output_price_per_mtok", "context_window"]


@admin.register(LlmModel)
class LlmModelAdmin(ProtectedDeleteMixin, AuditedAdminMixin, admin.ModelAdmin):
    form = LlmModelForm
    list_display = ["name", "provider", "input_price_per_mtok", "output_price_per_mtok", "context_window"]
    list_filter = ["provider"]
    search_fields = ["name"]


@admin.register(Team)
class TeamAdmin(AuditedAdminMixin, admin.ModelAdmin):
    search_fields = ["name"]


@admin.register(Application)
class ApplicationAdmin(AuditedAdminMixin, admin.ModelAdmin):
    list_display = ["name", "team"]
    search_fields = ["name"]


@admin.register(Agent)
class AgentAdmin(AuditedAdminMixin, admin.ModelAdmin):
    list_display = ["name", "application"]
    search_fields = ["name"]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    """Keys are issued through the service: the secret is shown once, only its hash is stored."""

    list_display = ["name", "prefix", "user", "team", "application", "agent", "created_at", "revoked_at"]
    list_filter = ["revoked_at"]
    search_fields = ["name", "prefix", "user__username"]
    fields = ["name", "user", "team", "application", "agent"]
    actions = ["revoke"]

    def get_readonly_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> list[str]:
        return ["name", "user", "team", "application", "agent"] if obj else []

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        if change:
            return
        created = api_key_create(
            actor=request.user,
            name=obj.name,
            user=obj.user,
            team=obj.team,
            application=obj.application,
            agent=obj.agent,
        )
        obj.pk = created.key.pk
        obj.prefix = created.key.prefix
        self.message_user(
            request, f"Key created. Copy it now, it will not be shown again: {created.secret}", messages.WARNING
        )

    def has_delete_permission(self, request: HttpRequest, obj: ApiKey | None = None) -> bool:
        return False  # revoke instead, so request logs keep their key

    @admin.action(description="Revoke selected keys")
    def revoke(self, request: HttpRequest, queryset: Any) -> None:
        for key in queryset:
            api_key_revoke(actor=request.user, key=key)
        self.message_user(request, f"Revoked {queryset.count()} key(s).")
