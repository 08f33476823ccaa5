"""`manage.py check --deploy` on production settings, and the proxy settings it relies on."""

import os
import secrets
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from django.test import override_settings

from tests.servers import serve

ROOT = Path(__file__).resolve().parents[2]
SECURITY_VARS = {
    "DEBUG",
    "SECRET_KEY",
    "DATABASE_URL",
    "REDIS_URL",
    "SECURE_COOKIES",
    "SECURE_SSL_REDIRECT",
    "SECURE_PROXY_SSL_HEADER",
    "SECURE_HSTS_SECONDS",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS",
    "SECURE_HSTS_PRELOAD",
    # Set by the test run itself (pytest-django); a deployment never has it.
    "DJANGO_ALLOW_ASYNC_UNSAFE",
}


def _production(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k not in SECURITY_VARS}
    return {
        **base,
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
        "DEBUG": "false",
        "SECRET_KEY": secrets.token_urlsafe(50),
        # check --deploy never connects: any PostgreSQL URL and Redis URL make production settings.
        "DATABASE_URL": "postgres://controlplane@127.0.0.1:5432/deploy_check_unused",
        "REDIS_URL": "redis://127.0.0.1:6379/0",
        **extra,
    }


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )


def _check_deploy(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return _run(["manage.py", "check", "--deploy", "--fail-level", "WARNING"], env)


def test_deploy_check_passes_on_production_settings_with_nothing_silenced():
    result = _check_deploy(_production())

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "System check identified no issues (0 silenced)."
    assert result.stderr == ""


@pytest.mark.parametrize(
    ("env", "warning"),
    [
        ({"SECURE_HSTS_SECONDS": "0"}, "security.W004"),
        ({"SECURE_HSTS_INCLUDE_SUBDOMAINS": "false"}, "security.W005"),
        ({"SECURE_HSTS_PRELOAD": "false"}, "security.W021"),
        ({"SECURE_SSL_REDIRECT": "false"}, "security.W008"),
        ({"SECURE_COOKIES": "false"}, "security.W012"),
    ],
)
def test_deploy_check_fails_when_a_setting_is_turned_off(env, warning):
    result = _check_deploy(_production(**env))

    assert result.returncode == 1
    assert warning in result.stderr


PROBE = (
    "import django; django.setup(); from django.conf import settings as s; "
    "print(s.SECURE_SSL_REDIRECT, s.SECURE_HSTS_SECONDS, s.SESSION_COOKIE_SECURE, s.SECURE_PROXY_SSL_HEADER)"
)


def test_embedded_mode_keeps_plain_http(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in SECURITY_VARS}
    env.update(DJANGO_SETTINGS_MODULE="controlplane.settings", CONTROLPLANE_VAR_DIR=str(tmp_path))

    assert _run(["-c", PROBE], env).stdout.strip() == "False 0 False None"


def test_proxy_header_is_read_from_the_environment():
    result = _run(["-c", PROBE], _production(SECURE_PROXY_SSL_HEADER="X-Forwarded-Proto: https"))

    assert result.stdout.strip() == "True 31536000 True ('HTTP_X_FORWARDED_PROTO', 'https')"


def test_malformed_proxy_header_is_refused():
    result = _run(["-c", PROBE], _production(SECURE_PROXY_SSL_HEADER="X Forwarded Proto"))

    assert result.returncode != 0
    assert 'SECURE_PROXY_SSL_HEADER must look like "X-Forwarded-Proto: https"' in result.stderr


PRODUCTION_TLS = {
    "SECURE_SSL_REDIRECT": True,
    "SECURE_PROXY_SSL_HEADER": ("HTTP_X_FORWARDED_PROTO", "https"),
    "SECURE_HSTS_SECONDS": 31_536_000,
    "SECURE_HSTS_INCLUDE_SUBDOMAINS": True,
    "SECURE_HSTS_PRELOAD": True,
}


@pytest.mark.django_db
@override_settings(**PRODUCTION_TLS)
def test_behind_the_proxy_http_is_redirected_and_https_gets_hsts(client):
    plain = client.get("/login/", headers={"host": "localhost"})
    proxied = client.get("/login/", headers={"host": "localhost", "x-forwarded-proto": "https"})

    assert plain.status_code == 301
    assert plain["Location"] == "https://localhost/login/"
    assert proxied.status_code == 200
    assert proxied["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains; preload"


@pytest.mark.django_db(transaction=True)
def test_gateway_health_endpoints_are_never_redirected():
    """Embedded mode routes /healthz and /readyz to the gateway before Django's SSL redirect runs."""
    from django.core.handlers.asgi import ASGIHandler

    from controlplane.asgi import EmbeddedRouter
    from gateway.app import GatewayApp
    from gateway.config import ConfigHolder
    from gateway.logsink import LogSink

    with override_settings(**PRODUCTION_TLS):
        router = EmbeddedRouter(ASGIHandler(), GatewayApp(config=ConfigHolder(), sink=LogSink()))
        with serve(router, lifespan=True) as url:
            health = httpx.get(f"{url}/healthz", timeout=10)
            ready = httpx.get(f"{url}/readyz", timeout=10)
            console = httpx.get(f"{url}/login/", timeout=10)

    # Answered by the gateway (200, or 503 while it is not ready), never a redirect to https.
    assert health.status_code == 200
    assert ready.status_code in (200, 503) and "location" not in ready.headers
    assert console.status_code == 301
    assert console.headers["location"].startswith("https://")
