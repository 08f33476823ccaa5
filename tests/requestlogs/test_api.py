"""GET /api/request-logs/ and /api/request-logs/<id>/: roles, filters, cursor paging, bad input, schema."""

import re
import time

import pytest
from django.test import Client

from catalog.services import console_token_create
from tests.conftest import _make_user
from tests.factories.requestlogs import fallback, insert_logs, log_record

pytestmark = pytest.mark.django_db

LIST = "/api/request-logs/"
NOW = time.time()


def detail(row) -> str:
    return f"{LIST}{row.request_id}/"


def ids(response) -> list[str]:
    return [item["request_id"] for item in response.json()["results"]]


@pytest.mark.parametrize("role", ["admin", "bi_read_only", "user"])
def test_list_shows_each_role_what_it_may_see(role, rows, admin_client, bi_client, user_client):
    client = {"admin": admin_client, "bi_read_only": bi_client, "user": user_client}[role]

    response = client.get(LIST)

    assert response.status_code == 200
    everyone = [r.request_id for r in rows]
    assert ids(response) == (everyone[:2] if role == "user" else everyone)


def test_anonymous_gets_401_and_a_user_without_a_role_403(rows, anon_client, django_user_model):
    no_role = Client()
    no_role.force_login(_make_user(django_user_model, "norole", None))

    assert anon_client.get(LIST).status_code == 401
    assert anon_client.get(detail(rows[0])).status_code == 401
    assert no_role.get(LIST).status_code == 403
    assert no_role.get(detail(rows[0])).json() == {"detail": "Your role does not allow reading request logs."}


def test_a_console_token_reads_as_its_user(rows, plain_user):
    token = console_token_create(actor=None, user=plain_user, name="script")[1]
    client = Client(headers={"Authorization": f"Token {token}"})

    assert ids(client.get(LIST)) == [rows[0].request_id, rows[1].request_id]


@pytest.mark.parametrize("role", ["admin", "bi_read_only", "user"])
def test_detail_of_a_foreign_request_is_404_for_a_user(role, rows, admin_client, bi_client, user_client):
    client = {"admin": admin_client, "bi_read_only": bi_client, "user": user_client}[role]

    own, foreign = client.get(detail(rows[0])), client.get(detail(rows[2]))

    assert own.status_code == 200 and own.json()["request_id"] == rows[0].request_id
    if role == "user":
        assert (foreign.status_code, foreign.json()) == (
            404,
            {"detail": "No request with this id in the logs you can see."},
        )
    else:
        assert foreign.status_code == 200


def test_detail_body(log_catalog, admin_client):
    log = insert_logs(
        log_record(
            key=log_catalog.ursula_key,
            **fallback(step=1),
            status=200,
            cost_usd=0.0005,
            attempts=[
                {"provider": "openai", "model": "gpt-4o", "status": 503, "error": None, "duration_ms": 12.5},
                {"provider": "backup", "model": "claude", "status": 200, "error": None, "duration_ms": 80.0},
            ],
        )
    )[0]

    body = admin_client.get(detail(log)).json()

    key = log_catalog.ursula_key
    assert body["key"] == {"id": key.pk, "name": "ursula laptop", "prefix": key.prefix, "revoked": False}
    assert (body["user"], body["team"], body["application"], body["agent"]) == (
        {"id": key.user_id, "name": "ursula"},
        {"id": log_catalog.red.pk, "name": "red"},
        {"id": log_catalog.web.pk, "name": "web"},
        {"id": log_catalog.agent.pk, "name": "summariser"},
    )
    assert body["fallback"] == {
        "triggered": True,
        "chain_id": None,
        "chain_name": None,
        "chain_step": 1,
        "from_provider": "openai",
        "original_model": "gpt-4o",
    }
    # Logged without a resilience policy: its fields are null (see test_attempt_reasons for them recorded).
    no_policy = dict.fromkeys(("next", "class", "retry_after", "malformed_events", "continuation", "usage"))
    assert body["attempts"] == [
        {"provider": "openai", "model": "gpt-4o", "status": 503, "error": None, "duration_ms": 12.5, **no_policy},
        {"provider": "backup", "model": "claude", "status": 200, "error": None, "duration_ms": 80.0, **no_policy},
    ]
    assert (body["status"], body["status_class"], body["cost_usd"], body["priced_model"]) == (
        200,
        "2xx",
        "0.00050000",
        "claude",
    )


def test_filters_as_query_parameters(log_catalog, admin_client):
    rows = insert_logs(
        log_record(key=log_catalog.ursula_key, status=503),
        log_record(key=log_catalog.ursula_key, stream=True, at=NOW - 1),
        log_record(key=log_catalog.oscar_key, status=503, at=NOW - 2),
    )

    assert ids(admin_client.get(LIST, {"status": "5xx"})) == [rows[0].request_id, rows[2].request_id]
    assert ids(admin_client.get(LIST, {"status": "5xx", "key": log_catalog.ursula_key.pk})) == [rows[0].request_id]
    assert ids(admin_client.get(LIST, {"stream": "yes"})) == [rows[1].request_id]
    assert ids(admin_client.get(LIST, {"order": "oldest"})) == [r.request_id for r in reversed(rows)]
    assert ids(admin_client.get(LIST, {"from": "2000-01-01T00:00:00Z", "to": "2000-01-02T00:00:00+02:00"})) == []


def test_cursor_links_page_through_and_keep_the_filters(log_catalog, admin_client):
    rows = insert_logs(*(log_record(key=log_catalog.alice_key, at=NOW - i // 3, stream=i % 2 == 0) for i in range(120)))
    streaming = [r.request_id for r in sorted(rows, key=lambda r: (r.created_at, r.pk), reverse=True) if r.stream]

    seen, response = [], admin_client.get(LIST, {"stream": "yes", "page_size": "50"})
    urls = []
    while True:
        body = response.json()
        seen.extend(ids(response))
        if body["next"] is None:
            break
        urls.append(body["next"])
        response = admin_client.get(body["next"])
    back = admin_client.get(response.json()["previous"])

    assert seen == streaming  # 60 rows: 50 + 10, none twice
    assert all(
        "stream=yes" in u and "page_size=50" in u and u.startswith("http://testserver/api/request-logs/?") for u in urls
    )
    assert len(urls) == 1
    assert ids(back) == streaming[:50]
    assert back.json()["previous"] is None


@pytest.mark.parametrize(
    ("params", "field", "message"),
    [
        ({"status": "9xx"}, "status", "Unknown status class “9xx”: use 2xx, 4xx, 5xx, client_gone or errors."),
        ({"team": "nope"}, "team", "Unknown team “nope”."),
        ({"from": "tomorrow"}, "from", "Enter a date and time such as 2026-12-01T07:40 (UTC), from 1970 on."),
        (
            {"from": "0001-01-01T00:30+01:00"},
            "from",
            "Enter a date and time such as 2026-12-01T07:40 (UTC), from 1970 on.",
        ),
        ({"request_id": "0" * 32}, "request_id", "To fetch one request, GET /api/request-logs/<request_id>/."),
        ({"from": "2026-11-30T10:00Z", "to": "2026-11-29T10:00Z"}, "to", "“To” must be later than “from”."),
        (
            {"cursor": "p9.9:nope"},
            "cursor",
            "This paging link is invalid or was altered; start again from the first page.",
        ),
        ({"page_size": "7"}, "page_size", "Rows per page is 25, 50 or 100."),
        ({"chain_step": "-1"}, "chain_step", "Chain step is 0 (the primary) to 10; “-1” is not one of them."),
    ],
)
def test_bad_input_is_a_400_naming_the_parameter(rows, admin_client, params, field, message):
    response = admin_client.get(LIST, params)

    assert response.status_code == 400
    assert response.json() == {"detail": f"{field}: {message}", "errors": {field: [message]}}


def test_a_user_naming_another_users_key_gets_a_400_not_their_rows(log_catalog, rows, user_client):
    response = user_client.get(LIST, {"key": log_catalog.oscar_key.pk})

    assert response.status_code == 400
    assert response.json()["errors"] == {"key": [f"Unknown gateway key “{log_catalog.oscar_key.pk}”."]}


def test_a_cursor_cannot_reach_rows_outside_the_viewers_scope(log_catalog, rows, admin_client, user_client):
    # A cursor taken from the admin's view positions the user's page; it never widens what they see.
    cursor_url = admin_client.get(LIST, {"page_size": "25"}).json()["next"]
    insert_logs(*(log_record(key=log_catalog.oscar_key, at=NOW - 10 - i) for i in range(30)))
    admin_next = admin_client.get(LIST).json()["next"]

    response = user_client.get(admin_next)

    assert cursor_url is None
    assert response.status_code == 200
    assert ids(response) == []


def test_schema_documents_both_endpoints(admin_client):
    schema = admin_client.get("/api/schema/", {"format": "json"}).json()

    list_op = schema["paths"]["/api/request-logs/"]["get"]
    detail_op = schema["paths"]["/api/request-logs/{request_id}/"]["get"]
    assert (list_op["operationId"], detail_op["operationId"]) == ("request_log_list", "request_log_get")
    assert sorted(p["name"] for p in list_op["parameters"]) == sorted(
        [
            "application",
            "chain_step",
            "cursor",
            "fallback",
            "from",
            "key",
            "order",
            "page_size",
            "provider",
            "range",
            "requested_model",
            "served_model",
            "status",
            "stream",
            "team",
            "to",
        ]
    )
    page = schema["components"]["schemas"]["RequestLogPage"]
    assert sorted(page["properties"]) == ["next", "previous", "results"]
    assert "attempts" in schema["components"]["schemas"]["RequestLog"]["properties"]


def test_page_only_parameters_do_not_change_the_api(log_catalog, admin_client):
    rows = insert_logs(*(log_record(key=log_catalog.alice_key, at=NOW - i) for i in range(3)))

    response = admin_client.get(LIST, {"order": "oldest", "follow": "1", "since": "whatever"})

    assert ids(response) == [r.request_id for r in reversed(rows)]


def test_api_cursors_and_ids_reveal_no_row_ids(log_catalog, user_client):
    insert_logs(*(log_record(key=log_catalog.ursula_key, at=NOW - i) for i in range(30)))

    body = user_client.get(LIST).json()

    cursor = re.fullmatch(r"http://testserver/api/request-logs/\?cursor=([A-Za-z0-9_-]{40,})", body["next"])
    assert cursor is not None
    assert all("id" not in item or item["id"] is None for item in body["results"])


def test_detail_of_an_impossible_id_is_404(rows, admin_client):
    assert admin_client.get(f"{LIST}%00/").status_code == 404
    assert admin_client.get(f"{LIST}{'z' * 32}/").status_code == 404
