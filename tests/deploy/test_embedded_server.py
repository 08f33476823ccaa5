"""`manage.py run_embedded` (what `make run` starts), as a real process on real sockets: what its server says."""

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.servers import WEBSOCKET_UPGRADE, free_port, wait_ready

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.db_independent  # its own SQLite file, whatever the pass's database


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """run_embedded on free ports over a migrated SQLite file; yields its URL and the file its stderr goes to."""
    work = tmp_path_factory.mktemp("embedded")
    keep = {k: v for k, v in os.environ.items() if k not in {"REDIS_URL", "DATABASE_URL", "CONTROLPLANE_VAR_DIR"}}
    env = {
        **keep,
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
        "DATABASE_URL": f"sqlite:///{work / 'db.sqlite3'}",
        "CONTROLPLANE_VAR_DIR": str(work),
    }
    migrated = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert migrated.returncode == 0, migrated.stderr
    port, stderr = free_port(), work / "stderr.log"
    with stderr.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "run_embedded", "--port", str(port), "--simulator-port", str(free_port())],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc, path="/healthz", timeout=60, log=stderr)
        yield url, stderr
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_no_answer_names_the_server(embedded: tuple[str, Path]) -> None:
    url, _ = embedded
    gateway = httpx.get(f"{url}/healthz", timeout=10)
    console = httpx.get(f"{url}/login/", timeout=10)

    assert (gateway.status_code, console.status_code) == (200, 200)
    assert "server" not in gateway.headers
    assert "server" not in console.headers


def test_an_upgrade_request_is_answered_as_http_and_logs_nothing(embedded: tuple[str, Path]) -> None:
    url, stderr = embedded
    answer = httpx.get(f"{url}/v1/models", headers=WEBSOCKET_UPGRADE, timeout=10)

    assert answer.status_code == 401  # the gateway's own answer: no key was sent
    assert answer.json()["error"]["code"] == "missing_api_key"
    assert "upgrade" not in stderr.read_text().lower()
