import pytest
from django.db import transaction

from audit.models import AuditEvent
from audit.services import audit_record
from tests.helpers.api import post_json, put_json

URL = "/api/audit/"


def record(actor, action, object_type="chain", object_id=1, **fields):
    with transaction.atomic():
        return audit_record(actor=actor, action=action, object_type=object_type, object_id=object_id, **fields)


@pytest.fixture
def events(admin_user, bi_user):
    """Four events, oldest first."""
    return [
        record(admin_user, "chain.create", object_id=1, object_repr="A", after={"name": "A"}),
        record(admin_user, "chain.update", object_id=1, object_repr="A", before={"name": "A"}, after={"name": "B"}),
        record(bi_user, "chain.create", object_id=2, object_repr="C"),
        record(admin_user, "provider.create", object_type="provider", object_id=1, object_repr="openai"),
    ]


def ids_of(response) -> list[int]:
    return [e["id"] for e in response.json()["results"]]


def test_audit_list_is_newest_first_with_before_and_after(admin_client, events):
    response = admin_client.get(URL)

    assert response.status_code == 200
    assert ids_of(response) == [e.pk for e in reversed(events)]
    update = response.json()["results"][2]
    assert {k: v for k, v in update.items() if k != "created_at"} == {
        "id": events[1].pk,
        "actor": "alice",
        "action": "chain.update",
        "object_type": "chain",
        "object_id": "1",
        "object_repr": "A",
        "before": {"name": "A"},
        "after": {"name": "B"},
        "prev_hash": events[0].hash,
        "hash": events[1].hash,
    }


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"actor": "bianca"}, [2]),
        ({"action": "chain.create"}, [2, 0]),
        ({"object_type": "provider"}, [3]),
        ({"object_type": "chain", "object_id": "1"}, [1, 0]),
        ({"actor": "alice", "action": "chain.create"}, [0]),
        ({"actor": "nobody"}, []),
    ],
)
def test_audit_list_filters(admin_client, events, params, expected):
    response = admin_client.get(URL, params)

    assert ids_of(response) == [events[i].pk for i in expected]


def test_audit_list_pages(admin_client, events):
    first = admin_client.get(URL, {"page_size": 3})
    second = admin_client.get(URL, {"page_size": 3, "page": 2})

    assert (first.json()["count"], ids_of(first)) == (4, [events[3].pk, events[2].pk, events[1].pk])
    assert ids_of(second) == [events[0].pk]


def test_audit_list_is_readable_by_bi_read_only(bi_client, events):
    response = bi_client.get(URL)

    assert response.status_code == 200
    assert len(response.json()["results"]) == 4


def test_audit_list_shows_events_written_through_the_api(admin_client, catalog):
    post_json(admin_client, "/api/teams/", {"name": "Payments"})

    response = admin_client.get(URL, {"object_type": "team"})

    assert [(e["actor"], e["action"], e["object_repr"], e["after"]) for e in response.json()["results"]] == [
        ("alice", "team.create", "Payments", {"name": "Payments"})
    ]


@pytest.mark.parametrize("client_name", ["admin_client", "bi_client"])
def test_audit_events_cannot_be_written_through_the_api(request, events, client_name):
    client = request.getfixturevalue(client_name)
    url_one = f"{URL}{events[0].pk}/"

    responses = [
        post_json(client, URL, {"action": "forged"}).status_code,
        put_json(client, URL, {"action": "forged"}).status_code,
        client.patch(URL, {}, content_type="application/json").status_code,
        client.delete(URL).status_code,
        client.delete(url_one).status_code,
    ]

    assert responses == [405, 405, 405, 405, 404]
    assert AuditEvent.objects.count() == 4


def test_audit_list_denies_plain_user_and_anonymous(user_client, anon_client, events):
    assert (user_client.get(URL).status_code, anon_client.get(URL).status_code) == (403, 401)
