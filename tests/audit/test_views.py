"""Audit Log page: roles, filters in the URL, newest first, paging, before/after side by side."""

import re

import pytest
from django.db import transaction
from django.urls import reverse

from audit.models import AuditEvent
from chains.services import ChainInput, EntryInput, chain_create, chain_delete, chain_set_enabled, chain_update
from tests.factories import LlmModelFactory, ProviderFactory, UserFactory

URL = "/audit/"
HX = {"HX-Request": "true"}


def event_ids(response) -> list[int]:
    return [int(pk) for pk in re.findall(r'<tr id="audit-row-(\d+)"', response.content.decode())]


def is_full_page(response) -> bool:
    html = response.content.decode()
    return html.lstrip().startswith("<!doctype html>") and 'class="topbar"' in html


@pytest.fixture
def history(db, admin_user):
    """create, update, disable and delete of one chain by alice, plus a create by bob."""
    LlmModelFactory(name="gpt-4o")
    LlmModelFactory(name="gpt-4o-mini")
    LlmModelFactory(name="claude-haiku")
    LlmModelFactory(name="claude-opus")
    bob = UserFactory(username="bob")
    chain = chain_create(
        actor=admin_user,
        data=ChainInput(name="primary", source_model="gpt-4o", entries=[EntryInput("gpt-4o-mini")]),
    )
    chain = chain_update(
        actor=admin_user,
        chain_id=chain.pk,
        version=chain.version,
        data=ChainInput(
            name="primary v2",
            source_model="gpt-4o",
            entries=[EntryInput("claude-haiku"), EntryInput("gpt-4o-mini")],
        ),
    )
    chain_set_enabled(actor=admin_user, chain_id=chain.pk, enabled=False)
    chain_delete(actor=admin_user, chain_id=chain.pk)
    other = chain_create(
        actor=bob, data=ChainInput(name="<b>bold</b>", source_model="claude-opus", entries=[EntryInput("claude-haiku")])
    )
    events = {e.action + (":bob" if e.actor_name == "bob" else ""): e for e in AuditEvent.objects.all()}
    return {"chain_id": chain.pk, "other_id": other.pk, "events": events}


def test_role_matrix(role_client):
    role, client = role_client

    response = client.get(URL)
    htmx_response = client.get(URL, headers=HX)

    expected = {"admin": 200, "bi_read_only": 200, "user": 403, "anonymous": 302}[role]
    assert response.status_code == expected
    if role == "anonymous":
        assert response.url == "/login/?next=/audit/"
        assert htmx_response["HX-Redirect"] == "/login/?next=/audit/"
    if role == "user":
        assert htmx_response.status_code == 403


def test_audit_page_refuses_posts(admin_client):
    assert admin_client.post(URL).status_code == 405


def test_full_page_without_htmx(bi_client, history):
    response = bi_client.get(URL)

    html = response.content.decode()
    assert is_full_page(response)
    assert 'id="audit-table"' in html
    assert 'aria-current="page">Audit Log</a>' in html


def test_htmx_returns_only_the_table(bi_client, history):
    response = bi_client.get(URL, {"action": "chain.update"}, headers={**HX, "HX-Target": "audit-table"})

    html = response.content.decode()
    assert html.lstrip().startswith('<div id="audit-table"')
    assert "<html" not in html and 'class="topbar"' not in html
    assert response["HX-Push-Url"] == "/audit/?action=chain.update"
    assert event_ids(response) == [history["events"]["chain.update"].pk]


def test_newest_first(admin_client, history):
    response = admin_client.get(URL)

    assert event_ids(response) == list(AuditEvent.objects.order_by("-id").values_list("pk", flat=True))
    assert len(event_ids(response)) == 5


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"actor": "bob"}, ["chain.create:bob"]),
        ({"actor": "alice"}, ["chain.delete", "chain.disable", "chain.update", "chain.create"]),
        ({"action": "chain.disable"}, ["chain.disable"]),
        ({"action": "chain.create"}, ["chain.create:bob", "chain.create"]),
        ({"actor": "alice", "action": "chain.create"}, ["chain.create"]),
        ({"object_type": "chain", "object_id": "OTHER"}, ["chain.create:bob"]),
        ({"object_type": "api_key"}, []),
    ],
)
def test_filters_by_actor_action_and_object(admin_client, history, params, expected):
    if params.get("object_id") == "OTHER":
        params = {**params, "object_id": str(history["other_id"])}

    response = admin_client.get(URL, params)

    assert event_ids(response) == [history["events"][key].pk for key in expected]


def test_filter_options_and_selected_values(admin_client, history):
    response = admin_client.get(URL, {"actor": "bob", "action": "chain.create"})

    html = response.content.decode()
    assert '<option value="bob" selected>bob</option>' in html
    assert '<option value="alice">alice</option>' in html
    assert '<option value="chain.create" selected>chain.create</option>' in html
    assert '<a class="btn" href="/audit/">Clear filters</a>' in html


def test_no_match_says_so(admin_client, history):
    response = admin_client.get(URL, {"action": "nothing"})

    assert event_ids(response) == []
    assert "No events match these filters" in response.content.decode()


def test_empty_log(admin_client):
    assert "No events yet" in admin_client.get(URL).content.decode()


def test_object_link_filters_to_that_object(admin_client, history):
    chain_id = history["chain_id"]

    html = admin_client.get(URL).content.decode()

    link = f"/audit/?object_type=chain&amp;object_id={chain_id}"
    assert f'<a href="{link}" title="All events of this object">chain #{chain_id}</a>' in html


def test_update_shows_changed_fields_before_and_after_side_by_side(admin_client, history):
    event = history["events"]["chain.update"]

    html = admin_client.get(URL, {"action": "chain.update"}).content.decode()

    row = html[html.index(f'<tr id="audit-row-{event.pk}">') :]
    cells = re.findall(r'<td class="(field|before|after|none)">(.*?)</td>', row, re.S)
    assert cells == [
        ("field", "name"),
        ("before", "primary"),
        ("after", "primary v2"),
        ("field", "entries"),
        ("before", "1. gpt-4o-mini"),
        ("after", "1. claude-haiku\n2. gpt-4o-mini"),
    ]


def test_create_and_delete_show_one_side(admin_client, history):
    create = history["events"]["chain.create"]
    delete = history["events"]["chain.delete"]

    create_html = admin_client.get(URL, {"action": "chain.create", "actor": "alice"}).content.decode()
    delete_html = admin_client.get(URL, {"action": "chain.delete"}).content.decode()
    toggle_html = admin_client.get(URL, {"action": "chain.disable"}).content.decode()

    assert f'<tr id="audit-row-{create.pk}">' in create_html
    assert '<td class="field">source_model</td>\n                          <td class="none">—</td>' in create_html
    assert '<td class="after">global</td>' in create_html
    assert f'<tr id="audit-row-{delete.pk}">' in delete_html
    assert '<td class="before">primary v2</td>' in delete_html
    assert '<td class="before">true</td>' in toggle_html and '<td class="after">false</td>' in toggle_html


def test_paging(admin_client, admin_user):
    LlmModelFactory(name="src")
    targets = [LlmModelFactory(name=f"t{i}") for i in range(30)]
    for i, target in enumerate(targets):
        chain_create(
            actor=admin_user,
            data=ChainInput(
                name=f"c{i}",
                source_model="src",
                entries=[EntryInput(target.name)],
                scope_type="user",
                scope_id=UserFactory(username=f"u{i}").pk,
            ),
        )
    newest = list(AuditEvent.objects.order_by("-id").values_list("pk", flat=True))

    first = admin_client.get(URL)
    second = admin_client.get(URL, {"page": 2})
    small = admin_client.get(URL, {"page_size": 10, "page": 3})

    assert event_ids(first) == newest[:25]
    assert event_ids(second) == newest[25:]
    assert event_ids(small) == newest[20:30]
    assert "1–25 of 30 events" in first.content.decode()


def test_user_strings_are_escaped(admin_client, history):
    html = admin_client.get(URL).content.decode()

    assert "<b>bold</b>" not in html
    assert "&lt;b&gt;bold&lt;/b&gt;" in html


@pytest.mark.parametrize("rows", [1, 3])
def test_query_count_does_not_grow_with_rows(admin_client, admin_user, django_assert_num_queries, rows):
    LlmModelFactory(name="src")
    for i in range(rows):
        chain_create(
            actor=admin_user,
            data=ChainInput(
                name=f"c{i}",
                source_model="src",
                entries=[EntryInput(LlmModelFactory().name)],
                scope_type="user",
                scope_id=UserFactory(username=f"u{i}").pk,
            ),
        )
    admin_client.get(URL)

    # session, user, roles, count, events, 3 filter option lists
    with django_assert_num_queries(8):
        response = admin_client.get(URL)

    assert len(event_ids(response)) == rows


def test_reverse_name():
    assert reverse("audit:list") == URL


def test_a_circuit_of_the_longest_names_is_audited_and_found_by_its_id(admin_client, admin_user):
    """A circuit's object id is "provider/model": up to 64 + 1 + 128 characters."""
    from health.services import breaker_override_set

    LlmModelFactory(name="m" * 128, provider=ProviderFactory(name="p" * 64))
    LlmModelFactory(name="short", provider=ProviderFactory(name="p"))
    with transaction.atomic():
        breaker_override_set(actor=admin_user, provider="p", model="short", data={"window_seconds": 30})
    circuit = f"{'p' * 64}/{'m' * 128}"

    with transaction.atomic():
        breaker_override_set(actor=admin_user, provider="p" * 64, model="m" * 128, data={"window_seconds": 30})

    event = AuditEvent.objects.get(action="breaker_override.set", object_repr__contains="p" * 64)
    assert event.object_id == circuit
    response = admin_client.get(URL, {"object_type": "breaker_override", "object_id": circuit})
    assert event_ids(response) == [event.pk]
    assert admin_client.get("/api/audit/", {"object_id": circuit}).json()["count"] == 1


@pytest.mark.django_db
def test_an_object_link_opens_a_whole_page_so_the_filter_form_shows_the_object(admin_client):
    """Swapping only the table left the form above it at "Any object": the next filter change dropped the
    object filter the user was looking at."""
    from audit.services import audit_record

    with transaction.atomic():
        audit_record(actor=None, action="x.update", object_type="chain", object_id=5, after={"a": 1})

    html = admin_client.get(URL).content.decode()
    link = re.search(r'<a href="([^"]+)"[^>]*title="All events of this object">', html)
    assert link is not None and "hx-get" not in link.group(0)
    page = admin_client.get(link.group(1).replace("&amp;", "&")).content.decode()
    assert re.search(r'name="object_id"[^>]*value="5"', page)
