"""Rotating SECRET_KEY: real processes, a real SQLite database, keys switched between them."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.crypto import derived_key

ROOT = Path(__file__).resolve().parents[2]
OLD_KEY = "old-secret-key-" + "o" * 50
NEW_KEY = "new-secret-key-" + "n" * 50
READ_KEY = (
    "import django; django.setup(); from catalog.models import Provider; "
    "print(repr(Provider.objects.get(name='openai').api_key))"
)
CREATE = (
    "import django; django.setup(); from catalog.models import Provider; "
    "Provider.objects.create(name='openai', base_url='http://127.0.0.1:9/v1', api_key='sk-before-rotation')"
)

MAKE_USER = (
    "import django; django.setup(); from django.contrib.auth import get_user_model; "
    "get_user_model().objects.get_or_create(username='oncall', is_staff=True, is_superuser=True)"
)
TOKEN_PREFIX = (
    "import django; django.setup(); from catalog.models import ConsoleToken; "
    "print(ConsoleToken.objects.get(name='incident').prefix)"
)


def _run(db: Path, args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    keep = {
        k: v
        for k, v in os.environ.items()
        if k not in {"SECRET_KEY", "SECRET_KEY_FALLBACKS", "FIELD_ENCRYPTION_KEYS", "REDIS_URL", "DATABASE_URL"}
    }
    return subprocess.run(
        [sys.executable, *args],
        env={**keep, "DJANGO_SETTINGS_MODULE": "controlplane.settings", "DATABASE_URL": f"sqlite:///{db}", **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    """A migrated database holding one provider key encrypted under OLD_KEY."""
    path = tmp_path_factory.mktemp("rotation") / "db.sqlite3"
    migrated = _run(path, ["manage.py", "migrate", "--noinput"], SECRET_KEY=OLD_KEY)
    assert migrated.returncode == 0, migrated.stderr
    created = _run(path, ["-c", CREATE], SECRET_KEY=OLD_KEY)
    assert created.returncode == 0, created.stderr
    return path


def test_the_old_key_reads_its_secret(db):
    assert _run(db, ["-c", READ_KEY], SECRET_KEY=OLD_KEY).stdout.strip() == "'sk-before-rotation'"


def test_a_rotated_secret_key_fails_the_system_check_loudly(db):
    result = _run(db, ["manage.py", "check"], SECRET_KEY=NEW_KEY)

    assert result.returncode == 1
    assert "catalog.E001" in result.stderr
    assert "1 stored provider api_key(s) cannot be decrypted with the configured keys" in result.stderr
    assert "Set FIELD_ENCRYPTION_KEYS to the old Fernet key(s)" in result.stderr
    assert "SECRET_KEY_FALLBACKS" in result.stderr


def test_check_deploy_and_other_tags_do_not_read_stored_secrets(db):
    # check --deploy must not need (or connect to) the database; a tag other than stored_data neither.
    deploy = _run(db, ["manage.py", "check", "--deploy"], SECRET_KEY=NEW_KEY)
    tagged = _run(db, ["manage.py", "check", "--tag", "models"], SECRET_KEY=NEW_KEY)
    explicit = _run(db, ["manage.py", "check", "--tag", "stored_data"], SECRET_KEY=NEW_KEY)

    # (--deploy itself reports this test environment's insecure settings; only E001 matters here.)
    assert "System check identified" in deploy.stderr
    assert "catalog.E001" not in deploy.stdout + deploy.stderr
    assert tagged.returncode == 0, tagged.stderr
    assert "catalog.E001" not in tagged.stdout + tagged.stderr
    assert explicit.returncode == 1
    assert "catalog.E001" in explicit.stderr


def test_maintenance_commands_still_work_during_an_incident(db):
    # An undecryptable key must not block migrate or the token commands an operator needs meanwhile.
    migrate = _run(db, ["manage.py", "migrate", "--noinput"], SECRET_KEY=NEW_KEY)
    user = _run(db, ["-c", MAKE_USER], SECRET_KEY=NEW_KEY)
    created = _run(db, ["manage.py", "create_api_token", "oncall", "--name", "incident"], SECRET_KEY=NEW_KEY)
    prefix = _run(db, ["-c", TOKEN_PREFIX], SECRET_KEY=NEW_KEY).stdout.strip()
    revoked = _run(db, ["manage.py", "revoke_api_token", prefix], SECRET_KEY=NEW_KEY)

    for result in (migrate, user, created, revoked):
        assert result.returncode == 0, result.stderr
    assert "catalog.E001" not in migrate.stderr
    assert revoked.stdout.startswith(f"Revoked API token {prefix} (incident) of oncall.")


def test_run_gateway_and_run_embedded_refuse_to_start(db):
    # Both run the system checks before serving (exit 1 before binding a port).
    gateway = _run(db, ["manage.py", "run_gateway", "--port", "1"], SECRET_KEY=NEW_KEY)
    embedded = _run(db, ["manage.py", "run_embedded", "--port", "1"], SECRET_KEY=NEW_KEY)

    for result in (gateway, embedded):
        assert result.returncode == 1
        assert "catalog.E001" in result.stderr


@pytest.mark.parametrize("program", ["worker", "beat"])
def test_celery_refuses_to_start(db, program, tmp_path):
    args = ["-m", "celery", "-A", "controlplane", program, "--loglevel", "warning"]
    if program == "beat":
        args += ["--schedule", str(tmp_path / "celerybeat-schedule")]
    result = _run(db, args, SECRET_KEY=NEW_KEY)

    assert result.returncode == 1
    assert "catalog.E001" in result.stderr


def test_the_old_secret_key_as_fallback_recovers_the_secret(db):
    env = {"SECRET_KEY": NEW_KEY, "SECRET_KEY_FALLBACKS": OLD_KEY}

    assert _run(db, ["manage.py", "check"], **env).returncode == 0
    assert _run(db, ["-c", READ_KEY], **env).stdout.strip() == "'sk-before-rotation'"


def test_the_old_fernet_key_in_field_encryption_keys_recovers_the_secret(db):
    new_fernet = derived_key("an unrelated new fernet source")
    env = {"SECRET_KEY": NEW_KEY, "FIELD_ENCRYPTION_KEYS": f"{new_fernet},{derived_key(OLD_KEY)}"}

    check = _run(db, ["manage.py", "check"], **env)

    assert check.returncode == 0, check.stderr
    assert _run(db, ["-c", READ_KEY], **env).stdout.strip() == "'sk-before-rotation'"
