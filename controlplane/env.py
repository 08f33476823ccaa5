"""Tiny helpers that read settings from the environment and refuse malformed values."""

import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def env_str(name: str, default: str = "") -> str:
    """Unset or empty (blank in an env file) is the default, as for env_bool and env_int: an empty
    `CELERY_QUEUE`, `REQUEST_LOG_STREAM` or `LOG_LEVEL` is never a name anyone meant."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    return raw


def env_bool(name: str, default: bool = False) -> bool:
    """Unset or empty (`SECURE_COOKIES=` left blank in an env file) is the default, as for env_int: an empty value
    must not turn a production default such as secure cookies off."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (true/false), got {raw!r}")


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from None


def env_list(name: str, default: list[str]) -> list[str]:
    """Comma-separated. Set but empty is an empty list, not the default (`METRICS_ALLOWED_NETWORKS=`: tokens only)."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_secret(name: str) -> str | None:
    """Read NAME, or the contents of the file named by NAME_FILE (Docker secrets)."""
    value = os.environ.get(name)
    if value:
        return value
    path = os.environ.get(f"{name}_FILE")
    if path:
        try:
            return Path(path).read_text().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE points at an unreadable file: {exc}") from None
    return None


def env_proxy_ssl_header(name: str) -> tuple[str, str] | None:
    """Read NAME as "Header-Name: value" (value defaults to https) into Django's SECURE_PROXY_SSL_HEADER.

    Unset or empty means no proxy header is trusted. Only set it when a proxy in front of every
    request overwrites that header: a client could otherwise claim https itself.
    """
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    header, _, value = raw.partition(":")
    header, value = header.strip(), (value.strip() or "https")
    if not header or not all(c.isalnum() or c == "-" for c in header):
        raise ImproperlyConfigured(f'{name} must look like "X-Forwarded-Proto: https", got {raw!r}')
    return "HTTP_" + header.upper().replace("-", "_"), value
