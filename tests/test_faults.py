"""The fault proxy itself, against the real Redis: it forwards, goes down, freezes and comes back."""

import pytest
import redis

from tests.conftest import TEST_REDIS_URL
from tests.faults import FaultProxy


@pytest.fixture
def proxy():
    with FaultProxy.for_redis(TEST_REDIS_URL) as p:
        yield p


def _client(port: int) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=0.5, socket_connect_timeout=0.5)


def test_forwards_goes_down_and_comes_back(proxy):
    client = _client(proxy.port)
    assert client.ping() is True
    proxy.down()
    with pytest.raises(redis.ConnectionError):
        _client(proxy.port).ping()
    proxy.restore()
    assert _client(proxy.port).ping() is True


def test_freeze_holds_replies_until_restore(proxy):
    client = _client(proxy.port)
    client.ping()
    proxy.freeze()
    with pytest.raises(redis.TimeoutError):
        client.ping()
    proxy.restore()
    assert _client(proxy.port).ping() is True
