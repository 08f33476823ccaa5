"""Deactivating a key's owner stops the key at the gateway within the 1 s config propagation; reactivating
restores it. Driven through the real admin path, answered over real sockets."""

import time

import httpx
import pytest

from tests.catalog.test_user_admin import user_form
from tests.gateway.test_multiprocess import gateways  # noqa: F401  (fixture: three run_gateway processes)

BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}


def _status(url: str, secret: str) -> int:
    return httpx.post(
        f"{url}/v1/chat/completions", json=BODY, headers={"authorization": f"Bearer {secret}"}, timeout=10
    ).status_code


def _until_status(url: str, secret: str, wanted: int, timeout: float) -> float:
    """Poll the gateway until it answers `wanted`; return how long that took (fails after `timeout`)."""
    started = time.monotonic()
    deadline = started + timeout
    while True:
        if _status(url, secret) == wanted:
            return time.monotonic() - started
        if time.monotonic() > deadline:
            raise AssertionError(f"gateway did not answer {wanted} within {timeout}s")
        time.sleep(0.02)


def _set_active(admin_client, user, active: bool):
    return admin_client.post(f"/admin/auth/user/{user.pk}/change/", user_form(user, is_active="on" if active else None))


def test_deactivating_the_owner_in_the_admin_stops_the_key_and_reactivating_restores_it(gateway, world, admin_client):
    before = _status(gateway.url, world.secret)

    deactivated = _set_active(admin_client, world.user, False)
    stopped_after = _until_status(gateway.url, world.secret, 401, 1.0)
    world.user.refresh_from_db()
    reactivated = _set_active(admin_client, world.user, True)
    restored_after = _until_status(gateway.url, world.secret, 200, 1.0)

    print(
        f"deactivated owner's key refused after {stopped_after * 1000:.0f} ms, restored after "
        f"{restored_after * 1000:.0f} ms (embedded)"
    )
    assert (before, deactivated.status_code, reactivated.status_code) == (200, 302, 302)


def test_bulk_deactivate_action_stops_the_key(gateway, world, admin_client):
    response = admin_client.post(
        "/admin/auth/user/", {"action": "deactivate_users", "_selected_action": [world.user.pk]}
    )

    _until_status(gateway.url, world.secret, 401, 1.0)
    assert response.status_code == 302


@pytest.mark.production
def test_deactivation_reaches_every_production_gateway(gateways, world, admin_client):  # noqa: F811
    statuses = [_status(url, world.secret) for url in gateways]

    _set_active(admin_client, world.user, False)
    waits = [_until_status(url, world.secret, 401, 1.0) for url in gateways]

    print(f"deactivated owner's key refused by 3 production gateways after {max(waits) * 1000:.0f} ms at most")
    assert statuses == [200, 200, 200]
