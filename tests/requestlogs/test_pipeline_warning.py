"""Admins are told on the Request Logs page when records never reached it (counted in Redis)."""

import re
import time
import uuid

import pytest
import redis

from requestlogs.stream import StreamKeys

pytestmark = [pytest.mark.redis, pytest.mark.django_db]


@pytest.fixture
def losses(settings, redis_url):
    """Production settings for the page's pipeline counters, on a stream of this test's own."""
    stream = f"test:pipeline-warning:{uuid.uuid4().hex}"
    settings.REDIS_URL, settings.REQUEST_LOG_STREAM = redis_url, stream
    keys = StreamKeys(stream)
    client = redis.Redis.from_url(redis_url)
    yield client, keys
    client.delete(keys.trimmed, keys.dropped, keys.lost_since, keys.dead_lettered)


def _warning(response) -> str | None:
    pattern = r'<p class="alert alert-warning" id="pipeline-losses"[^>]*>(.*?)</p>'
    match = re.search(pattern, response.content.decode(), re.S)
    return " ".join(match.group(1).split()) if match else None


def test_admins_see_how_many_records_were_dropped_and_since_when(losses, admin_client):
    client, keys = losses
    client.set(keys.trimmed, 1200)
    client.set(keys.dropped, 34)
    client.set(keys.lost_since, int(time.time()) - 600)
    client.set(keys.dead_lettered, 1)

    text = _warning(admin_client.get("/logs/"))

    assert text is not None
    assert re.sub(r"<[^>]+>", "", text) == (
        "1,234 request-log records were dropped (the first 10 min ago): the Redis stream reached its cap or a "
        "gateway's buffer filled during an outage, and they are not on this page. 1 record could not be "
        "stored and was set aside in the dead-letter stream."
    )


def test_the_warning_is_in_the_htmx_page_region_too(losses, admin_client):
    client, keys = losses
    client.set(keys.trimmed, 1)

    response = admin_client.get("/logs/", headers={"HX-Request": "true", "HX-Target": "log-page"})

    assert "1 request-log record was dropped:" in re.sub(r"<[^>]+>", "", _warning(response) or "")


def test_other_roles_and_a_clean_pipeline_show_no_warning(losses, admin_client, bi_client, user_client):
    client, keys = losses
    clean = _warning(admin_client.get("/logs/"))
    client.set(keys.trimmed, 5)

    assert (clean, _warning(bi_client.get("/logs/")), _warning(user_client.get("/logs/"))) == (None, None, None)
