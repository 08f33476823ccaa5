"""Settings read from the environment: run Django in a subprocess with a chosen environment."""

import os
import subprocess
import sys
from pathlib import Path

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
