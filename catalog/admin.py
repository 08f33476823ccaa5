"""Catalog admin. Writes go through catalog.services (core.admin), so the admin validates, refuses (409) and
audits exactly like the API; a refusal becomes an error message and nothing changes."""

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import GroupAdmin as DjangoGroupAdmin
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin
from django.contrib.auth.models import Group
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.cache import add_never_cache_headers
from django.utils.html import format_html

from catalog.enums import Capability
from catalog.fields import Undecryptable
from catalog.models import Agent, ApiKey, Application, ConsoleToken, LlmModel, Provider, Team
from catalog.selectors import api_keys_usable_count
from catalog.services import (
    AgentInput,
    ApplicationInput,
    LlmModelInput,
    ProviderInput,
    TeamInput,
    agent_create,
    agent_delete,
    agent_update,
    agent_validate,
    api_key_create,
    api_key_revoke,
    api_key_validate,
    application_create,
    application_delete,
    application_update,
    application_validate,
    console_token_revoke,
    deletes_locks_first,
    llm_model_create,
    llm_model_delete,
    llm_model_update,
    llm_model_validate,
    provider_create,
    provider_delete,
    provider_update,
    provider_validate,
    team_create,
    team_delete,
    team_update,
    team_validate,
    user_delete,
    user_deletes_locks_first,
    user_set_active,
)
from core.admin import ServiceAdmin, ServiceForm, ServiceModelAdmin
from core.configbus import config_publish
from core.crypto import ROTATION_FIX
from core.roles import Role

# --- providers and models ----------------------------------------------------------------------


class ProviderForm(ServiceForm):
    api_key = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Stored encrypted and never shown again. Leave blank to keep the current key.",
    )

    class Meta:
        model = Provider
        fields = [
            "name",
            "protocol",
            "base_url",
            "api_key",
            "connect_timeout",
            "read_timeout",
            "first_token_timeout_seconds",
            "idle_timeout_seconds",
            "api_version",
            "deployments",
        ]

    def service_input(self) -> ProviderInput:
        data = self.cleaned_data
        return ProviderInput(
            name=data["name"],
            base_url=data["base_url"],
            protocol=data["protocol"],
            connect_timeout=data["connect_timeout"],
            read_timeout=data["read_timeout"],
            first_token_timeout_seconds=data.get("first_token_timeout_seconds"),
            idle_timeout_seconds=data.get("idle_timeout_seconds"),
            api_version=data.get("api_version") or "",
            deployments=data.get("deployments") or {},
        )

    def service_validate(self, data: ProviderInput) -> None:
        provider_validate(data=data, provider=self.current)


def _undecryptable_message(count: int) -> str:
    which = "This provider's stored API key" if count == 1 else f"{count} providers' stored API keys"
    return (
        f"{which} cannot be decrypted with the configured keys, so the gateway will not call "
        f"{'it' if count == 1 else 'them'}. {ROTATION_FIX} Saving a new API key also replaces it."
    )


@admin.register(Provider)
class ProviderAdmin(ServiceModelAdmin):
    form = ProviderForm
    create_service = staticmethod(provider_create)
    update_service = staticmethod(provider_update)
    delete_service = staticmethod(provider_delete)
    service_keyword = "provider"
    list_display = ["name", "protocol", "base_url", "api_key_state", "connect_timeout", "read_timeout"]
    search_fields = ["name"]

    class Media:
        css = {"all": ["css/admin.css"]}

    @admin.display(description="API key")
    def api_key_state(self, obj: Provider) -> str:
        if isinstance(obj.api_key, Undecryptable):
            # A word, not only a colour; the fix is on the provider's page and in `manage.py check`.
            # A class, not a style= attribute: the Content-Security-Policy refuses inline styles (static/css/admin.css).
            return format_html('<strong class="cp-key-undecryptable">✖ {}</strong>', "Cannot be decrypted")
        return "✔ Set" if obj.api_key else "— Not set"

    def get_fields(self, request: HttpRequest, obj: Provider | None = None) -> list[Any]:
        fields = list(super().get_fields(request, obj))
        if obj is not None and not self.has_change_permission(request, obj):
            # A page without the change permission shows each field's stored value: the key's state, never the
            # decrypted key itself.
            fields = ["api_key_state" if field == "api_key" else field for field in fields]
        return fields

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        if request.method == "GET":
            count = sum(isinstance(p.api_key, Undecryptable) for p in Provider.objects.only("api_key"))
            if count:
                self.message_user(request, _undecryptable_message(count), messages.ERROR)
        return super().changelist_view(request, extra_context)

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if request.method == "GET":
            current = (
                Provider.objects.filter(pk=object_id).only("api_key").first()
                if object_id.isascii() and object_id.isdigit()
                else None
            )
            if current is not None and isinstance(current.api_key, Undecryptable):
                self.message_user(request, _undecryptable_message(1), messages.ERROR)
        return super().change_view(request, object_id, form_url, extra_context)

    def service_kwargs(self, form: ServiceForm, change: bool) -> dict[str, Any]:
        api_key = form.cleaned_data["api_key"]
        # A blank key field keeps the stored key.
        return {"api_key": api_key or None} if change else {"api_key": api_key}


class LlmModelForm(ServiceForm):
    capabilities = forms.MultipleChoiceField(
        choices=Capability.choices, widget=forms.CheckboxSelectMultiple, required=False
    )

    class Meta:
        model = LlmModel
        fields = [
            "name",
            "provider",
            "capabilities",
            "input_price_per_mtok",
            "output_price_per_mtok",
            "context_window",
            "max_output_tokens",
        ]

    def service_input(self) -> LlmModelInput:
        data = self.cleaned_data
        return LlmModelInput(
            name=data["name"],
            provider=data["provider"].name,
            capabilities=list(data["capabilities"]),
            input_price_per_mtok=data["input_price_per_mtok"],
            output_price_per_mtok=data["output_price_per_mtok"],
            context_window=data["context_window"],
            max_output_tokens=data["max_output_tokens"],
        )

    def service_validate(self, data: LlmModelInput) -> None:
        llm_model_validate(data=data, model=self.current)


@admin.register(LlmModel)
class LlmModelAdmin(ServiceModelAdmin):
    form = LlmModelForm
    create_service = staticmethod(llm_model_create)
    update_service = staticmethod(llm_model_update)
    delete_service = staticmethod(llm_model_delete)
    service_keyword = "model"
    stored_related = ("provider",)
    list_display = ["name", "provider", "input_price_per_mtok", "output_price_per_mtok", "context_window"]
    list_filter = ["provider"]
    search_fields = ["name"]


# --- teams, applications, agents ---------------------------------------------------------------


class TeamForm(ServiceForm):
    class Meta:
        model = Team
        fields = ["name"]

    def service_input(self) -> TeamInput:
        return TeamInput(name=self.cleaned_data["name"])

    def service_validate(self, data: TeamInput) -> None:
        team_validate(data=data, team=self.current)


@admin.register(Team)
class TeamAdmin(ServiceModelAdmin):
    form = TeamForm
    search_fields = ["name"]
    create_service = staticmethod(team_create)
    update_service = staticmethod(team_update)
    delete_service = staticmethod(team_delete)
    service_keyword = "team"

    def action_locks_first(self, pks: list[int]) -> None:
        deletes_locks_first(self.model, pks)  # and what their deletes detach


class ApplicationForm(ServiceForm):
    class Meta:
        model = Application
        fields = ["name", "team"]

    def service_input(self) -> ApplicationInput:
        team = self.cleaned_data["team"]
        return ApplicationInput(name=self.cleaned_data["name"], team=team.name if team else None)

    def service_validate(self, data: ApplicationInput) -> None:
        application_validate(data=data, application=self.current)


@admin.register(Application)
class ApplicationAdmin(ServiceModelAdmin):
    form = ApplicationForm
    list_display = ["name", "team"]
    search_fields = ["name"]
    create_service = staticmethod(application_create)
    update_service = staticmethod(application_update)
    delete_service = staticmethod(application_delete)
    service_keyword = "application"

    def action_locks_first(self, pks: list[int]) -> None:
        deletes_locks_first(self.model, pks)  # and what their deletes detach

    stored_related = ("team",)


class AgentForm(ServiceForm):
    class Meta:
        model = Agent
        fields = ["name", "application"]

    def service_input(self) -> AgentInput:
        application = self.cleaned_data["application"]
        return AgentInput(name=self.cleaned_data["name"], application=application.name if application else None)

    def service_validate(self, data: AgentInput) -> None:
        agent_validate(data=data, agent=self.current)


@admin.register(Agent)
class AgentAdmin(ServiceModelAdmin):
    form = AgentForm
    list_display = ["name", "application"]
    search_fields = ["name"]
    create_service = staticmethod(agent_create)
    update_service = staticmethod(agent_update)
    delete_service = staticmethod(agent_delete)
    service_keyword = "agent"

    def action_locks_first(self, pks: list[int]) -> None:
        deletes_locks_first(self.model, pks)  # and what their deletes detach

    stored_related = ("application",)


# --- gateway keys and users --------------------------------------------------------------------


def keys_phrase(count: int, verb: str) -> str:
    """ "3 gateway keys stop working", "1 gateway key stops working"."""
    noun = "gateway key" if count == 1 else "gateway keys"
    return f"{count} {noun} {verb + 's' if count == 1 else verb}"


class ApiKeyForm(ServiceForm):
    class Meta:
        model = ApiKey
        fields = ["name", "user", "team", "application", "agent"]

    def service_input(self) -> dict[str, Any]:
        return {"name": self.cleaned_data.get("name", ""), "user": self.cleaned_data.get("user")}

    def service_validate(self, data: dict[str, Any]) -> None:
        if self.current is None:  # an issued key's fields are read-only: only adding validates
            api_key_validate(**data)


@admin.register(ApiKey)
class ApiKeyAdmin(ServiceAdmin):
    """Keys are issued through the service: the secret is shown once, on the response page of the add form, and
    never put in a message, a cookie or the session (Django's messages travel in a signed, readable cookie)."""

    form = ApiKeyForm

    list_display = [
        "name",
        "prefix",
        "user",
        "owner_active",
        "usable",
        "team",
        "application",
        "agent",
        "created_at",
        "revoked_at",
    ]
    list_filter = ["revoked_at", "user__is_active"]
    list_select_related = ["user", "team", "application", "agent"]
    search_fields = ["name", "prefix", "user__username"]
    fields = ["name", "user", "team", "application", "agent"]
    actions = ["revoke"]

    @admin.display(boolean=True, description="owner active", ordering="user__is_active")
    def owner_active(self, obj: ApiKey) -> bool:
        return obj.user.is_active

    @admin.display(boolean=True, description="works now")
    def usable(self, obj: ApiKey) -> bool:
        """What the gateway does with the key: not revoked and its owner active (the API's `active`)."""
        return obj.is_active and obj.user.is_active

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
        # Read by response_add in this same request only; never stored anywhere.
        request._issued_key_secret = created.secret  # type: ignore[attr-defined]

    def response_add(self, request: HttpRequest, obj: ApiKey, post_url_continue: str | None = None) -> HttpResponse:
        secret = getattr(request, "_issued_key_secret", None)
        if secret is None:
            return super().response_add(request, obj, post_url_continue)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Gateway key issued",
            "key": obj,
            "secret": secret,
        }
        response = TemplateResponse(request, "admin/catalog/apikey/issued.html", context)
        # The page holds the only copy of the secret: no browser or proxy may keep it.
        add_never_cache_headers(response)
        return response

    def has_delete_permission(self, request: HttpRequest, obj: ApiKey | None = None) -> bool:
        return False  # revoke instead, so request logs keep their key

    @admin.action(description="Revoke selected keys", permissions=["change"])
    def revoke(self, request: HttpRequest, queryset: Any) -> None:
        revoked = 0
        with transaction.atomic():
            for key in queryset.filter(revoked_at=None):  # a key revoked already is not counted again
                api_key_revoke(actor=request.user, key=key)
                revoked += 1
        self.message_user(request, f"Revoked {revoked} key(s).")


@admin.register(ConsoleToken)
class ConsoleTokenAdmin(ServiceAdmin):
    """Read-only: `manage.py create_api_token` issues tokens (the secret is shown once); here they are revoked."""

    list_display = ["prefix", "user", "name", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["revoked_at"]
    search_fields = ["name", "prefix", "user__username"]
    # Tuples, readonly first: django-stubs types the two lists differently, and a tuple fits both.
    readonly_fields = ("prefix", "user", "name", "created_at", "last_used_at", "revoked_at")
    fields = readonly_fields
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: ConsoleToken | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: ConsoleToken | None = None) -> bool:
        return False  # revoke instead: a revoked token stays listed with its dates

    def has_revoke_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("catalog.change_consoletoken")

    @admin.action(description="Revoke selected tokens", permissions=["revoke"])
    def revoke(self, request: HttpRequest, queryset: Any) -> None:
        revoked = 0
        with transaction.atomic():
            for token in queryset.filter(revoked_at=None).select_related("user"):
                console_token_revoke(actor=request.user, token=token)
                revoked += 1
        self.message_user(request, f"Revoked {revoked} token(s).")


def _permission_names(permissions: Any) -> list[str]:
    """A user's or group's permissions as sorted "app_label.codename" names, for the audit log."""
    return sorted(f"{app}.{code}" for app, code in permissions.values_list("content_type__app_label", "codename"))


class AuditedSaveAdmin(ServiceAdmin):
    """An admin of a model with many-to-many fields (Django's users and groups), audited in the transaction of
    the save: "<type>.create" with what `_audited_fields` reads, or "<type>.update" with the fields that
    changed (no event when none did). Django's changeform view runs save_model, save_related (which writes the
    many-to-many fields) and this audit write in one transaction."""

    # Each subclass defines both: the audit log's object type, and the fields it records (a staticmethod).
    audit_object_type: str
    _audited_fields: Callable[[Any], dict[str, Any]]

    def _saved(self, request: HttpRequest, obj: Any, changed: dict[str, Any], change: bool) -> None:
        """After the audit event: what else a save changing these fields must do."""

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if change:
            # The form has already changed `obj`; the stored row still holds the values before this save.
            form.audit_before = self._audited_fields(type(obj)._default_manager.get(pk=obj.pk))
        super().save_model(request, obj, form, change)

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        from audit.services import audit_record, diff_fields

        super().save_related(request, form, formsets, change)
        obj = form.instance
        before: dict[str, Any] | None = None
        after = self._audited_fields(obj)
        if change:
            before, after = diff_fields(form.audit_before, after)
            if not after:
                return
        audit_record(
            actor=request.user,
            action=f"{self.audit_object_type}.{'update' if change else 'create'}",
            object_type=self.audit_object_type,
            object_id=obj.pk,
            object_repr=str(obj),
            before=before,
            after=after,
        )
        self._saved(request, obj, after, change)


User = get_user_model()
if admin.site.is_registered(User):
    admin.site.unregister(User)


@admin.register(User)
class UserAdmin(AuditedSaveAdmin, DjangoUserAdmin):
    """Django's user admin, except that deleting goes through user_delete: a user that a chain, rule or
    guardrail is scoped to, or who owns gateway keys (revoked, never deleted), is kept.

    Saves are audited in the transaction of the save: "user.create", and "user.update" with the changed fields
    among username, is_active, is_staff, is_superuser, groups and user_permissions; a new password is recorded
    only as "(changed)".

    Deactivating a user stops their gateway keys (the gateway reloads after the commit) and reactivating restores
    them; the change form and the messages say how many keys that is."""

    actions = ["deactivate_users", "activate_users"]
    audit_object_type = "user"

    def action_locks_first(self, pks: list[int]) -> None:
        user_deletes_locks_first(self.model, pks)  # the rows a delete nulls come before the users

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        form = super().get_form(request, obj, change=change, **kwargs)
        field = form.base_fields.get("is_active")
        if obj is not None and field is not None:
            # get_form builds a new form class, with new model fields, on every call: this changes no other form.
            count = api_keys_usable_count(users=[obj])
            if obj.is_active:
                field.help_text = (
                    f"Unticking this signs the user out and {keys_phrase(count, 'stop')} working within a second. "
                    "Ticking it again restores them; revoke a key to stop it for good."
                )
            else:
                refused = "1 gateway key is" if count == 1 else f"{count} gateway keys are"
                field.help_text = f"This user is inactive: their {refused} refused. Ticking this restores them."
        if obj is not None and field is not None and obj.pk == request.user.pk:
            # As the bulk action refuses it: signing yourself out (maybe the last admin) is never what was meant.
            def clean_is_active(self: Any) -> bool:
                if not self.cleaned_data.get("is_active"):
                    raise forms.ValidationError("You cannot deactivate yourself; ask another admin.")
                return True

            form = type(form.__name__, (form,), {"clean_is_active": clean_is_active})
        return form

    @staticmethod
    def _audited_fields(user: Any) -> dict[str, Any]:
        return {
            "username": user.get_username(),
            "is_active": user.is_active,
            "is_staff": user.is_staff,
            "is_superuser": user.is_superuser,
            "groups": sorted(user.groups.values_list("name", flat=True)),
            "user_permissions": _permission_names(user.user_permissions),
        }

    def _saved(self, request: HttpRequest, user: Any, changed: dict[str, Any], change: bool) -> None:
        if change and "is_active" in changed:
            # The gateway's snapshot leaves out an inactive user's keys: rebuild it once this save commits.
            transaction.on_commit(config_publish)
            count = api_keys_usable_count(users=[user])
            if changed["is_active"]:
                what = f"{user.get_username()} is active again: {keys_phrase(count, 'work')} again."
            else:
                what = f"{user.get_username()} is deactivated: {keys_phrase(count, 'stop')} working."
            self.message_user(request, what, messages.WARNING if count else messages.INFO)

    def user_change_password(self, request: HttpRequest, id: str, form_url: str = "") -> HttpResponse:
        from django.contrib.admin.utils import unquote

        from audit.services import audit_record

        # Django's password view is not atomic: without this block the new hash would commit on its own.
        with transaction.atomic():
            stored = User._default_manager.filter(pk=unquote(id))
            before = stored.values_list("password", flat=True).first()
            response = super().user_change_password(request, id, form_url)
            user = stored.first()
            if user is not None and user.password != before:
                # Neither hash is recorded, only that the password changed (or was disabled).
                audit_record(
                    actor=request.user,
                    action="user.update",
                    object_type="user",
                    object_id=user.pk,
                    object_repr=user.get_username(),
                    after={"password": "(changed)"},
                )
        return response

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        user_delete(actor=request.user, user=obj)

    def _set_active(self, request: HttpRequest, queryset: Any, *, active: bool) -> None:
        if not active and queryset.filter(pk=request.user.pk).exists():
            # Signing yourself out mid-action (and maybe the last admin): refuse the whole action, change nothing.
            self.message_user(
                request, "You cannot deactivate yourself; ask another admin. No user was changed.", messages.ERROR
            )
            return
        changed = keys = 0
        for user in queryset.filter(is_active=not active):
            keys += user_set_active(actor=request.user, user=user, active=active)
            changed += 1
        users = "1 user" if changed == 1 else f"{changed} users"
        if active:
            self.message_user(request, f"Activated {users}: {keys_phrase(keys, 'work')} again.")
        else:
            self.message_user(
                request,
                f"Deactivated {users}: {keys_phrase(keys, 'stop')} working.",
                messages.WARNING if keys else messages.INFO,
            )

    @admin.action(description="Deactivate selected users (their gateway keys stop working)", permissions=["change"])
    def deactivate_users(self, request: HttpRequest, queryset: Any) -> None:
        self._set_active(request, queryset, active=False)

    @admin.action(description="Activate selected users", permissions=["change"])
    def activate_users(self, request: HttpRequest, queryset: Any) -> None:
        self._set_active(request, queryset, active=True)


# --- groups --------------------------------------------------------------------------------------

if admin.site.is_registered(Group):
    admin.site.unregister(Group)

ROLE_GROUPS = frozenset(Role)


@admin.register(Group)
class GroupAdmin(AuditedSaveAdmin, DjangoGroupAdmin):
    """Django's group admin, audited, with the role groups kept.

    The roles (admin, bi_read_only, user) are groups the product looks up by name: one cannot be renamed or
    deleted here, or every member would lose the role without a word in the audit log. Their permissions (what
    a staff member may do in this admin) can change. Every save and delete is audited in its transaction:
    "group.create", "group.update" with the changed name or permissions, "group.delete" with the members it had.
    """

    audit_object_type = "group"

    def get_readonly_fields(self, request: HttpRequest, obj: Group | None = None) -> Any:
        fields = tuple(super().get_readonly_fields(request, obj))
        if obj is not None and obj.name in ROLE_GROUPS:
            fields += ("name",)
        return fields

    def has_delete_permission(self, request: HttpRequest, obj: Group | None = None) -> bool:
        if obj is not None and obj.name in ROLE_GROUPS:
            return False
        return super().has_delete_permission(request, obj)

    @staticmethod
    def _audited_fields(group: Any) -> dict[str, Any]:
        return {"name": group.name, "permissions": _permission_names(group.permissions)}

    def delete_model(self, request: HttpRequest, obj: Group) -> None:
        from audit.services import audit_record

        with transaction.atomic():
            before = self._audited_fields(obj) | {
                "members": sorted(obj.user_set.values_list("username", flat=True)),
            }
            pk = obj.pk
            super().delete_model(request, obj)
            audit_record(
                actor=request.user,
                action="group.delete",
                object_type="group",
                object_id=pk,
                object_repr=before["name"],
                before=before,
            )
