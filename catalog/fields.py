import logging
from typing import Any

from django.db import models

from core.crypto import ROTATION_FIX, Undecryptable, decrypt, encrypt

__all__ = ["EncryptedTextField", "Undecryptable"]

log = logging.getLogger(__name__)


class EncryptedTextField(models.TextField):
    """A text field stored encrypted (Fernet); Python code sees plaintext."""

    def from_db_value(self, value: str | None, expression: Any, connection: Any) -> str | None:
        if value is None or value == "":
            return value
        try:
            return decrypt(value)
        except ValueError:
            log.error("A stored %s cannot be decrypted with the configured keys. %s", self.name, ROTATION_FIX)
            return Undecryptable(value)

    def get_prep_value(self, value: Any) -> Any:
        if isinstance(value, Undecryptable):
            return value.ciphertext
        value = super().get_prep_value(value)
        if value is None or value == "":
            return value
        return encrypt(value)
