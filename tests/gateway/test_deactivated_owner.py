"""Deactivating a key's owner stops the key at the gateway, reactivating restores it: the save publishes a
config version on commit, the gateway rebuilds its snapshot at that version, and from then on answers 401
(or 200 again). Driven through the real admin path, answered over real sockets.

The assertions are on that mechanism, with generous timeouts; how long propagation took is printed (the
README's figure), never asserted."""

import time

import httpx
import pytest
import redis
from django.conf import settings

from core import configbus
from tests.catalog.test_user_admin import user_form
from tests.gateway.test_multiprocess import gateways  # noqa: F401  (fixture: three run_gateway processes)

BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
# Far above the ~1 s propagation: a loaded CI machine may be slow, and slowness is not what is tested here.
TIMEOUT = 30.0


def _status(url: str, secret: str) -> int:
    return httpx.post(
        f"{url}/v1/chat/completions", json=BODY, headers={"authorization": f"Bearer {secret}"}, timeout=10
    ).status_code


def _published_version() -> int:
    """The config version the last publish announced: Redis's counter in production, the process's embedded."""
    if settings.REDIS_URL:
        return int(redis.Redis.from_url(settings.REDIS_URL).get(configbus.VERSION_KEY) or 0)
    return configbus._local_version


def _serving_version(url: str) -> int:
    return httpx.get(f"{url}/readyz", timeout=10).json()["config_version"] or 0


def _until_serving(url: str, version: int) -> float:
    """Poll the gateway until its snapshot is at `version` or newer; return how long that took."""
    started = time.monotonic()
    while _serving_version(url) < version:
        if time.monotonic() - started > TIMEOUT:
            raise AssertionError(f"gateway {url} did not reach config version {version} within {TIMEOUT}s")
        time.sleep(0.01)
    return time.monotonic() - started


def _set_active(admin_client, user, active: bool):
    return admin_client.post(f"/admin/auth/user/{user.pk}/change/", user_form(user, is_active="on" if active else None))


def test_deactivating_the_owner_in_the_admin_stops_the_key_and_reactivating_restores_it(gateway, world, admin_client):
    before = _status(gateway.url, world.secret)
    version_before = _published_version()

    deactivated = _set_active(admin_client, world.user, False)
    stop_version = _published_version()
    stopped_after = _until_serving(gateway.url, stop_version)
    stopped = _status(gateway.url, world.secret)
    world.user.refresh_from_db()
    reactivated = _set_active(admin_client, world.user, True)
    restore_version = _published_version()
    restored_after = _until_serving(gateway.url, restore_version)
    restored = _status(gateway.url, world.secret)

    print(
        f"deactivated owner's key refused after {stopped_after * 1000:.0f} ms, restored after "
        f"{restored_after * 1000:.0f} ms (embedded)"
    )
    assert (before, deactivated.status_code, reactivated.status_code) == (200, 302, 302)
    assert version_before < stop_version < restore_version  # each save published a new version on commit
    assert (stopped, restored) == (401, 200)


def test_bulk_deactivate_action_stops_the_key(gateway, world, admin_client):
    version_before = _published_version()

    response = admin_client.post(
        "/admin/auth/user/", {"action": "deactivate_users", "_selected_action": [world.user.pk]}
    )
    version = _published_version()
    _until_serving(gateway.url, version)

    assert response.status_code == 302
    assert version > version_before
    assert _status(gateway.url, world.secret) == 401


@pytest.mark.production
def test_deactivation_reaches_every_production_gateway(gateways, world, admin_client):  # noqa: F811
    statuses = [_status(url, world.secret) for url in gateways]
    version_before = _published_version()

    _set_active(admin_client, world.user, False)
    version = _published_version()
    waits = [_until_serving(url, version) for url in gateways]
    stopped = [_status(url, world.secret) for url in gateways]

    print(f"deactivated owner's key refused by 3 production gateways after {max(waits) * 1000:.0f} ms at most")
    assert statuses == [200, 200, 200]
    assert version > version_before
    assert stopped == [401, 401, 401]
