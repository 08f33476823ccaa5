"""Symmetric encryption for secrets at rest (provider API keys).

Uses Fernet (AES-128-CBC + HMAC) from `cryptography`. Encryption uses the first key of
FIELD_ENCRYPTION_KEYS, or, when that is unset, a key derived from SECRET_KEY with HKDF.
Decryption tries FIELD_ENCRYPTION_KEYS (newest first), then the keys derived from SECRET_KEY
and from each SECRET_KEY_FALLBACKS entry, so rotating SECRET_KEY keeps old secrets readable
while the previous key is listed as a fallback.
"""

import base64
from functools import cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

# What an operator must do when a stored secret no longer decrypts; shown by the system check,
# the gateway's log and the upstream error.
ROTATION_FIX = (
    "SECRET_KEY (or FIELD_ENCRYPTION_KEYS) changed since these secrets were saved. Set "
    "FIELD_ENCRYPTION_KEYS to the old Fernet key(s) after the new one, or put the previous SECRET_KEY "
    "in SECRET_KEY_FALLBACKS, then restart."
)


def credential_unavailable_message(provider_name: str) -> str:
    """What a gateway client is told when a provider's stored key cannot be decrypted (502)."""
    return (
        f"The API key of provider {provider_name} cannot be decrypted by the gateway, so it was not called. "
        "An administrator must restore the encryption keys (see the gateway log)."
    )


class Undecryptable(str):
    """A stored secret the configured keys cannot decrypt (wrong or rotated-away key).

    Reads as "" so nothing leaks; saving it back keeps the original ciphertext, so a later fix of
    the keys recovers it. Code that would *use* the secret (the gateway) must check for it and
    refuse: an empty credential is never sent upstream.
    """

    ciphertext: str

    def __new__(cls, ciphertext: str) -> "Undecryptable":
        obj = super().__new__(cls, "")
        obj.ciphertext = ciphertext
        return obj


def derived_key(secret_key: str) -> str:
    """The Fernet key derived from a SECRET_KEY (what encrypts secrets when FIELD_ENCRYPTION_KEYS is unset)."""
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=b"controlplane-fields", info=b"fernet").derive(
        secret_key.encode()
    )
    return base64.urlsafe_b64encode(derived).decode()


@cache
def _fernet() -> MultiFernet:
    keys = list(settings.FIELD_ENCRYPTION_KEYS)
    for secret_key in [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]:
        key = derived_key(secret_key)
        if key not in keys:
            keys.append(key)
    return MultiFernet([Fernet(k.encode()) for k in keys])


def encrypt(plaintext: str) -> str:
    return _fernet().encrypt(plaintext.encode()).decode()


def decrypt(token: str) -> str:
    try:
        return _fernet().decrypt(token.encode()).decode()
    except InvalidToken:
        raise ValueError("Secret cannot be decrypted with the configured keys.") from None


def can_decrypt(token: str) -> bool:
    try:
        decrypt(token)
    except ValueError:
        return False
    return True
