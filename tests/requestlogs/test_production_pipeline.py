"""Production mode end to end: gateway process → Redis stream → Celery worker + beat → Request Logs page.

Real processes: `manage.py run_gateway` (its log sink appends to a Redis stream of this test's own) and
`celery worker -B` (beat runs `requestlogs.ingest` every second). The test waits, bounded, for the row to
show up on the page and in the API; how long that takes is measured by bench/request_log_freshness.py,
never asserted here.
"""

import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest
import redis

from tests.gateway.conftest import sim, world  # noqa: F401 - the gateway test fixtures
from tests.servers import delete_namespace, free_port, production_env, until

pytestmark = [pytest.mark.production, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def pipeline(world, redis_url, tmp_path):  # noqa: F811 - pytest fixture by name
    namespace = f"test:pipeline:{uuid.uuid4().hex}"
    env = production_env(redis_url=redis_url, namespace=namespace)
    port = free_port()
    gateway = subprocess.Popen(
        [sys.executable, "manage.py", "run_gateway", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    worker = subprocess.Popen(
        [
            sys.executable, "-m", "celery", "-A", "controlplane", "worker", "--beat",
            "--schedule", str(tmp_path / "beat-schedule"), "--pool=threads", "--concurrency=2",
            "--loglevel=WARNING", "--without-heartbeat", "--without-gossip", "--without-mingle",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:

        def ready():
            for proc in (gateway, worker):
                if proc.poll() is not None:
                    raise AssertionError(f"process exited: {proc.stderr.read().decode()[-2000:]}")
            try:
                return httpx.get(f"{url}/readyz", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        until(ready, 30, "gateway ready")
        yield url, env["REQUEST_LOG_STREAM"]
    finally:
        for proc in (gateway, worker):
            proc.terminate()
        for proc in (gateway, worker):
            proc.wait(timeout=30)
        delete_namespace(redis_url, namespace)


def test_a_gateway_request_reaches_the_page_and_the_api_through_the_stream(pipeline, world, admin_client, redis_url):  # noqa: F811
    url, stream = pipeline
    world.sim.behaviours["openai"] = world.sim.behaviour("openai").updated({"mode": "status", "status": 503})

    response = httpx.post(
        f"{url}/v1/chat/completions", json=BODY, headers={"authorization": f"Bearer {world.secret}"}, timeout=10
    )
    request_id = response.headers["x-vidai-request-id"]

    def on_page():
        return request_id in admin_client.get("/logs/", {"status": "5xx"}).content.decode()

    until(on_page, 30, "the request on the Request Logs page")
    body = admin_client.get(f"/api/request-logs/{request_id}/").json()
    assert response.status_code == 503
    assert (body["status"], body["served_provider"], body["served_model"], body["key"]["id"]) == (
        503,
        "openai",
        "gpt-4o",
        world.key.pk,
    )
    assert body["attempts"] == [
        {
            "provider": "openai",
            "model": "gpt-4o",
            "status": 503,
            "error": None,
            "duration_ms": body["attempts"][0]["duration_ms"],
            # No resilience policy on this route: none of its fields are recorded.
            **dict.fromkeys(("next", "class", "retry_after", "malformed_events", "continuation", "usage")),
        }
    ]
    # What the gateway appended is acknowledged and removed from the stream once committed.
    until(lambda: redis.Redis.from_url(redis_url).xlen(stream) == 0, 30, "the stream drained")
