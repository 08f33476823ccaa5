"""Request-log reads: keyset pages (ties included), signed cursors, every filter, visibility, capped counts."""

import re
import time
from datetime import UTC, datetime, timedelta

import pytest

from core.errors import ValidationFailed
from requestlogs.selectors import (
    Attempt,
    Cursor,
    Direction,
    LogFilter,
    StatusClass,
    Viewer,
    log_attempts,
    mark_decode,
    mark_encode,
    request_log_batches,
    request_log_count,
    request_log_get,
    request_log_page,
    viewer_for,
)
from requestlogs.tokens import seal
from tests.factories.requestlogs import fallback, insert_logs, log_record

pytestmark = pytest.mark.django_db

ALL = Viewer(sees_all=True)
NO_FILTER = LogFilter()
NOW = time.time()


def ids(rows) -> list[str]:
    return [r.request_id for r in rows]


def walk(*, filters=NO_FILTER, page_size: int, newest_first: bool = True, viewer=ALL):
    """Every page from the first by "next" cursors, then back by "previous" cursors."""
    forward, cursor = [], None
    while True:
        page = request_log_page(
            viewer=viewer, filters=filters, page_size=page_size, newest_first=newest_first, cursor=cursor
        )
        forward.append(ids(page.rows))
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    backward = [ids(page.rows)]
    while page.prev_cursor is not None:
        page = request_log_page(
            viewer=viewer, filters=filters, page_size=page_size, newest_first=newest_first, cursor=page.prev_cursor
        )
        backward.append(ids(page.rows))
    return forward, backward


@pytest.fixture
def tied_rows(log_catalog):
    # Seven rows; three share one timestamp and two another, so only the id breaks those ties.
    moments = [NOW - 50, NOW - 40, NOW - 40, NOW - 40, NOW - 30, NOW - 20, NOW - 20]
    return insert_logs(*(log_record(key=log_catalog.alice_key, at=m) for m in moments))


def test_keyset_pages_newest_first_cover_every_row_once_across_equal_timestamps(tied_rows):
    expected = ids(sorted(tied_rows, key=lambda r: (r.created_at, r.pk), reverse=True))

    forward, backward = walk(page_size=3)

    assert forward == [expected[0:3], expected[3:6], expected[6:7]]
    assert backward == [expected[6:7], expected[3:6], expected[0:3]]


def test_keyset_pages_oldest_first_are_the_mirror_image(tied_rows):
    expected = ids(sorted(tied_rows, key=lambda r: (r.created_at, r.pk)))

    forward, backward = walk(page_size=2, newest_first=False)

    assert forward == [expected[0:2], expected[2:4], expected[4:6], expected[6:7]]
    assert backward == [expected[6:7], expected[4:6], expected[2:4], expected[0:2]]


def test_previous_page_that_is_short_returns_the_full_first_page(tied_rows):
    newest = sorted(tied_rows, key=lambda r: (r.created_at, r.pk), reverse=True)
    # A "previous" cursor at the second-newest row: only one row is newer, so the first page comes back whole.
    cursor = Cursor.at(Direction.PREV, newest[1])

    page = request_log_page(viewer=ALL, filters=LogFilter(), page_size=3, cursor=cursor)

    assert ids(page.rows) == ids(newest[:3])
    assert page.prev_cursor is None
    assert page.next_cursor == Cursor.at(Direction.NEXT, newest[2])


def test_next_cursor_past_the_end_gives_an_empty_page_that_leads_back(tied_rows):
    newest_first = sorted(tied_rows, key=lambda r: (r.created_at, r.pk), reverse=True)
    oldest = newest_first[-1]

    page = request_log_page(viewer=ALL, filters=LogFilter(), page_size=3, cursor=Cursor.at(Direction.NEXT, oldest))
    back = request_log_page(viewer=ALL, filters=LogFilter(), page_size=3, cursor=page.prev_cursor)

    assert (page.rows, page.next_cursor, page.prev_cursor) == ([], None, Cursor.at(Direction.PREV, oldest))
    assert ids(back.rows) == ids(newest_first[3:6])


def test_cursor_round_trips_to_the_microsecond():
    cursor = Cursor(Direction.NEXT, datetime(2026, 12, 1, 7, 40, 1, 123456, tzinfo=UTC), 42)

    assert Cursor.decode(cursor.encode()) == cursor


@pytest.mark.parametrize(
    "tamper",
    [
        lambda v: v[:10] + ("A" if v[10] != "A" else "B") + v[11:],  # one character changed
        lambda v: v[:-2],  # cut short
        lambda v: v + "AA",  # made longer
        lambda v: mark_encode(42),  # a token sealed for another purpose
        lambda v: "n1796111234637184.85:z9LTH9i7gANL4umX3slcAyC_gdW6rcPD5wUDXnXelKY",  # a signed, readable cursor
        lambda v: "garbage!",
        lambda v: "",
    ],
)
def test_tampered_cursor_is_refused_with_a_message(tamper):
    value = Cursor(Direction.NEXT, datetime(2026, 12, 1, tzinfo=UTC), 42).encode()

    with pytest.raises(ValidationFailed) as caught:
        Cursor.decode(tamper(value))

    assert caught.value.message == "This paging link is invalid or was altered; start again from the first page."


def test_a_sealed_cursor_with_a_bad_payload_is_refused():
    for payload in ("x123.4", "n.4", "nabc.4", "n1.", "n1.2.3", "n99999999999999999999999.1", ""):
        with pytest.raises(ValidationFailed):
            Cursor.decode(seal(payload, purpose="cursor"))


def test_tokens_reveal_no_row_id():
    cursor = Cursor(Direction.NEXT, datetime(2026, 12, 1, tzinfo=UTC), 123456789)

    tokens = [cursor.encode(), cursor.encode(), mark_encode(123456789)]

    assert all(re.fullmatch(r"[A-Za-z0-9_-]{40,}", t) for t in tokens)
    assert tokens[0] != tokens[1]  # a fresh nonce each time: equal positions do not even look equal
    assert not any("123456789" in t for t in tokens)
    assert (Cursor.decode(tokens[0]), mark_decode(tokens[2])) == (cursor, 123456789)


FILTER_CASES = {
    # name: (fields of the matching row, fields of a row that must not match, the filter)
    "requested_model": ({"requested_model": "default"}, {"requested_model": "gpt-4o"}, {"requested_model": "default"}),
    "served_model": ({"served_model": "claude"}, {"served_model": "gpt-4o"}, {"served_model": "claude"}),
    "provider": ({"served_provider": "backup"}, {"served_provider": "openai"}, {"provider": "backup"}),
    "fallback_yes": (
        {"fallback_triggered": True, "chain_step": 1},
        {"fallback_triggered": False},
        {"fallback": True},
    ),
    "fallback_no": ({"fallback_triggered": False}, {"fallback_triggered": True, "chain_step": 2}, {"fallback": False}),
    "chain_step": ({"chain_step": 2, "fallback_triggered": True}, {"chain_step": 1}, {"chain_step": 2}),
    "chain_step_primary": ({"chain_step": 0}, {"chain_step": 1, "fallback_triggered": True}, {"chain_step": 0}),
    "stream_yes": ({"stream": True}, {"stream": False}, {"stream": True}),
    "stream_no": ({"stream": False}, {"stream": True}, {"stream": False}),
}


@pytest.mark.parametrize("case", FILTER_CASES)
def test_each_filter_selects_exactly_its_rows(log_catalog, case):
    matching, other, filters = FILTER_CASES[case]
    rows = insert_logs(
        log_record(key=log_catalog.alice_key, **matching),
        log_record(key=log_catalog.alice_key, **other),
        log_record(key=log_catalog.alice_key, **matching, at=NOW - 1),
    )

    page = request_log_page(viewer=ALL, filters=LogFilter(**filters), page_size=25)

    assert ids(page.rows) == [rows[0].request_id, rows[2].request_id]


@pytest.mark.parametrize("attr", ["key", "team", "application"])
def test_key_team_and_application_filters(log_catalog, attr):
    rows = insert_logs(
        log_record(key=log_catalog.ursula_key),
        log_record(key=log_catalog.oscar_key),
        log_record(key=log_catalog.alice_key),
    )
    target = {"key": log_catalog.ursula_key.pk, "team": log_catalog.red.pk, "application": log_catalog.web.pk}[attr]
    filters = LogFilter(**{f"{attr}_id": target})

    page = request_log_page(viewer=ALL, filters=filters, page_size=25)

    assert ids(page.rows) == [rows[0].request_id]


def test_status_classes_split_2xx_4xx_5xx_and_client_gone(log_catalog):
    by_status = {
        s: insert_logs(log_record(key=log_catalog.alice_key, status=s))[0] for s in (200, 201, 404, 429, 499, 502, 503)
    }

    def statuses(status_class):
        page = request_log_page(viewer=ALL, filters=LogFilter(status_class=status_class), page_size=25)
        return sorted(r.status for r in page.rows)

    assert statuses(StatusClass.OK) == [200, 201]
    assert statuses(StatusClass.CLIENT_ERROR) == [404, 429]
    assert statuses(StatusClass.SERVER_ERROR) == [502, 503]
    assert statuses(StatusClass.CLIENT_GONE) == [499]
    assert len(by_status) == 7


def test_time_range_includes_since_and_excludes_until(log_catalog):
    base = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    rows = insert_logs(
        *(log_record(key=log_catalog.alice_key, at=(base + timedelta(minutes=m)).timestamp()) for m in range(4))
    )

    page = request_log_page(
        viewer=ALL,
        filters=LogFilter(since=base + timedelta(minutes=1), until=base + timedelta(minutes=3)),
        page_size=25,
    )

    assert ids(page.rows) == [rows[2].request_id, rows[1].request_id]


def test_filters_combine(log_catalog):
    rows = insert_logs(
        log_record(key=log_catalog.ursula_key, **fallback()),
        log_record(key=log_catalog.ursula_key, served_provider="backup", served_model="claude"),
        log_record(key=log_catalog.oscar_key, **fallback()),
    )

    page = request_log_page(
        viewer=ALL,
        filters=LogFilter(provider="backup", served_model="claude", fallback=True, key_id=log_catalog.ursula_key.pk),
        page_size=25,
    )

    assert ids(page.rows) == [rows[0].request_id]


def test_a_user_sees_only_their_own_keys_requests(log_catalog, plain_user):
    mine = insert_logs(log_record(key=log_catalog.ursula_key), log_record(key=log_catalog.ursula_key2, at=NOW - 1))
    insert_logs(log_record(key=log_catalog.oscar_key), log_record(key=log_catalog.alice_key))
    # A row made with ursula's key while it belonged to someone else stays theirs.
    insert_logs(log_record(key=log_catalog.ursula_key, user_id=log_catalog.oscar.pk))
    viewer = viewer_for(plain_user)

    page = request_log_page(viewer=viewer, filters=LogFilter(), page_size=25)

    assert ids(page.rows) == ids(mine)
    assert request_log_count(viewer=viewer, filters=LogFilter()).value == 2
    assert request_log_get(viewer=viewer, request_id=mine[0].request_id) == mine[0]


def test_a_user_cannot_get_another_users_request_by_id(log_catalog, plain_user):
    theirs = insert_logs(log_record(key=log_catalog.oscar_key))[0]

    assert request_log_get(viewer=viewer_for(plain_user), request_id=theirs.request_id) is None
    assert request_log_get(viewer=ALL, request_id=theirs.request_id) == theirs


def test_a_user_without_keys_sees_nothing(log_catalog, django_user_model):
    from tests.conftest import _make_user

    insert_logs(log_record(key=log_catalog.oscar_key))
    viewer = viewer_for(_make_user(django_user_model, "newbie", "user"))

    assert viewer == Viewer(sees_all=False, user_id=viewer.user_id, key_ids=())
    assert request_log_page(viewer=viewer, filters=LogFilter(), page_size=25).rows == []
    assert request_log_count(viewer=viewer, filters=LogFilter()).value == 0


def test_roles_map_to_viewers(log_catalog, admin_user, bi_user, plain_user, django_user_model):
    from tests.conftest import _make_user

    assert viewer_for(admin_user) == ALL
    assert viewer_for(bi_user) == ALL
    assert viewer_for(plain_user) == Viewer(
        sees_all=False,
        user_id=plain_user.pk,
        key_ids=tuple(sorted([log_catalog.ursula_key.pk, log_catalog.ursula_key2.pk])),
    )
    assert viewer_for(_make_user(django_user_model, "nobody", None)) is None


def test_count_is_capped(log_catalog):
    insert_logs(*(log_record(key=log_catalog.alice_key) for _ in range(5)))

    assert request_log_count(viewer=ALL, filters=LogFilter(), cap=3) == type(
        request_log_count(viewer=ALL, filters=LogFilter())
    )(3, True)
    assert request_log_count(viewer=ALL, filters=LogFilter(), cap=5).capped is False
    assert request_log_count(viewer=ALL, filters=LogFilter(), cap=5).value == 5


def test_batches_stop_at_the_limit_in_display_order(log_catalog):
    rows = insert_logs(*(log_record(key=log_catalog.alice_key, at=NOW - i) for i in range(7)))

    batches = list(request_log_batches(viewer=ALL, filters=LogFilter(), limit=6, batch_size=3, first_batch_size=1))

    assert [ids(b) for b in batches] == [ids(rows[0:1]), ids(rows[1:4]), ids(rows[4:6])]
    assert batches[0][0].attempts == rows[0].attempts


def test_attempts_read_odd_values_as_unknown(log_catalog):
    log = insert_logs(
        log_record(
            key=log_catalog.alice_key,
            attempts=[
                {"provider": "openai", "model": "gpt-4o", "status": 503, "error": None, "duration_ms": 12},
                {"provider": "backup", "status": "200", "error": "timeout", "duration_ms": "fast"},
                {"provider": "backup", "model": "claude", "status": True},
                "not an attempt",
            ],
        )
    )[0]

    assert log_attempts(log) == [
        Attempt(provider="openai", model="gpt-4o", status=503, error="", duration_ms=12.0),
        Attempt(provider="backup", model="", status=None, error="timeout", duration_ms=None),
        Attempt(provider="backup", model="claude", status=None, error="", duration_ms=None),
        Attempt(provider="", model="", status=None, error="", duration_ms=None),
    ]
