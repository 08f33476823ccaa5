"""Gateway key format and hashing (shared by the catalog and the gateway)."""

import hashlib
import secrets

KEY_PREFIX = "cp-"
# Console API tokens have the same shape with their own prefix, so the two are never confused.
CONSOLE_TOKEN_PREFIX = "cpt-"


def key_generate(prefix: str = KEY_PREFIX) -> tuple[str, str, str]:
    """A new key: (full secret shown once, visible prefix, SHA-256 hex stored)."""
    ident = secrets.token_hex(4)
    secret = f"{prefix}{ident}-{secrets.token_urlsafe(32)}"
    return secret, f"{prefix}{ident}", key_hash(secret)


def key_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()
