"""System checks that read stored rows (tag `stored_data`): undecryptable secrets, names with invisible characters.

They connect to the database, so they run only where asked for, never in every management command
(`migrate`, `revoke_api_token`, ... must work during an incident, and `check --deploy` must not need a
database): the serving commands (run_gateway, run_embedded) and the Celery worker and beat at startup
(controlplane.celery) run them before serving, and so does a plain `manage.py check` (or
`check --tag stored_data`). Elsewhere they report nothing.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from django.apps import apps
from django.core.checks import CheckMessage, Error, Warning
from django.db import DatabaseError
from django.db.models import TextField
from django.db.models.functions import Cast

from catalog.fields import EncryptedTextField
from core.crypto import ROTATION_FIX, can_decrypt
from core.validators import has_control_characters, validate_name

STORED_DATA = "stored_data"
_requested: ContextVar[bool] = ContextVar("stored_data_checks", default=False)


@contextmanager
def stored_data_checks(enabled: bool = True) -> Iterator[None]:
    """Within this block, the `stored_data` checks run when the system checks do."""
    token = _requested.set(enabled)
    try:
        yield
    finally:
        _requested.reset(token)


def _ids(pks: list[str]) -> str:
    return ", ".join(pks[:20]) + (", …" if len(pks) > 20 else "")


def check_secrets_decrypt(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Error when a stored secret (a provider API key) cannot be decrypted with the configured keys.

    Without it a rotated SECRET_KEY would make every provider key read as empty. A database that is
    unreachable or not migrated yet is not this check's business: it reports nothing then.
    """
    if not _requested.get():
        return []
    errors: list[CheckMessage] = []
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
                        f"(ids {_ids(bad)}); the gateway will refuse to call them.",
                        hint=ROTATION_FIX,
                        obj=model,
                        id="catalog.E001",
                    )
                )
    return errors


def check_stored_names(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Warning for rows saved before names refused control and invisible characters.

    The validators only apply to new writes (their migrations change no row), so older rows may still
    hold a line break, a bidi override or a zero-width character. A warning, not an error: such a name
    is shown escaped everywhere and serving goes on; an administrator renames the rows listed.
    """
    if not _requested.get():
        return []
    warnings: list[CheckMessage] = []
    for model in apps.get_models():
        for field in model._meta.get_fields():
            if validate_name not in getattr(field, "validators", ()):
                continue
            try:
                rows = model._default_manager.values_list("pk", field.name).iterator()
                bad = [str(pk) for pk, value in rows if isinstance(value, str) and has_control_characters(value)]
            except DatabaseError:
                return []
            if bad:
                warnings.append(
                    Warning(
                        f"{len(bad)} stored {model._meta.verbose_name} {field.name}(s) contain control or "
                        f"invisible formatting characters (ids {_ids(bad)}).",
                        hint="Rename them in the console; new names with such characters are refused.",
                        obj=model,
                        id="catalog.W001",
                    )
                )
    return warnings
