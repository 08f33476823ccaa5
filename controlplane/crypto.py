"""Symmetric encryption for secrets at rest (provider API keys).

Uses Fernet (AES-128-CBC + HMAC) from `cryptography`. Keys come from
FIELD_ENCRYPTION_KEYS (newest first, so old keys still decrypt during rotation);
when unset, one key is derived from SECRET_KEY with HKDF.
"""

import base64
from functools import cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings


@cache
def _fernet() -> MultiFernet:
    keys = list(settings.FIELD_ENCRYPTION_KEYS)
    if not keys:
        derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=b"controlplane-fields", info=b"fernet").derive(
            settings.SECRET_KEY.encode()
        )
        keys = [base64.urlsafe_b64encode(derived).decode()]
    return MultiFernet([Fernet(k.encode()) for k in keys])


def encrypt(plaintext: str) -> str:
    return _fernet().encrypt(plaintext.encode()).decode()


def decrypt(token: str) -> str:
    try:
        return _fernet().decrypt(token.encode()).decode()
    except InvalidToken:
        raise ValueError("Secret cannot be decrypted with the configured keys.") from None
