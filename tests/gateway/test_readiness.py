"""/readyz says what is wrong with short codes, never exception text; /metrics counts the request-log pipeline."""

import uuid

import httpx
import pytest
import redis

from gateway.app import GatewayApp
from gateway.config import ConfigHolder
from gateway.logsink import LogSink
from requestlogs.stream import StreamKeys
from tests.requestlogs.test_ingest import database_down
from tests.servers import serve


def test_readyz_reports_a_stale_config_as_a_code_without_the_exception(gateway, world):
    with database_down():
        assert gateway.app.config.reload() is False
    error = gateway.app.config.last_error

    response = httpx.get(f"{gateway.url}/readyz")

    body = response.json()
    assert response.status_code == 200
    assert body["checks"] == {
        "config_snapshot": "ok",
        "config_stale": "db_unreachable",
        "request_log_writes": "ok",
    }
    assert (body["status"], body["ready"]) == ("ready", True)
    assert error.split(":")[0] == "OperationalError"
    assert "OperationalError" not in response.text and error.split(": ", 1)[1] not in response.text


def test_metrics_expose_the_sink_counters(gateway, world):
    gateway.sink.dropped = 4  # as if the buffer had overflowed four times

    response = httpx.get(f"{gateway.url}/metrics")

    samples = {line.split()[0]: line.split()[1] for line in response.text.splitlines() if not line.startswith("#")}
    assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert samples == {
        "controlplane_requestlog_buffered": "0",
        "controlplane_requestlog_buffer_dropped_total": "4",
        "controlplane_requestlog_spilled_total": "0",
        "controlplane_requestlog_replayed_total": "0",
    }


@pytest.mark.redis
def test_metrics_and_readyz_read_the_stream_counters_from_redis(world, redis_url):
    stream = f"test:readiness:{uuid.uuid4().hex}"
    keys = StreamKeys(stream)
    client = redis.Redis.from_url(redis_url)
    client.set(keys.trimmed, 12)
    client.set(keys.dead_lettered, 2)
    client.xadd(stream, {"r": b"{}"})
    sink = LogSink(redis_url=redis_url, stream_key=stream, flush_seconds=0.05)
    app = GatewayApp(config=ConfigHolder(), sink=sink)
    try:
        with serve(app, lifespan=True) as url:
            metrics = httpx.get(f"{url}/metrics").text
            ready = httpx.get(f"{url}/readyz").json()
    finally:
        client.delete(stream, keys.trimmed, keys.dead_lettered)

    samples = {line.split()[0]: line.split()[1] for line in metrics.splitlines() if not line.startswith("#")}
    assert {k: v for k, v in samples.items() if k.endswith(("_up", "_length", "trimmed_total", "lettered_total"))} == {
        "controlplane_requestlog_redis_up": "1",
        "controlplane_requestlog_stream_length": "1",
        "controlplane_requestlog_trimmed_total": "12",
        "controlplane_requestlog_dead_lettered_total": "2",
    }
    assert ready["request_logs"] == {
        "buffered": 0,
        "buffer_dropped_total": 0,
        "spilled_total": 0,
        "replayed_total": 0,
        "redis_up": 1,
        "stream_length": 1,
        "trimmed_total": 12,
        "dead_lettered_total": 2,
    }
