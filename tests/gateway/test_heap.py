"""The gateway's collector setting (gateway/heap.py): what startup loaded is frozen, young collections are rarer,
and nothing the gateway keeps polling leaves connections for the collector to close."""

import gc
import uuid
from collections.abc import Iterator

import httpx
import pytest
import redis
from django.test import override_settings

from gateway.app import GatewayApp, create_app
from gateway.config import ConfigHolder
from gateway.heap import settle_heap
from tests.servers import serve


@pytest.fixture
def collector() -> Iterator[None]:
    """Puts the test process's collector back as it was."""
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_settle_heap_freezes_what_is_alive_and_raises_the_young_threshold(collector: None) -> None:
    _, middle, old = gc.get_threshold()
    alive = [object() for _ in range(10)], {"kept": [1, 2]}
    gc.unfreeze()

    settle_heap(12_345)

    assert gc.get_threshold() == (12_345, middle, old)
    assert gc.get_freeze_count() > len(alive)
    assert not any(o is alive for o in gc.get_objects())  # frozen objects are outside every generation


def test_zero_leaves_the_collector_alone(collector: None) -> None:
    gc.unfreeze()
    before = gc.get_threshold()

    settle_heap(0)

    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_a_started_gateway_settles_the_heap_last(collector: None) -> None:
    gc.unfreeze()
    app = GatewayApp(config=ConfigHolder(), gc_young_threshold=4_321)

    with serve(app, lifespan=True) as url:
        assert httpx.get(f"{url}/healthz").status_code == 200
        assert gc.get_threshold()[0] == 4_321
        assert gc.get_freeze_count() > 0


def test_a_gateway_left_at_zero_does_not_touch_the_collector(collector: None) -> None:
    gc.unfreeze()
    before = gc.get_threshold()

    with serve(GatewayApp(config=ConfigHolder()), lifespan=True) as url:
        assert httpx.get(f"{url}/healthz").status_code == 200
        assert gc.get_threshold() == before
        assert gc.get_freeze_count() == 0


@override_settings(GATEWAY_GC_YOUNG_THRESHOLD=9_876)
def test_the_production_factory_takes_the_setting() -> None:
    assert create_app().gc_young_threshold == 9_876


def test_polling_the_version_key_reuses_one_connection(redis_url: str) -> None:
    """A client per poll opened a connection per poll and left its objects to the (now rarer) collections."""
    name = f"cfgpoll-{uuid.uuid4().hex[:8]}"
    holder = ConfigHolder(redis_url=f"{redis_url}?client_name={name}")
    admin = redis.Redis.from_url(redis_url)

    def connections() -> list[str]:
        return [c["id"] for c in admin.client_list() if c.get("name") == name]

    try:
        holder._remote_version()
        first = connections()
        for _ in range(4):
            holder._remote_version()
        assert connections() == first
        assert len(first) == 1
    finally:
        holder.stop()
    assert connections() == []  # stop() closed it


def test_the_setting_defaults_to_20000_and_refuses_a_negative_value(tmp_path) -> None:
    from tests.health.test_frozen_redis import _settings

    default = _settings({"CONTROLPLANE_VAR_DIR": str(tmp_path)}, "GATEWAY_GC_YOUNG_THRESHOLD")
    negative = _settings(
        {"CONTROLPLANE_VAR_DIR": str(tmp_path), "GATEWAY_GC_YOUNG_THRESHOLD": "-1"}, "GATEWAY_GC_YOUNG_THRESHOLD"
    )

    assert (default.returncode, default.stdout.strip()) == (0, "20000")
    assert negative.returncode != 0
    assert "GATEWAY_GC_YOUNG_THRESHOLD must be 0 or more, got -1." in negative.stderr
