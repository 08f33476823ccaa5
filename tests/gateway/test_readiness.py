"""/readyz says what is wrong with short codes, never exception text (/metrics: test_metrics.py)."""

import uuid

import httpx
import pytest
import redis

from gateway.app import GatewayApp
from gateway.config import ConfigHolder
from gateway.logsink import LogSink
from requestlogs.stream import StreamKeys
from tests.requestlogs.test_ingest import database_down
from tests.requestlogs.test_stream_batches import append_records
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


@pytest.mark.redis
def test_readyz_reads_the_stream_counters_from_redis(world, redis_url):
    stream = f"test:readiness:{uuid.uuid4().hex}"
    keys = StreamKeys(stream)
    client = redis.Redis.from_url(redis_url)
    client.set(keys.trimmed, 12)
    client.set(keys.dead_lettered, 2)
    append_records(redis_url, stream, [{"request_id": "a"}, {"request_id": "b"}])  # another gateway's records
    sink = LogSink(redis_url=redis_url, stream_key=stream, flush_seconds=0.05)
    app = GatewayApp(config=ConfigHolder(), sink=sink)
    try:
        with serve(app, lifespan=True) as url:
            ready = httpx.get(f"{url}/readyz").json()
    finally:
        client.delete(stream, keys.records, keys.trimmed, keys.dead_lettered)

    assert ready["request_logs"] == {
        "buffered": 0,
        "buffer_dropped_total": 0,
        "spilled_total": 0,
        "replayed_total": 0,
        "redis_up": 1,
        "stream_length": 2,  # records, in one entry
        "trimmed_total": 12,
        "dead_lettered_total": 2,
    }
