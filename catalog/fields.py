import logging
from typing import Any

from django.db import models

from controlplane.crypto import decrypt, encrypt

log = logging.getLogger(__name__)


class Undecryptable(str):
    """A stored secret the configured keys cannot decrypt (wrong or rotated-away key).

    Reads as "" so nothing leaks or crashes; saving it back keeps the original ciphertext,
    so a later fix of FIELD_ENCRYPTION_KEYS recovers it.
    """

    ciphertext: str

    def __new__(cls, ciphertext: str) -> "Undecryptable":
        obj = super().__new__(cls, "")
        obj.ciphertext = ciphertext
        return obj


class EncryptedTextField(models.TextField):
    """A text field stored encrypted (Fernet); Python code sees plaintext."""

    def from_db_value(self, value: str | None, expression: Any, connection: Any) -> str | None:
        if value is None or value == "":
            return value
        try:
            return decrypt(value)
        except ValueError:
            log.error("A stored %s cannot be decrypted with the configured keys", self.name)
            return Undecryptable(value)

    def get_prep_value(self, value: Any) -> Any:
        if isinstance(value, Undecryptable):
            return value.ciphertext
        value = super().get_prep_value(value)
        if value is None or value == "":
            return value
        return encrypt(value)
