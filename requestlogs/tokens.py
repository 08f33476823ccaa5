"""Opaque, tamper-proof tokens for what the Request Logs URLs must carry but a reader must not see.

A paging cursor has to name a row's (created_at, id), and the follow poll the newest id it has shown.
Row ids count every request of every user, so a `user` who could read them would learn how much
traffic others send. Tokens are encrypted and authenticated (AES-GCM, key derived from SECRET_KEY),
so they reveal nothing and an edited one is refused.
"""

import base64
import binascii
import os
from functools import cache

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

_NONCE = 12


@cache
def _aead() -> AESGCM:
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=b"controlplane-requestlogs", info=b"url-tokens").derive(
        settings.SECRET_KEY.encode()
    )
    return AESGCM(key)


def seal(text: str, *, purpose: str) -> str:
    """`text` encrypted for `purpose` (a token sealed for one purpose does not open for another)."""
    nonce = os.urandom(_NONCE)
    sealed = _aead().encrypt(nonce, text.encode(), purpose.encode())
    return base64.urlsafe_b64encode(nonce + sealed).decode().rstrip("=")


def unseal(token: str, *, purpose: str) -> str | None:
    """The text, or None for a token that is malformed, altered or sealed for another purpose."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        return _aead().decrypt(raw[:_NONCE], raw[_NONCE:], purpose.encode()).decode()
    except (ValueError, binascii.Error, InvalidTag, UnicodeDecodeError):
        return None
