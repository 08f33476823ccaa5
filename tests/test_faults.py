"""The fault proxy itself, against the real Redis: it forwards, goes down, freezes and comes back."""

import pytest
import redis

pytestmark = pytest.mark.db_independent


def _client(port: int) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=0.5, socket_connect_timeout=0.5)


def test_forwards_goes_down_and_comes_back(redis_proxy):
    client = _client(redis_proxy.port)
    assert client.ping() is True
    redis_proxy.down()
    with pytest.raises(redis.ConnectionError):
        _client(redis_proxy.port).ping()
    redis_proxy.restore()
    assert _client(redis_proxy.port).ping() is True


def test_freeze_holds_replies_until_restore(redis_proxy):
    client = _client(redis_proxy.port)
    client.ping()
    redis_proxy.freeze()
    with pytest.raises(redis.TimeoutError):
        client.ping()
    redis_proxy.restore()
    assert _client(redis_proxy.port).ping() is True
