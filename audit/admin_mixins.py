"""Audit for catalog objects edited in Django's admin (same transaction as the save)."""

from typing import Any

from django.db import transaction
from django.forms.models import model_to_dict

from audit.services import audit_record, diff_fields
from controlplane.configbus import config_publish

# Never copied into audit events.
SECRET_FIELDS = {"api_key", "hashed_secret"}


def _plain(obj: Any) -> dict[str, Any]:
    data = model_to_dict(obj)
    for name in SECRET_FIELDS & data.keys():
        data[name] = "(set)" if data[name] else ""
    return data


class AuditedAdminMixin:
    """Records create/update/delete of admin-managed objects and notifies gateways."""

    def save_model(self, request: Any, obj: Any, form: Any, change: bool) -> None:
        before = _plain(type(obj)._default_manager.get(pk=obj.pk)) if change and obj.pk else {}
        super().save_model(request, obj, form, change)  # type: ignore[misc]
        after = _plain(obj)
        kind = obj._meta.model_name
        if change:
            b, a = diff_fields(before, after)
            if not a:
                return
            audit_record(
                actor=request.user,
                action=f"{kind}.update",
                object_type=kind,
                object_id=obj.pk,
                object_repr=str(obj),
                before=b,
                after=a,
            )
        else:
            audit_record(
                actor=request.user,
                action=f"{kind}.create",
                object_type=kind,
                object_id=obj.pk,
                object_repr=str(obj),
                after=after,
            )
        transaction.on_commit(config_publish)

    def delete_model(self, request: Any, obj: Any) -> None:
        snapshot, pk, kind, text = _plain(obj), obj.pk, obj._meta.model_name, str(obj)
        super().delete_model(request, obj)  # type: ignore[misc]
        audit_record(
            actor=request.user,
            action=f"{kind}.delete",
            object_type=kind,
            object_id=pk,
            object_repr=text,
            before=snapshot,
        )
        transaction.on_commit(config_publish)

    def delete_queryset(self, request: Any, queryset: Any) -> None:
        # One audited delete per object, so bulk deletes leave the same trail. Django's
        # delete_selected action runs outside a transaction: without this block the first
        # delete would commit on its own and the audit write would refuse to run.
        with transaction.atomic():
            for obj in queryset:
                self.delete_model(request, obj)
