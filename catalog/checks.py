"""System checks of the catalog: every command that serves traffic (runserver, run_embedded, run_gateway)
runs them before starting, and the Celery worker and beat run them at startup (controlplane.celery)."""

from typing import Any

from django.apps import apps
from django.core.checks import Error
from django.db import DatabaseError
from django.db.models import TextField
from django.db.models.functions import Cast

from catalog.fields import EncryptedTextField
from controlplane.crypto import ROTATION_FIX, can_decrypt


def check_secrets_decrypt(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Error when a stored secret (a provider API key) cannot be decrypted with the configured keys.

    Without it a rotated SECRET_KEY would make every provider key read as empty. A database that is
    unreachable or not migrated yet is not this check's business: it reports nothing then.
    """
    errors: list[Error] = []
    for model in apps.get_models():
        for field in model._meta.get_fields():
            if not isinstance(field, EncryptedTextField):
                continue
            try:
                # Cast: read the stored ciphertext, not the field's decrypted value.
                rows = list(
                    model._default_manager.exclude(**{field.name: ""})
                    .exclude(**{f"{field.name}__isnull": True})
                    .annotate(_ciphertext=Cast(field.name, TextField()))
                    .values_list("pk", "_ciphertext")
                )
            except DatabaseError:
                return []
            bad = [str(pk) for pk, token in rows if not can_decrypt(token)]
            if bad:
                label = f"{model._meta.verbose_name} {field.name}"
                errors.append(
                    Error(
                        f"{len(bad)} stored {label}(s) cannot be decrypted with the configured keys "
                        f"(ids {', '.join(bad[:20])}{', …' if len(bad) > 20 else ''}); the gateway will refuse "
                        "to call them.",
                        hint=ROTATION_FIX,
                        obj=model,
                        id="catalog.E001",
                    )
                )
    return errors
