"""Settings read from the environment: run Django in a subprocess with a chosen environment."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = "import django; django.setup(); from django.conf import settings; print(settings.{attr})"


def _run(env: dict[str, str], attr: str = "EMBEDDED") -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "REDIS_URL", "DATABASE_URL", "DEBUG"}}
    base["DJANGO_SETTINGS_MODULE"] = "controlplane.settings"
    return subprocess.run(
        [sys.executable, "-c", PROBE.format(attr=attr)],
        env={**base, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_production_refuses_to_start_without_secret_key(tmp_path):
    result = _run({"REDIS_URL": "redis://127.0.0.1:6379/0", "CONTROLPLANE_VAR_DIR": str(tmp_path)})

    assert result.returncode != 0
    assert "SECRET_KEY (or SECRET_KEY_FILE) must be set" in result.stderr


def test_embedded_mode_generates_secret_key_once(tmp_path):
    first = _run({"CONTROLPLANE_VAR_DIR": str(tmp_path)}, attr="SECRET_KEY")
    second = _run({"CONTROLPLANE_VAR_DIR": str(tmp_path)}, attr="SECRET_KEY")

    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout
    assert len(first.stdout.strip()) >= 50
    assert (tmp_path / "secret_key").read_text().strip() == first.stdout.strip()
    assert (tmp_path / "secret_key").stat().st_mode & 0o077 == 0


def test_secret_key_file_is_read(tmp_path):
    secret = tmp_path / "key"
    secret.write_text("from-a-file-" + "x" * 40 + "\n")

    result = _run({"REDIS_URL": "redis://127.0.0.1:6379/0", "SECRET_KEY_FILE": str(secret)}, attr="SECRET_KEY")

    assert result.stdout.strip() == "from-a-file-" + "x" * 40


def test_malformed_boolean_is_refused(tmp_path):
    result = _run({"DEBUG": "maybe", "CONTROLPLANE_VAR_DIR": str(tmp_path)})

    assert result.returncode != 0
    assert "DEBUG must be a boolean" in result.stderr


def test_database_url_selects_postgres(tmp_path):
    result = _run(
        {"DATABASE_URL": "postgres://u@db.example:5432/cp", "CONTROLPLANE_VAR_DIR": str(tmp_path)},
        attr="DATABASES['default']['ENGINE']",
    )

    assert result.stdout.strip() == "django.db.backends.postgresql"


def test_postgres_connections_give_up_after_a_connect_timeout(tmp_path):
    """Five seconds unless DB_CONNECT_TIMEOUT or the URL's own `connect_timeout` says otherwise: without one, libpq
    waited as long as the kernel did for a database whose packets are dropped."""
    attr = "DATABASES['default']['OPTIONS']['connect_timeout']"
    url = "postgres://u@db.example:5432/cp"
    default = _run({"DATABASE_URL": url, "CONTROLPLANE_VAR_DIR": str(tmp_path)}, attr=attr)
    from_env = _run({"DATABASE_URL": url, "DB_CONNECT_TIMEOUT": "2", "CONTROLPLANE_VAR_DIR": str(tmp_path)}, attr=attr)
    from_url = _run({"DATABASE_URL": url + "?connect_timeout=9", "CONTROLPLANE_VAR_DIR": str(tmp_path)}, attr=attr)

    assert [r.stdout.strip() for r in (default, from_env, from_url)] == ["5", "2", "9"]


def test_malformed_field_encryption_key_is_refused_without_echoing_it(tmp_path):
    """A value that is not a Fernet key (a password, a truncated key) used to load: every stored provider key then
    read as "Cannot be decrypted" with a hint blaming a SECRET_KEY change, and saving a provider failed with a 500."""
    good = "A" * 43 + "="
    result = _run({"FIELD_ENCRYPTION_KEYS": f"{good},hunter2-not-a-key", "CONTROLPLANE_VAR_DIR": str(tmp_path)})

    assert result.returncode != 0
    assert "FIELD_ENCRYPTION_KEYS: entry 2 is not a Fernet key" in result.stderr
    assert "hunter2" not in result.stderr


def test_valid_field_encryption_keys_load(tmp_path):
    keys = ["A" * 43 + "=", "B" * 43 + "="]
    result = _run(
        {"FIELD_ENCRYPTION_KEYS": " , ".join(keys), "CONTROLPLANE_VAR_DIR": str(tmp_path)}, attr="FIELD_ENCRYPTION_KEYS"
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == repr(keys)


def test_negative_hsts_max_age_is_refused(tmp_path):
    """-1 passed `check --deploy` (it only asks for a non-zero value) and sent `max-age=-1`, which browsers ignore:
    no HSTS at all."""
    result = _run({"SECURE_HSTS_SECONDS": "-1", "CONTROLPLANE_VAR_DIR": str(tmp_path)})

    assert result.returncode != 0
    assert "SECURE_HSTS_SECONDS must be 0 or more" in result.stderr


@pytest.mark.parametrize(
    "name", ["REQUEST_LOG_RETENTION_DAYS", "REQUEST_AGGREGATE_MINUTE_DAYS", "REQUEST_AGGREGATE_HOUR_DAYS"]
)
@pytest.mark.parametrize("value", ["0", "-3"])
def test_retention_below_one_day_is_refused(tmp_path, name, value):
    """0 or less made the hourly retention job's cutoff now (or later): every request log or aggregate deleted."""
    result = _run({name: value, "CONTROLPLANE_VAR_DIR": str(tmp_path)})

    assert result.returncode != 0
    assert f"{name} must be at least 1" in result.stderr


PRODUCTION = {"REDIS_URL": "redis://127.0.0.1:6379/0", "SECRET_KEY": "k" * 10 + "0123456789" * 5}


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_boolean_keeps_its_default(tmp_path, value):
    """`SECURE_COOKIES=` (an env file or manifest entry left blank) read as false: production cookies went out over
    plain http. Empty now means the default, as it already did for integers."""
    env = {**PRODUCTION, "CONTROLPLANE_VAR_DIR": str(tmp_path)}
    result = _run(
        {**env, "SECURE_COOKIES": value, "SECURE_SSL_REDIRECT": value, "SECURE_HSTS_PRELOAD": value},
        attr="SESSION_COOKIE_SECURE, settings.CSRF_COOKIE_SECURE, settings.SECURE_SSL_REDIRECT, "
        "settings.SECURE_HSTS_PRELOAD",
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True True True True"


@pytest.mark.parametrize(
    ("name", "attr", "default"),
    [
        ("CELERY_QUEUE", "CELERY_TASK_DEFAULT_QUEUE", "celery"),
        ("REQUEST_LOG_STREAM", "REQUEST_LOG_STREAM", "cp:requestlogs"),
        ("BREAKER_REDIS_NAMESPACE", "BREAKER_REDIS_NAMESPACE", "cp:breaker"),
        ("SIMULATOR_URL", "SIMULATOR_URL", "http://127.0.0.1:8001"),
        ("ALERT_CONSOLE_URL", "ALERT_CONSOLE_URL", "http://127.0.0.1:8000"),
        ("ENVIRONMENT_NAME", "ENVIRONMENT_NAME", "production"),
    ],
)
def test_an_empty_text_variable_keeps_its_default(tmp_path, name, attr, default):
    """`CELERY_QUEUE=` left blank in an env file made the queue's name empty (the stream's, the namespace's...)."""
    result = _run({**PRODUCTION, "CONTROLPLANE_VAR_DIR": str(tmp_path), name: " "}, attr=attr)

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == default


def test_an_empty_log_level_keeps_info(tmp_path):
    result = _run({**PRODUCTION, "CONTROLPLANE_VAR_DIR": str(tmp_path), "LOG_LEVEL": ""}, attr="LOGGING['root']")

    assert result.returncode == 0, result.stderr
    assert "'level': 'INFO'" in result.stdout


def test_empty_allowed_hosts_is_refused(tmp_path):
    """Set but empty, Django answers every request 400 once DEBUG is off: refused at start instead."""
    result = _run({**PRODUCTION, "CONTROLPLANE_VAR_DIR": str(tmp_path), "ALLOWED_HOSTS": ""})

    assert result.returncode != 0
    assert "ALLOWED_HOSTS is set but empty" in result.stderr


def test_an_empty_network_list_still_means_none(tmp_path):
    """Lists keep their documented reading: `METRICS_ALLOWED_NETWORKS=` is tokens only, not the loopback default."""
    result = _run(
        {**PRODUCTION, "CONTROLPLANE_VAR_DIR": str(tmp_path), "METRICS_ALLOWED_NETWORKS": ""},
        attr="METRICS_ALLOWED_NETWORKS",
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
