"""Admin pages that write through the services, so the admin validates, refuses (409) and audits exactly
like the API; a refusal becomes an error message and nothing changes.

A form subclasses ServiceForm (the service's input and check); an admin subclasses ServiceModelAdmin and
declares the services it saves and deletes with, or ServiceAdmin when it writes some other way.
"""

import functools
import json
from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.admin.options import ActionLocation
from django.contrib.auth import get_user_model
from django.contrib.contenttypes.models import ContentType
from django.db import models, transaction
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from core.db import lock_rows
from core.errors import ApplicationError, ValidationFailed


class ServiceForm(forms.ModelForm):
    """Runs the service's validation in clean(), so the admin shows the API's messages next to the fields."""

    # Each subclass defines both: the service input built from cleaned_data, and the service's check.
    service_input: Callable[[], Any]
    service_validate: Callable[[Any], None]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if self.errors:
            return cleaned  # the service would only repeat what the fields already say
        try:
            # In a savepoint rolled back at its end: the checks lock the rows they resolve, and the save's service
            # takes its locks in the one order (a name's lock before any row's, say); locks the form kept would
            # come first, and a concurrent write taking them in order and this one would each wait for the other.
            with transaction.atomic():
                try:
                    self.service_validate(self.service_input())
                finally:
                    transaction.set_rollback(True)
        except ValidationFailed as exc:
            for field, problems in exc.errors.items():
                self.add_error(field if field in self.fields else None, problems)
        return cleaned

    @property
    def current(self) -> Any:
        """The stored object being edited (None when adding)."""
        return self.instance if self.instance.pk else None


def _log_after_commit(request: HttpRequest, objects: list[Any], flag: int, message: Any) -> list[LogEntry]:
    """Build the admin's LogEntry rows now (a deleted object's key and name are read before the delete) and save
    them once the transaction commits."""
    user_id: Any = request.user.pk
    entries = [
        LogEntry(
            user_id=user_id,
            content_type_id=ContentType.objects.get_for_model(obj, for_concrete_model=False).id,
            object_id=obj.pk,
            object_repr=str(obj)[:200],
            action_flag=flag,
            change_message=json.dumps(message) if isinstance(message, list) else message,
        )
        for obj in objects
    ]
    if entries:
        transaction.on_commit(lambda: _save_log(entries, user_id), robust=True)
    return entries


def _save_log(entries: list[LogEntry], user_id: Any) -> None:
    # An admin who deleted their own user has no row to name (Django's cascade deleted their history too).
    if get_user_model()._default_manager.filter(pk=user_id).exists():
        LogEntry.objects.bulk_create(entries)


def _selected_locked_first(func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    def locked_first(modeladmin: "ServiceAdmin", request: HttpRequest, queryset: Any) -> Any:
        # By key: the changelist's own query may be DISTINCT (a search), which PostgreSQL cannot lock.
        modeladmin.action_locks_first(list(queryset.order_by("pk").values_list("pk", flat=True)))
        return func(modeladmin, request, queryset)

    return locked_first


class ServiceAdmin(admin.ModelAdmin):
    """Turns a service refusal (ApplicationError) into an error message; the transaction rolls back.

    An action (a bulk delete, revoke, (de)activation) takes every lock its writes will take before it writes the
    first (`action_locks_first`): each row's service audits, and the first audit event takes the audit log's
    lock, which comes after every row's in the one lock order (docs/decisions.md)."""

    def action_locks_first(self, pks: list[int]) -> None:
        """Lock, in the one lock order, every row an action on the rows `pks` locks: here the rows themselves, in
        primary key order. An admin whose deletes lock more (the rows they detach, say) locks those too."""
        lock_rows(self.model._default_manager.filter(pk__in=pks))

    def get_actions(self, request: HttpRequest, action_location: Any = ActionLocation.CHANGE_LIST) -> Any:
        actions = super().get_actions(request, action_location=action_location)
        for action in actions.values():
            if action is not None:
                action.func = _selected_locked_first(action.func)
        return actions

    # Django's admin history (LogEntry) is written after the commit: its row names the acting user, and that
    # foreign key is checked at COMMIT (it is deferred), which would lock the user after the service's audit event
    # took the audit log's lock, against the one lock order: a write holding the user (a rule scoped to them)
    # and waiting on the audit log would deadlock with the save. The audit log, written in the transaction, is
    # the record; the history entry follows it (a failure to write it is logged, the change stays).

    def log_addition(self, request: HttpRequest, obj: Any, message: Any) -> LogEntry:
        return _log_after_commit(request, [obj], ADDITION, message)[0]

    def log_change(self, request: HttpRequest, obj: Any, message: Any) -> LogEntry:
        return _log_after_commit(request, [obj], CHANGE, message)[0]

    def log_deletions(self, request: HttpRequest, queryset: Any) -> list[LogEntry]:
        return _log_after_commit(request, list(queryset), DELETION, "")

    def _refused(self, request: HttpRequest, exc: ApplicationError, url: str) -> HttpResponse:
        self.message_user(request, exc.message, messages.ERROR)
        return HttpResponseRedirect(url)

    def changeform_view(
        self, request: HttpRequest, object_id: str | None = None, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        # The form already ran the service's checks; this catches a write that raced another one.
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except ApplicationError as exc:
            return self._refused(request, exc, request.get_full_path())

    def delete_view(self, request: HttpRequest, object_id: str, extra_context: Any = None) -> HttpResponse:
        try:
            return super().delete_view(request, object_id, extra_context)
        except ApplicationError as exc:
            return self._refused(request, exc, request.path.rsplit("/delete/", 1)[0] + "/change/")

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        # "Delete selected" logs and deletes outside a transaction; one refusal must undo the whole batch.
        try:
            with transaction.atomic():
                return super().changelist_view(request, extra_context)
        except ApplicationError as exc:
            return self._refused(request, exc, request.get_full_path())

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        with transaction.atomic():
            for obj in queryset:
                self.delete_model(request, obj)


class ServiceModelAdmin(ServiceAdmin):
    """Saves and deletes through the services a subclass declares (wrap each in staticmethod):

        create_service(*, actor, data, **service_kwargs) -> the new row
        update_service(*, actor, <service_keyword>=stored row, data, **service_kwargs) -> the row
        delete_service(*, actor, <service_keyword>=row)

    `data` is the form's service_input() (override to_input to change that). The update service gets the row
    as stored, re-read with `stored_related`, not the form's already-changed instance: the audit diffs it."""

    create_service: Callable[..., models.Model]
    update_service: Callable[..., models.Model]
    delete_service: Callable[..., None]
    service_keyword: str  # how the update and delete services name the row: "team", "rule", ...
    stored_related: tuple[str, ...] = ()

    def to_input(self, form: ServiceForm) -> Any:
        return form.service_input()

    def service_kwargs(self, form: ServiceForm, change: bool) -> dict[str, Any]:
        """Arguments beyond actor, row and data (e.g. a secret that is not part of the input)."""
        return {}

    def stored(self, obj: models.Model) -> models.Model:
        rows = self.model._default_manager.all()
        if self.stored_related:
            rows = rows.select_related(*self.stored_related)
        stored: models.Model = rows.get(pk=obj.pk)
        return stored

    def save_model(self, request: HttpRequest, obj: models.Model, form: Any, change: bool) -> None:
        extra = self.service_kwargs(form, change)
        if change:
            saved = self.update_service(
                actor=request.user, **{self.service_keyword: self.stored(obj)}, data=self.to_input(form), **extra
            )
        else:
            saved = self.create_service(actor=request.user, data=self.to_input(form), **extra)
        # The admin redirects and logs with `obj`; give it the row the service wrote.
        obj.pk = saved.pk
        obj.refresh_from_db()

    def delete_model(self, request: HttpRequest, obj: models.Model) -> None:
        self.delete_service(actor=request.user, **{self.service_keyword: obj})
