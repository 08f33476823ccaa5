"""Production mode: several gateway processes (manage.py run_gateway) sharing Redis and PostgreSQL."""

import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest
from django.db import connection

from chains.models import FallbackChain
from core.configbus import config_publish
from tests.servers import WEBSOCKET_UPGRADE, delete_namespace, free_port, production_env, until, wait_ready

pytestmark = pytest.mark.production

ROOT = Path(__file__).resolve().parents[2]
BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def gateways(world, redis_url):
    namespace = f"test:breaker:{uuid.uuid4().hex}"
    env = production_env(redis_url=redis_url, namespace=namespace)
    ports = [free_port() for _ in range(3)]
    procs = [
        subprocess.Popen(
            [sys.executable, "manage.py", "run_gateway", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for port in ports
    ]
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    try:
        for url, proc in zip(urls, procs, strict=True):
            wait_ready(url, proc)
        yield urls
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=30)
        delete_namespace(redis_url, namespace)


def _post(url, world, body=BODY):
    return httpx.post(
        f"{url}/v1/chat/completions", json=body, headers={"authorization": f"Bearer {world.secret}"}, timeout=10
    )


def test_three_gateways_agree_on_a_circuit(gateways, world):
    world.sim.behaviours["openai"] = world.sim.behaviour("openai").updated({"mode": "status", "status": 503})

    # Defaults: 5 failures among at least 10 requests in 60 s open the circuit; spread them over all three.
    statuses = [_post(gateways[i % 3], world).status_code for i in range(10)]
    for url in gateways:
        until(lambda url=url: _post(url, world).headers.get("x-vidai-fallback") == "true", 2, f"{url} falls back")
    later = [_post(gateways[i % 3], world) for i in range(9)]

    assert statuses == [503] * 10
    assert {r.headers["x-vidai-model"] for r in later} == {"claude"}
    assert world.sim.requests["openai"] == 10


def test_chain_saved_through_the_api_reaches_every_gateway(gateways, world, admin_user):
    from rest_framework.test import APIClient

    FallbackChain.objects.all().delete()
    config_publish()
    api = APIClient()
    api.force_authenticate(admin_user)
    world.sim.behaviours["openai"] = world.sim.behaviour("openai").updated({"mode": "status", "status": 503})
    for i in range(10):
        _post(gateways[i % 3], world)

    created = api.post(
        "/api/chains/",
        {
            "name": "late",
            "source_model": "gpt-4o",
            "entries": [{"model": "mistral"}],
            "scope": {"type": "global", "id": None},
            "enabled": True,
        },
        format="json",
    )
    saved_at = time.monotonic()
    served = [
        until(
            lambda url=url: _post(url, world).headers.get("x-vidai-model") == "mistral",
            1.0,
            f"{url} uses the new chain",
        )
        for url in gateways
    ]

    assert created.status_code == 201
    assert served == [True, True, True]
    assert time.monotonic() - saved_at < 3  # generous bound on the whole loop; each gateway had 1 s


def _maintenance(sql: str, params=()) -> None:
    """Run SQL from the maintenance database (a database cannot lock itself out)."""
    import psycopg

    db = connection.settings_dict
    with psycopg.connect(host=db["HOST"], port=db["PORT"], user=db["USER"], dbname="postgres", autocommit=True) as c:
        c.execute(sql, params)


def test_gateways_keep_serving_when_the_database_is_down(gateways, world):
    name = connection.settings_dict["NAME"]
    ours = connection.cursor().connection.info.backend_pid
    _maintenance(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
    _maintenance(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> %s", (name, ours)
    )
    try:
        config_publish()  # every gateway tries to rebuild, and fails
        for url in gateways:
            until(
                lambda url=url: httpx.get(f"{url}/readyz").json()["checks"]["config_stale"] == "db_unreachable",
                5,
                f"{url} notices",
            )
        readiness = [httpx.get(f"{url}/readyz").text for url in gateways]
        responses = [_post(url, world) for url in gateways]
    finally:
        _maintenance(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')

    assert [r.status_code for r in responses] == [200, 200, 200]
    assert [r.headers["x-vidai-model"] for r in responses] == ["gpt-4o"] * 3
    # Anyone may call /readyz: it names the failure with a code, never with the driver's message.
    assert [("Error" in text, "connection" in text, "database" in text) for text in readiness] == [
        (False, False, False)
    ] * 3


def test_production_gateways_answer_without_a_server_header_and_refuse_websocket_upgrades(gateways, world):
    # run_gateway serves through gateway.server's protocol with `--no-server-header --ws none`.
    answer = _post(gateways[0], world)
    upgrade = httpx.get(
        f"{gateways[0]}/v1/models",
        headers={"authorization": f"Bearer {world.secret}", **WEBSOCKET_UPGRADE},
        timeout=10,
    )

    assert answer.status_code == 200
    assert "server" not in answer.headers
    assert answer.headers["content-length"] == str(len(answer.content))
    assert upgrade.status_code != 101
