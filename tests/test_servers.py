"""tests/servers.py's delete_namespace, against the real Redis: it removes one test's keys and nothing else's."""

import json
import uuid

import pytest
import redis

from tests.servers import delete_namespace

pytestmark = pytest.mark.db_independent


def _unacked(queue: str) -> str:
    """An entry as kombu's Redis transport keeps it for a message a worker took and has not acknowledged."""
    return json.dumps([{"body": "e30=", "headers": {"task": "requestlogs.ingest"}}, "", queue])


def test_delete_namespace_removes_the_namespaces_keys_bindings_and_unacked_messages_only(redis_url):
    ours, theirs = f"test:ns:{uuid.uuid4().hex}", f"test:ns:{uuid.uuid4().hex}"
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    tags = {name: f"{name}-tag" for name in (ours, theirs)}
    for name in (ours, theirs):
        client.set(f"{name}:breaker", "1")
        client.sadd(f"_kombu.binding.{name}:celery", "binding")
        client.sadd(f"_kombu.binding_permanent.{name}:celery", "binding")
        client.hset("unacked", tags[name], _unacked(f"{name}:celery"))
        client.zadd("unacked_index", {tags[name]: 1.0})
    try:
        delete_namespace(redis_url, ours)

        left = {key for name in (ours, theirs) for key in client.scan_iter(match=f"*{name}*")}
        assert left == {
            f"{theirs}:breaker",
            f"_kombu.binding.{theirs}:celery",
            f"_kombu.binding_permanent.{theirs}:celery",
        }
        assert client.hexists("unacked", tags[ours]) is False
        assert client.zscore("unacked_index", tags[ours]) is None
        assert json.loads(client.hget("unacked", tags[theirs]))[-1] == f"{theirs}:celery"
        assert client.zscore("unacked_index", tags[theirs]) == 1.0
    finally:
        delete_namespace(redis_url, theirs)
        client.close()
