"""Gateway key format and hashing (shared by the catalog and the gateway)."""

import hashlib
import secrets

KEY_PREFIX = "cp-"


def key_generate() -> tuple[str, str, str]:
    """A new key: (full secret shown once, visible prefix, SHA-256 hex stored)."""
    ident = secrets.token_hex(4)
    secret = f"{KEY_PREFIX}{ident}-{secrets.token_urlsafe(32)}"
    return secret, f"{KEY_PREFIX}{ident}", key_hash(secret)


def key_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()
