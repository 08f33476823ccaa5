"""Request Logs console: roles, filters from the URL, HTMX regions, paging, the drawer, the CSV export."""

import csv
import io
import re
import time
from datetime import timedelta
from decimal import Decimal

import pytest
from asgiref.sync import sync_to_async
from django.db import connection, connections
from django.test import AsyncClient, Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from chains.services import ChainInput, EntryInput, chain_create
from health.breaker import ManualClock, MemoryEngine, Outcome, use_engine
from health.selectors import circuit_anchor
from requestlogs import views as log_views
from requestlogs.selectors import mark_decode
from requestlogs.templatetags.requestlog_tags import usd, utc_time
from tests.conftest import PASSWORD, _make_user
from tests.factories.requestlogs import fallback, insert_logs, log_record

pytestmark = pytest.mark.django_db

LIST_URL = "/logs/"
NOW = time.time()
ROW_ID = re.compile(r'<tr id="log-row-([0-9a-f]{32})"')


def shown(response) -> list[str]:
    """Request ids of the rows on a rendered page, top to bottom."""
    return ROW_ID.findall(response.content.decode())


def summary(response) -> list[str]:
    """The error summary's lines ("Label: message")."""
    html = response.content.decode()
    return [re.sub(r"<[^>]+>", "", item) for item in re.findall(r"<li><strong>.*?</li>", html)]


def detail_url(row) -> str:
    return reverse("requestlogs:detail", args=[row.request_id])


def htmx(target: str, **extra) -> dict[str, str]:
    return {"HX-Request": "true", "HX-Target": target, **extra}


# ---------- Roles ----------


@pytest.mark.parametrize("role", ["admin", "bi_read_only", "user", "anonymous"])
def test_page_shows_each_role_what_it_may_see(role, rows, admin_client, bi_client, user_client, anon_client):
    client = {"admin": admin_client, "bi_read_only": bi_client, "user": user_client, "anonymous": anon_client}[role]

    response = client.get(LIST_URL)

    if role == "anonymous":
        assert response.status_code == 302 and response.url == "/login/?next=/logs/"
        return
    assert response.status_code == 200
    everyone = [r.request_id for r in rows]
    assert shown(response) == (everyone[:2] if role == "user" else everyone)
    count = re.search(r"<strong>(\d+)</strong> requests?", response.content.decode()).group(1)
    assert count == ("2" if role == "user" else "4")


def test_a_user_without_a_role_gets_403(rows, django_user_model):
    client = Client()
    client.force_login(_make_user(django_user_model, "norole", None))

    assert client.get(LIST_URL).status_code == 403
    assert client.get(detail_url(rows[0])).status_code == 403
    assert client.get(reverse("requestlogs:export")).status_code == 403


def test_the_user_role_sees_only_its_own_keys_in_the_key_filter(log_catalog, rows, user_client, admin_client):
    user_html = user_client.get(LIST_URL).content.decode()
    admin_html = admin_client.get(LIST_URL).content.decode()

    def key_options(html):
        select = re.search(r'<select id="log-key" name="key">(.*?)</select>', html, re.S).group(1)
        return re.findall(r'<option value="(\d*)"', select)

    assert key_options(user_html) == ["", str(log_catalog.ursula_key2.pk), str(log_catalog.ursula_key.pk)]
    assert sorted(key_options(admin_html)) == sorted(
        [
            "",
            *(
                str(k.pk)
                for k in (log_catalog.alice_key, log_catalog.ursula_key, log_catalog.ursula_key2, log_catalog.oscar_key)
            ),
        ]
    )
    assert "oscar" not in user_html and "blue" not in user_html and "batch" not in user_html


def test_a_user_naming_another_users_key_gets_an_error_and_no_rows(log_catalog, rows, user_client):
    response = user_client.get(LIST_URL, {"key": log_catalog.oscar_key.pk})

    assert shown(response) == []
    assert summary(response) == [f"Gateway key: Unknown gateway key “{log_catalog.oscar_key.pk}”."]


@pytest.mark.parametrize("role", ["admin", "bi_read_only", "user"])
def test_drawer_opens_for_visible_rows_and_404s_for_foreign_ones(role, rows, admin_client, bi_client, user_client):
    client = {"admin": admin_client, "bi_read_only": bi_client, "user": user_client}[role]
    oscars = rows[2]

    own = client.get(detail_url(rows[0]))
    foreign = client.get(detail_url(oscars))

    assert own.status_code == 200 and rows[0].request_id in own.content.decode()
    if role == "user":
        assert foreign.status_code == 404
        assert oscars.request_id not in foreign.content.decode()
        assert "No request with this id in the logs you can see." in foreign.content.decode()
    else:
        assert foreign.status_code == 200


def test_drawer_of_anonymous_goes_to_login(rows, anon_client):
    response = anon_client.get(detail_url(rows[0]))

    assert response.status_code == 302 and response.url.startswith("/login/?next=/logs/")


@pytest.mark.parametrize("role", ["admin", "bi_read_only", "user"])
def test_csv_holds_exactly_the_rows_the_role_may_see(role, rows, admin_client, bi_client, user_client):
    client = {"admin": admin_client, "bi_read_only": bi_client, "user": user_client}[role]

    response = client.get(reverse("requestlogs:export"))

    table = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    everyone = [r.request_id for r in rows]
    assert [line["request_id"] for line in table] == (everyone[:2] if role == "user" else everyone)


def test_csv_of_anonymous_goes_to_login(rows, anon_client):
    assert anon_client.get(reverse("requestlogs:export")).status_code == 302


def test_request_id_jump_never_reveals_another_users_request(rows, user_client):
    response = user_client.get(LIST_URL, {"request_id": rows[2].request_id})

    assert response.status_code == 200
    assert summary(response) == ["Request id: No request with this id in the logs you can see."]
    assert rows[2].request_id not in shown(response)


# ---------- Filters ----------


@pytest.fixture
def varied(log_catalog):
    """Rows that differ in one attribute each from a plain 200 by alice's key."""
    key = log_catalog.alice_key
    return {
        "plain": log_record(key=key, at=NOW - 10),
        "alias": log_record(key=key, at=NOW - 11, requested_model="default"),
        "fallback": log_record(key=key, at=NOW - 12, **fallback(step=2)),
        "error": log_record(key=key, at=NOW - 13, status=503, error_kind="upstream_error"),
        "client_error": log_record(key=key, at=NOW - 14, status=404),
        "gone": log_record(key=key, at=NOW - 15, status=499),
        "stream": log_record(key=key, at=NOW - 16, stream=True),
        "ursula": log_record(key=log_catalog.ursula_key, at=NOW - 17),
        # The chain's entry answered 502: a fallback, but not one that served the request.
        "fallback_failed": log_record(key=key, at=NOW - 18, status=502, error_kind="upstream_error", **fallback()),
        "old": log_record(key=key, at=NOW - 3 * 3600),
        "ancient": log_record(key=key, at=NOW - 3 * 86400),
    }


def _filter_cases(catalog):
    recent = ["plain", "alias", "fallback", "error", "client_error", "gone", "stream", "ursula", "fallback_failed"]
    return [
        ({}, [*recent, "old"]),
        ({"range": "15m"}, recent),
        ({"range": "1h"}, recent),
        ({"range": "24h"}, [*recent, "old"]),
        ({"range": "7d"}, [*recent, "old", "ancient"]),
        ({"requested_model": "default"}, ["alias"]),
        ({"requested_model": " default "}, ["alias"]),
        ({"served_model": "claude"}, ["fallback", "fallback_failed"]),
        ({"provider": "backup"}, ["fallback", "fallback_failed"]),
        ({"status": "2xx"}, ["plain", "alias", "fallback", "stream", "ursula", "old"]),
        ({"status": "4xx"}, ["client_error"]),
        ({"status": "5xx"}, ["error", "fallback_failed"]),
        ({"status": "client_gone"}, ["gone"]),
        ({"status": "errors"}, ["error", "client_error", "gone", "fallback_failed"]),
        ({"fallback": "yes"}, ["fallback", "fallback_failed"]),
        ({"fallback": "served"}, ["fallback"]),
        ({"fallback": "no"}, [r for r in [*recent, "old"] if r not in ("fallback", "fallback_failed")]),
        ({"chain_step": "2"}, ["fallback"]),
        ({"chain_step": "1"}, ["fallback_failed"]),
        ({"key": catalog.ursula_key.pk}, ["ursula"]),
        ({"team": catalog.red.pk}, ["ursula"]),
        ({"application": catalog.web.pk}, ["ursula"]),
        ({"stream": "yes"}, ["stream"]),
        ({"fallback": "no", "status": "2xx", "stream": "no", "range": "1h"}, ["plain", "alias", "ursula"]),
    ]


def test_every_filter_from_the_url(log_catalog, varied, admin_client):
    insert_logs(*varied.values())
    ids = {name: record["request_id"] for name, record in varied.items()}

    for params, expected in _filter_cases(log_catalog):
        response = admin_client.get(LIST_URL, params)

        assert response.status_code == 200, params
        assert shown(response) == [ids[name] for name in expected], params


def test_custom_range_from_and_to(log_catalog, admin_client):
    at = [1_764_499_980 + 60 * m for m in range(4)]  # 2025-11-30 10:53, 10:54, 10:55, 10:56 UTC
    rows = insert_logs(*(log_record(key=log_catalog.alice_key, at=t) for t in at))

    def iso(t):
        return time.strftime("%Y-%m-%dT%H:%M", time.gmtime(t))

    both = admin_client.get(LIST_URL, {"range": "custom", "from": iso(at[1]), "to": iso(at[3])})
    only_from = admin_client.get(LIST_URL, {"from": iso(at[2])})  # no range: from/to imply custom

    assert shown(both) == [rows[2].request_id, rows[1].request_id]
    assert shown(only_from) == [rows[3].request_id, rows[2].request_id]
    assert "from 2025-11-30 10:54 to 2025-11-30 10:56 UTC" in both.content.decode()


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"status": "3xx"}, ["Status: Unknown status class “3xx”: use 2xx, 4xx, 5xx, client_gone or errors."]),
        ({"fallback": "maybe"}, ["Fallback: Fallback is “yes”, “served” or “no” (or empty for any)."]),
        ({"stream": "1"}, ["Stream: Stream is “yes” or “no” (or empty for any)."]),
        ({"chain_step": "11"}, ["Chain step: Chain step is 0 (the primary) to 10; “11” is not one of them."]),
        ({"chain_step": "x"}, ["Chain step: Chain step is 0 (the primary) to 10; “x” is not one of them."]),
        ({"team": "999999"}, ["Team: Unknown team “999999”."]),
        ({"application": "web"}, ["Application: Unknown application “web”."]),
        ({"range": "2w"}, ["Time range: Unknown time range “2w”: use 15m, 1h, 24h, 7d or custom."]),
        ({"page_size": "1000"}, ["Rows per page: Rows per page is 25, 50 or 100."]),
        ({"range": "custom"}, ["From: A custom range needs a start (“from”)."]),
        (
            {"range": "custom", "from": "yesterday"},
            ["From: Enter a date and time such as 2026-12-01T07:40 (UTC), from 1970 on."],
        ),
        (
            {"range": "custom", "from": "0001-01-01T00:30+01:00"},  # falls off the calendar in UTC
            ["From: Enter a date and time such as 2026-12-01T07:40 (UTC), from 1970 on."],
        ),
        (
            {"from": "2026-11-30T10:00", "to": "9999-12-31T23:59-01:00"},
            ["To: Enter a date and time such as 2026-12-01T07:40 (UTC), from 1970 on."],
        ),
        (
            {"from": "1969-12-31T23:59"},
            ["From: Enter a date and time such as 2026-12-01T07:40 (UTC), from 1970 on."],
        ),
        ({"key": "1; DROP TABLE"}, ["Gateway key: Unknown gateway key “1; DROP TABLE”."]),
        (
            {"from": "2026-11-30T10:00", "to": "2026-13-01"},
            ["To: Enter a date and time such as 2026-12-01T07:40 (UTC), from 1970 on."],
        ),
        ({"from": "2026-11-30T10:00", "to": "2026-11-30T09:00"}, ["To: “To” must be later than “from”."]),
        ({"from": "2026-11-30T10:00", "to": "2026-11-30T10:00"}, ["To: “To” must be later than “from”."]),
        (
            {"request_id": "not-an-id"},
            ["Request id: A request id is 32 hexadecimal characters, as in the x-vidai-request-id response header."],
        ),
        ({"request_id": "0" * 32}, ["Request id: No request with this id in the logs you can see."]),
        (
            {"cursor": "n1.2:forged"},
            ["Page: This paging link is invalid or was altered; start again from the first page."],
        ),
        ({"order": "random"}, ["Order: Order is “newest” or “oldest”."]),
    ],
)
def test_bad_filters_show_a_clear_message_and_no_rows(rows, admin_client, params, expected):
    response = admin_client.get(LIST_URL, params)

    assert response.status_code == 200
    assert summary(response) == expected
    assert shown(response) == []
    assert "Fix the filters above to see requests." in response.content.decode()


def test_bad_filters_keep_what_was_typed_with_the_field_marked(rows, admin_client):
    response = admin_client.get(LIST_URL, {"range": "custom", "from": "yesterday", "provider": "openai"})

    html = response.content.decode()
    assert 'id="log-from" name="from" value="yesterday"' in html
    assert 'aria-describedby="log-from-error"' in html
    assert 'id="log-provider" name="provider" value="openai"' in html
    assert re.search(r'<option value="custom" selected>', html)


def test_request_id_box_jumps_to_the_request(rows, admin_client):
    dashed = rows[1].request_id.upper()
    dashed = f"{dashed[:8]}-{dashed[8:12]}-{dashed[12:16]}-{dashed[16:20]}-{dashed[20:]}"

    plain = admin_client.get(LIST_URL, {"request_id": rows[1].request_id})
    uuid_form = admin_client.get(LIST_URL, {"request_id": f"  {dashed} "})
    over_htmx = admin_client.get(LIST_URL, {"request_id": rows[1].request_id}, headers=htmx("log-page"))

    assert (plain.status_code, plain.url) == (302, detail_url(rows[1]))
    assert uuid_form.url == detail_url(rows[1])
    assert over_htmx["HX-Redirect"] == detail_url(rows[1])


# ---------- Paging, order, HTMX ----------


def _links(response) -> dict[str, str]:
    html = response.content.decode()
    return {
        name: m.group(1).replace("&amp;", "&")
        for name in ("next", "prev")
        if (m := re.search(rf'id="log-{name}" href="([^"]+)"', html))
    }


def test_older_and_newer_links_walk_the_pages(log_catalog, admin_client):
    rows = insert_logs(*(log_record(key=log_catalog.alice_key, at=NOW - i) for i in range(60)))
    ids = [r.request_id for r in rows]

    first = admin_client.get(LIST_URL)
    second = admin_client.get(_links(first)["next"])
    third = admin_client.get(_links(second)["next"])
    back = admin_client.get(_links(third)["prev"])

    assert (shown(first), shown(second), shown(third), shown(back)) == (ids[0:25], ids[25:50], ids[50:60], ids[25:50])
    assert set(_links(first)) == {"next"}
    assert set(_links(third)) == {"prev"}
    assert "1,000+" not in first.content.decode() and "<strong>60</strong> requests" in first.content.decode()


def test_page_size_and_oldest_first(log_catalog, admin_client):
    rows = insert_logs(*(log_record(key=log_catalog.alice_key, at=NOW - i) for i in range(60)))
    ids = [r.request_id for r in rows]

    fifty = admin_client.get(LIST_URL, {"page_size": "50"})
    oldest = admin_client.get(LIST_URL, {"order": "oldest", "page_size": "25"})

    assert shown(fifty) == ids[:50]
    assert shown(oldest) == ids[::-1][:25]
    assert "page_size=50" in _links(fifty)["next"]
    assert 'aria-sort="ascending"' in oldest.content.decode()
    assert 'Time (UTC) <span aria-hidden="true">▲</span>' in oldest.content.decode()


def test_count_over_the_cap_says_so(log_catalog, admin_client, monkeypatch):
    monkeypatch.setattr(log_views, "COUNT_CAP", 3)
    insert_logs(*(log_record(key=log_catalog.alice_key) for _ in range(5)))

    html = admin_client.get(LIST_URL).content.decode()

    assert "<strong>3+</strong> requests" in html


def test_filter_change_over_htmx_swaps_the_page_region_and_pushes_the_canonical_url(rows, admin_client):
    response = admin_client.get(
        LIST_URL, {"provider": "openai", "status": "", "range": "24h", "fallback": ""}, headers=htmx("log-page")
    )

    html = response.content.decode()
    assert html.strip().startswith('<div id="log-page">')
    assert "<html" not in html
    assert response["HX-Push-Url"] == "/logs/?provider=openai"
    assert shown(response) == [r.request_id for r in rows]


def test_full_page_without_htmx(rows, admin_client):
    response = admin_client.get(LIST_URL, {"provider": "openai"})

    html = response.content.decode()
    assert "<html" in html and 'id="log-drawer"' in html
    assert "HX-Push-Url" not in response


def test_htmx_paging_pushes_the_cursor_url(log_catalog, admin_client):
    insert_logs(*(log_record(key=log_catalog.alice_key, at=NOW - i) for i in range(30)))
    older = _links(admin_client.get(LIST_URL))["next"]

    response = admin_client.get(older, headers=htmx("log-page"))

    assert response["HX-Push-Url"] == older
    assert len(shown(response)) == 5


def test_bad_filters_over_htmx_push_the_url_as_typed(rows, admin_client):
    response = admin_client.get(LIST_URL, {"status": "nope"}, headers=htmx("log-page"))

    assert response["HX-Push-Url"] == "/logs/?status=nope"
    assert summary(response) == ["Status: Unknown status class “nope”: use 2xx, 4xx, 5xx, client_gone or errors."]


def test_a_name_the_catalog_does_not_know_is_searched_with_a_notice(log_catalog, admin_client):
    # Logs keep names the catalog no longer has (a renamed model, a deleted provider): never an error.
    gone = insert_logs(log_record(key=log_catalog.alice_key, served_provider="retired", served_model="gpt-3"))[0]

    by_provider = admin_client.get(LIST_URL, {"provider": "retired"})
    by_model = admin_client.get(LIST_URL, {"served_model": "gpt-3"})
    known = admin_client.get(LIST_URL, {"provider": "openai"})

    assert shown(by_provider) == shown(by_model) == [gone.request_id]
    notice = "“retired” is not a provider in the catalog now; only requests that name it exactly are shown."
    assert notice in by_provider.content.decode()
    assert "“gpt-3” is not a model in the catalog now" in by_model.content.decode()
    assert "in the catalog now" not in known.content.decode()


def test_follow_polls_the_table_and_marks_new_rows(log_catalog, admin_client):
    old = insert_logs(log_record(key=log_catalog.alice_key, at=NOW - 5))[0]
    page = admin_client.get(LIST_URL, {"follow": "1", "provider": "openai"})
    poll_url = re.search(r'<div id="log-table" hx-get="([^"]+)" hx-trigger="every 2s"', page.content.decode())
    new = insert_logs(log_record(key=log_catalog.alice_key, at=NOW - 1))[0]

    poll = admin_client.get(
        poll_url.group(1).replace("&amp;", "&"), headers=htmx("log-table", **{"HX-Trigger": "log-table"})
    )

    since = re.fullmatch(
        r"/logs/\?provider=openai&follow=1&since=([A-Za-z0-9_-]+)", poll_url.group(1).replace("&amp;", "&")
    )
    assert since and mark_decode(since.group(1)) == old.pk  # the newest row shown, sealed (ids count everyone's)
    assert "HX-Push-Url" not in poll  # polling never adds history entries
    html = poll.content.decode()
    assert html.strip().startswith('<div id="log-table" hx-get=')
    assert shown(poll) == [new.request_id, old.request_id]
    assert f'<tr id="log-row-{new.request_id}" data-row-link="log-link-{new.request_id}" class="is-new">' in html
    assert f'<tr id="log-row-{old.request_id}" data-row-link="log-link-{old.request_id}">' in html


def test_follow_is_off_by_default_and_older_links_leave_it(log_catalog, admin_client):
    insert_logs(*(log_record(key=log_catalog.alice_key, at=NOW - i) for i in range(30)))

    plain = admin_client.get(LIST_URL).content.decode()
    following = admin_client.get(LIST_URL, {"follow": "1"})

    assert 'hx-trigger="every' not in plain
    assert "follow" not in _links(following)["next"]
    assert 'id="log-follow" name="follow" value="1" checked' in following.content.decode()


def test_list_query_count_does_not_grow_with_rows(log_catalog, admin_client):
    insert_logs(log_record(key=log_catalog.alice_key))
    admin_client.get(LIST_URL)  # session and role caches warm

    with CaptureQueriesContext(connection) as one:
        admin_client.get(LIST_URL)
    insert_logs(log_record(key=log_catalog.ursula_key), log_record(key=log_catalog.oscar_key))
    with CaptureQueriesContext(connection) as three:
        response = admin_client.get(LIST_URL)

    assert len(shown(response)) == 3
    assert len(three.captured_queries) == len(one.captured_queries), "\n".join(
        [
            "one row:",
            *(q["sql"] for q in one.captured_queries),
            "three rows:",
            *(q["sql"] for q in three.captured_queries),
        ]
    )


def test_empty_states(log_catalog, admin_client, user_client, django_user_model):
    keyless = Client()
    keyless.force_login(_make_user(django_user_model, "keyless", "user"))

    nothing = admin_client.get(LIST_URL).content.decode()
    no_keys = keyless.get(LIST_URL).content.decode()
    insert_logs(log_record(key=log_catalog.alice_key, at=NOW - 3 * 86400))
    out_of_range = admin_client.get(LIST_URL).content.decode()

    assert "No requests yet — send one through the gateway." in nothing
    assert "You have no gateway keys yet." in no_keys
    assert "No requests with your keys yet." in user_client.get(LIST_URL).content.decode()
    assert "No requests in the last 24 h." in out_of_range


# ---------- The drawer ----------


@pytest.fixture
def fell_back(log_catalog):
    """A request whose primary and first chain entry failed; the chain's second entry served it."""
    chain = chain_create(
        actor=None,
        data=ChainInput(
            name="gpt-4o resilience", source_model="gpt-4o", entries=[EntryInput("claude"), EntryInput("mistral")]
        ),
    )
    return insert_logs(
        log_record(
            key=log_catalog.ursula_key,
            requested_model="default",
            routed_model="gpt-4o",
            **fallback(step=2, served_model="mistral"),
            chain_id=chain.pk,
            status=200,
            stream=True,
            latency_ms=2345.6,
            ttfb_ms=812.0,
            tokens_in=1200,
            tokens_out=345,
            cost_usd=0.00123,
            attempts=[
                {"provider": "openai", "model": "gpt-4o", "status": 503, "error": None, "duration_ms": 1200.0},
                {"provider": "backup", "model": "claude", "status": None, "error": "timeout", "duration_ms": 900.0},
                {"provider": "backup", "model": "mistral", "status": 200, "error": None, "duration_ms": 240.0},
            ],
        )
    )[0], chain


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).strip()


def _facts(html: str, section: str) -> dict[str, str]:
    block = re.search(rf'<section aria-labelledby="log-detail-{section}">(.*?)</section>', html, re.S).group(1)
    return {_text(dt): _text(dd) for dt, dd in re.findall(r"<dt>(.*?)</dt><dd[^>]*>(.*?)</dd>", block, re.S)}


def test_drawer_shows_a_fallback_with_two_failed_attempts(fell_back, admin_client):
    log, chain = fell_back

    response = admin_client.get(detail_url(log), headers=htmx("log-drawer-body"))

    html = response.content.decode()
    assert html.strip().startswith('<div id="log-detail"')
    assert _facts(html, "request") == {
        "Request id": log.request_id,
        "Time": _facts(html, "request")["Time"],
        "Gateway key": f"ursula laptop {log_views.request_log_labels([log]).keys[log.key_id].prefix}…",
        "User": "ursula",
        "Team": "red",
        "Application": "web",
        "Agent": "summariser",
        "Requested model": "default",
        "Routed model": "gpt-4o (after routing rules and aliases)",
        "Stream": "yes",
    }
    assert _facts(html, "outcome") == {
        "Status": "200",
        "Error kind": "—",
        "Latency": "2.35 s",
        "Time to first byte": "812 ms",
        "Tokens in / out": "1,200 / 345",
        "Cost": "$0.00123 priced at mistral",
    }
    assert _facts(html, "fallback") == {
        "Triggered": "yes",
        "Chain": "gpt-4o resilience",
        "Step that served": "2",
        "From provider": "openai",
        "Original model": "gpt-4o",
    }
    assert f'<a href="/fallback/chains/{chain.pk}/edit/">gpt-4o resilience</a>' in html
    attempts = [_text(li) for li in re.findall(r'<li class="attempt[^"]*">(.*?)</li>', html, re.S)]
    assert attempts == [
        "1 gpt-4o via openai 503 1.20 s failed",
        "2 claude via backup timeout 900 ms failed",
        "3 mistral via backup 200 240 ms served",
    ]
    assert "chain step 2 · from openai" in html


def test_drawer_links_to_the_circuit_in_logs_and_on_provider_health(fell_back, admin_client, bi_client):
    log, _ = fell_back

    admin_html = admin_client.get(detail_url(log)).content.decode()
    bi_html = bi_client.get(detail_url(log)).content.decode()

    around = log.created_at.replace(second=0, microsecond=0)
    start = (around - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    end = (around + timedelta(hours=1, minutes=1)).strftime("%Y-%m-%dT%H:%M")
    circuit_logs = (
        f'href="/logs/?provider=backup&amp;served_model=mistral&amp;from={start.replace(":", "%3A")}'
        f'&amp;to={end.replace(":", "%3A")}"'
    )
    health = f'href="/fallback/health/#circuit-row-{circuit_anchor("backup", "mistral")}"'
    assert circuit_logs in admin_html and health in admin_html
    # bi_read_only may not open Provider Health or edit chains: no links to pages that would answer 403.
    assert circuit_logs in bi_html and health not in bi_html
    assert "/fallback/chains/" not in bi_html and "gpt-4o resilience" in bi_html


def test_detail_url_opened_directly_is_a_full_page_with_the_same_details(fell_back, admin_client):
    log, _ = fell_back

    page = admin_client.get(detail_url(log)).content.decode()
    drawer = admin_client.get(detail_url(log), headers=htmx("log-drawer-body")).content.decode()
    restore = admin_client.get(
        detail_url(log), headers=htmx("log-drawer-body", **{"HX-History-Restore-Request": "true"})
    ).content.decode()

    assert "<html" in page and "← Request Logs" in page
    assert drawer in page  # the drawer is the page's detail block, unchanged
    assert "<html" in restore  # a history restore after a cache miss needs the whole page


def test_detail_of_an_unknown_or_malformed_id_is_404(rows, admin_client):
    assert admin_client.get("/logs/" + "f" * 32 + "/").status_code == 404
    assert admin_client.get("/logs/not-an-id/").status_code == 404


def test_rows_link_to_their_drawer(rows, admin_client):
    html = admin_client.get(LIST_URL).content.decode()

    rid = rows[0].request_id
    link = re.search(rf'<a id="log-link-{rid}"([^>]*)>', html).group(1)
    assert re.sub(r"\s+", " ", link).strip() == (
        f'href="/logs/{rid}/" class="log-link" hx-get="/logs/{rid}/" hx-target="#log-drawer-body" hx-swap="innerHTML" '
        f'hx-push-url="true" data-drawer-open aria-label="Request at {utc_time(rows[0].created_at)} UTC: details"'
    )


def test_a_row_from_an_earlier_day_has_its_visible_time_in_the_link_name(rows, admin_client):
    # The visible text of an older row carries its date ("Nov 30 23:59:58"); the accessible name must contain
    # it (WCAG 2.5.3, axe's label-content-name-mismatch), which the full timestamp alone did not.
    old = rows[0]
    old.created_at = old.created_at - timedelta(days=2)
    old.save(update_fields=["created_at"])

    html = admin_client.get(LIST_URL + "?range=7d").content.decode()

    link = re.search(
        rf'<a id="log-link-{old.request_id}"[^>]*aria-label="([^"]*)"[^>]*><time[^>]*>([^<]*)</time>', html
    )
    assert link is not None
    name, visible = link.groups()
    assert " " in visible and visible.split()[0].isalpha()  # "Mon DD HH:MM:SS": the date is shown
    assert visible in name


def test_list_shows_key_models_status_timing_tokens_cost_and_fallback_badge(fell_back, admin_client):
    log, _ = fell_back

    html = admin_client.get(LIST_URL).content.decode()

    row = re.search(rf'<tr id="log-row-{log.request_id}".*?</tr>', html, re.S).group(0)
    cells = {
        label: _text(cell) for label, cell in re.findall(r'<td[^>]*data-label="([^"]+)"[^>]*>(.*?)</td>', row, re.S)
    }
    prefix = log_views.request_log_labels([log]).keys[log.key_id].prefix
    assert {k: v for k, v in cells.items() if k != "Time (UTC)"} == {
        "Key": f"ursula laptop {prefix}",
        "Requested": "default",
        "Served by": "mistral via backup",
        "Status": "200 stream",
        "Latency": "2.35 s",
        "TTFB": "812 ms",
        "Tokens": "1,200 / 345",
        "Cost": "$0.00123",
        "Fallback": "chain step 2 · from openai",
    }


# ---------- Provider Health → Request Logs ----------


def test_provider_health_rows_link_to_their_requests_of_the_last_hour(log_catalog, admin_client):
    engine = MemoryEngine(clock=ManualClock(round(time.time(), 3)))
    engine.record(engine.allow("backup", "claude"), Outcome.of_status(503))
    mine = insert_logs(
        log_record(key=log_catalog.alice_key, served_provider="backup", served_model="claude", at=NOW - 60),
        log_record(key=log_catalog.alice_key, served_provider="backup", served_model="claude", at=NOW - 7200),
        log_record(key=log_catalog.alice_key, served_provider="openai", served_model="gpt-4o", at=NOW - 60),
    )

    with use_engine(engine):
        health = admin_client.get(reverse("health:index")).content.decode()
    link = re.search(r'id="logs-link-[^"]+"\s+href="([^"]+)"', health).group(1).replace("&amp;", "&")
    logs = admin_client.get(link)

    assert link == "/logs/?provider=backup&served_model=claude&range=1h"
    assert shown(logs) == [mine[0].request_id]


# ---------- CSV ----------


def test_csv_streams_the_current_filter_with_the_cap_in_its_name(fell_back, rows, admin_client):
    log, chain = fell_back

    response = admin_client.get(reverse("requestlogs:export"), {"fallback": "yes"})

    assert response.streaming
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert re.fullmatch(
        r'attachment; filename="request-logs-\d{8}T\d{4}Z-first-100000-rows\.csv"', response["Content-Disposition"]
    )
    table = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert len(table) == 1
    line = table[0]
    assert {
        k: line[k] for k in ("request_id", "served_provider", "served_model", "status", "chain_step", "chain_id")
    } == {
        "request_id": log.request_id,
        "served_provider": "backup",
        "served_model": "mistral",
        "status": "200",
        "chain_step": "2",
        "chain_id": str(chain.pk),
    }
    assert line["fallback_triggered"] == "true" and line["cost_usd"] == "0.00123000"
    assert line["attempts"] == "openai/gpt-4o 503 1200ms; backup/claude timeout 900ms; backup/mistral 200 240ms"
    assert line["key_name"] == "ursula laptop"


def test_csv_stops_at_the_cap(log_catalog, admin_client, monkeypatch):
    monkeypatch.setattr(log_views, "EXPORT_CAP", 3)
    rows = insert_logs(*(log_record(key=log_catalog.alice_key, at=NOW - i) for i in range(5)))

    response = admin_client.get(reverse("requestlogs:export"))

    table = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [line["request_id"] for line in table] == [r.request_id for r in rows[:3]]
    assert response["Content-Disposition"].endswith('-first-3-rows.csv"')


def test_csv_neutralises_spreadsheet_formulas(log_catalog, admin_client):
    insert_logs(log_record(key=log_catalog.alice_key, requested_model='=HYPERLINK("http://evil")'))

    body = b"".join(admin_client.get(reverse("requestlogs:export")).streaming_content).decode()

    assert next(csv.DictReader(io.StringIO(body)))["requested_model"] == '\'=HYPERLINK("http://evil")'


def test_csv_with_bad_filters_is_a_400_with_the_message(rows, admin_client):
    response = admin_client.get(reverse("requestlogs:export"), {"status": "9xx"})

    assert response.status_code == 400
    assert response.content.decode() == (
        "The filters are not valid:\nStatus: Unknown status class “9xx”: use 2xx, 4xx, 5xx, client_gone or errors.\n"
    )


@pytest.mark.django_db(transaction=True)
def test_csv_under_asgi_streams_the_same_rows(log_catalog, admin_user):
    # The console runs under ASGI in embedded mode: the export must stream there too (an async iterator).
    rows = insert_logs(*(log_record(key=log_catalog.alice_key, at=NOW - i) for i in range(3)))
    client = AsyncClient()

    async def fetch():
        await client.alogin(username=admin_user.username, password=PASSWORD)
        response = await client.get(reverse("requestlogs:export"))
        body = b"".join([chunk async for chunk in response.streaming_content])
        await sync_to_async(connections.close_all)()  # the handler's thread keeps its own connection
        return response, body

    from tests.servers import run_async

    response, body = run_async(fetch())
    assert response.is_async
    table = list(csv.DictReader(io.StringIO(body.decode())))
    assert [line["request_id"] for line in table] == [r.request_id for r in rows]


def test_follow_always_reads_newest_first(log_catalog, admin_client):
    rows = insert_logs(*(log_record(key=log_catalog.alice_key, at=NOW - i) for i in range(3)))

    following = admin_client.get(LIST_URL, {"follow": "1", "order": "oldest"})
    oldest = admin_client.get(LIST_URL, {"order": "oldest"})

    assert shown(following) == [r.request_id for r in rows]
    assert shown(oldest) == [r.request_id for r in reversed(rows)]


def test_meta_line_says_when_filters_narrow_the_rows(rows, admin_client):
    only_range = admin_client.get(LIST_URL, {"range": "1h"}).content.decode()
    narrowed = admin_client.get(LIST_URL, {"range": "1h", "provider": "openai"}).content.decode()

    assert "4 requests in the last hour ·" in _text(only_range)
    assert "4 requests in the last hour matching the filters ·" in _text(narrowed)


TOKEN = re.compile(r"[A-Za-z0-9_-]{40,}")


def test_paging_and_follow_links_carry_no_row_ids(log_catalog, user_client):
    # Row ids count every user's requests; a user must not be able to read them from the links.
    insert_logs(*(log_record(key=log_catalog.ursula_key, at=NOW - i) for i in range(30)))

    page = user_client.get(LIST_URL, {"follow": "1"}).content.decode()
    older = _links(user_client.get(LIST_URL))["next"]

    since = re.search(r'hx-get="/logs/\?follow=1&amp;since=([^"&]+)"', page).group(1)
    cursor = re.fullmatch(r"/logs/\?cursor=([^&]+)", older).group(1)
    assert TOKEN.fullmatch(since) and TOKEN.fullmatch(cursor)
    assert not re.search(r"data-(row-)?id=\"\d+\"", page)


def test_an_empty_page_past_the_end_leads_back(log_catalog, admin_client):
    rows = insert_logs(*(log_record(key=log_catalog.alice_key, at=NOW - i) for i in range(26)))
    older = _links(admin_client.get(LIST_URL))["next"]
    # The one row of page 2 goes (retention, say): page 2 is empty but still leads back.
    rows[-1].delete()

    empty = admin_client.get(older)

    html = empty.content.decode()
    assert shown(empty) == []
    assert "No more requests on this side in the last 24 h." in html
    back = admin_client.get(_links(empty)["prev"])
    assert shown(back) == [r.request_id for r in rows[:25]]


def test_the_follow_poll_with_filters_no_longer_valid_swaps_the_whole_region(log_catalog, admin_client):
    response = admin_client.get(
        LIST_URL, {"follow": "1", "team": "999999"}, headers=htmx("log-table", **{"HX-Trigger": "log-table"})
    )

    assert response["HX-Retarget"] == "#log-page"
    assert response["HX-Reswap"] == "outerHTML"
    assert response.content.decode().strip().startswith('<div id="log-page">')
    assert summary(response) == ["Team: Unknown team “999999”."]


def test_request_ids_that_cannot_exist_are_404_without_a_query(rows, admin_client):
    for path in ("/logs/%00/", "/logs/" + "g" * 32 + "/", "/logs/" + "a" * 33 + "/"):
        response = admin_client.get(path)

        assert response.status_code == 404, path
        assert "No request with this id in the logs you can see." in response.content.decode()


def test_unknown_urls_get_a_plain_not_found_page(admin_client):
    response = admin_client.get("/no-such-page/")

    assert response.status_code == 404
    html = response.content.decode()
    assert "There is nothing at this address." in html and "Resolver404" not in html


def test_custom_range_inputs_accept_seconds(log_catalog, admin_client):
    # A link with seconds (from the API, or shared) must not make the browser refuse the form.
    html = admin_client.get(LIST_URL, {"from": "2026-11-30T10:00:30"}).content.decode()

    assert 'id="log-from" name="from" value="2026-11-30T10:00:30" step="1"' in html


# ---------- The page's state through a filter error, and past the end ----------


def test_a_filter_error_keeps_oldest_first_and_follow_in_the_form(rows, admin_client):
    """Applying the corrected filter sends the form: without these, the list came back newest first, unfollowed."""
    oldest = admin_client.get(LIST_URL, {"order": "oldest", "status": "nope"}).content.decode()
    following = admin_client.get(LIST_URL, {"follow": "1", "status": "nope"}).content.decode()

    assert '<input type="hidden" name="order" value="oldest">' in oldest
    assert 'id="log-follow" name="follow" value="1" checked' in following
    assert 'name="order"' not in following  # following always reads newest first


def test_a_follow_poll_turned_into_an_error_keeps_follow_checked(log_catalog, admin_client):
    response = admin_client.get(
        LIST_URL, {"follow": "1", "team": "999999"}, headers=htmx("log-table", **{"HX-Trigger": "log-table"})
    )

    assert response["HX-Retarget"] == "#log-page"
    assert 'id="log-follow" name="follow" value="1" checked' in response.content.decode()


def test_to_without_from_shows_the_custom_range_the_error_is_on(rows, admin_client):
    html = admin_client.get(LIST_URL, {"to": "2026-12-01T00:00"}).content.decode()

    assert "A custom range needs a start" in html
    assert '<option value="custom" selected>' in html
    assert "data-range-custom data-collapsed" not in html


def test_an_empty_page_past_the_end_still_counts_the_matching_requests(log_catalog, admin_client):
    rows = insert_logs(*(log_record(key=log_catalog.alice_key, at=NOW - i) for i in range(26)))
    older = _links(admin_client.get(LIST_URL))["next"]
    rows[-1].delete()  # the only row of the second page

    html = admin_client.get(older).content.decode()

    assert "No more requests on this side" in html
    meta = re.search(r'<div class="table-meta log-meta">(.*?)</div>', html, re.S).group(1)
    assert re.search(r"<strong>25</strong> requests", meta)


def test_a_cost_below_a_millionth_of_a_dollar_shows_as_stored():
    assert usd(Decimal("0.00000040")) == "$0.0000004"
    assert usd(Decimal("0.01250000")) == "$0.0125"
    assert usd(Decimal("1.5")) == "$1.50"
    assert usd(Decimal("0")) == "$0.00"
