"""Console views of the Fallback page: list, editor, toggle, delete; roles, HTMX partials, CSRF, escaping."""

import re

import pytest
from django.test import Client
from django.urls import reverse

from audit.models import AuditEvent
from catalog.enums import ScopeType
from chains.models import FallbackChain
from chains.services import ChainInput, EntryInput, chain_update
from tests.factories import (
    ChainFactory,
    LlmModelFactory,
    ProviderFactory,
    RoutingRuleFactory,
    TeamFactory,
)

HX = {"HX-Request": "true"}
LIST_URL = "/fallback/chains/"


def row_ids(response) -> list[int]:
    return [int(pk) for pk in re.findall(r'<tr id="chain-row-(\d+)"', response.content.decode())]


def is_full_page(response) -> bool:
    html = response.content.decode()
    return html.lstrip().startswith("<!doctype html>") and 'class="topbar"' in html


def toggle_url(chain) -> str:
    return reverse("chains:toggle", args=[chain.pk])


def delete_url(chain) -> str:
    return reverse("chains:delete", args=[chain.pk])


def edit_url(chain) -> str:
    return reverse("chains:edit", args=[chain.pk])


def error_text(response, field_id: str) -> list[str]:
    """Inline error messages rendered next to one field."""
    html = response.content.decode()
    return re.findall(rf'<span class="error" id="{re.escape(field_id)}-error">(.*?)</span>', html)


def form_data(**overrides) -> dict[str, str]:
    data = {
        "name": "gpt-4o fallback",
        "source_model": "gpt-4o",
        "entries-0-model": "gpt-4o-mini",
        "entries-0-provider": "",
        "entries-1-model": "claude-opus",
        "entries-1-provider": "",
        "scope_type": "global",
        "scope_id": "",
        "enabled": "on",
        "version": "",
        "op": "save",
    }
    data.update(overrides)
    return {k: v for k, v in data.items() if v is not None}


# ---------- The frame ----------


def test_list_full_page_has_frame_tabs_and_table(admin_client):
    ChainFactory(name="primary")

    response = admin_client.get(LIST_URL)

    html = response.content.decode()
    assert response.status_code == 200
    assert is_full_page(response)
    assert '<body hx-headers=\'{"X-CSRFToken": "' in html
    assert 'name="htmx-config"' in html and '"includeIndicatorStyles": false' in html
    assert 'id="fallback-page"' in html and 'id="chain-table"' in html
    assert '<a href="/fallback/chains/" hx-get="/fallback/chains/"' in html
    assert 'aria-current="page">Fallback Chains</a>' in html
    assert "Admin" in html and "alice" in html


def test_frame_shows_environment_badge_and_role(admin_client, settings):
    response = admin_client.get(LIST_URL)

    html = response.content.decode()
    assert f">{settings.ENVIRONMENT_NAME}</span>" in html
    assert '<span class="role">· Admin</span>' in html


def test_frame_uses_no_inline_script_or_style(admin_client):
    ChainFactory(name="primary")

    html = admin_client.get(LIST_URL).content.decode()

    assert re.findall(r"<script(?![^>]*\bsrc=)[^>]*>", html) == []
    assert " style=" not in html and "<style" not in html
    assert "hx-on" not in html
    # No third-party host (a random token in the page may spell "cdn"; a CDN reference is a URL).
    assert not re.search(r"//[^\s\"']*cdn", html.lower())


def test_nav_link_to_fallback_only_for_admin(bi_client, user_client, admin_client):
    admin_html = admin_client.get(reverse("audit:list")).content.decode()
    bi_html = bi_client.get(reverse("audit:list")).content.decode()
    user_html = user_client.get(reverse("requestlogs:list")).content.decode()

    assert 'href="/fallback/"' in admin_html
    assert 'href="/fallback/"' not in bi_html
    assert 'href="/fallback/"' not in user_html
    assert 'href="/audit/"' in bi_html
    assert 'href="/audit/"' not in user_html


def test_home_sends_each_role_to_its_first_page(admin_client, bi_client, user_client, anon_client):
    # Admin and bi_read_only land on the Dashboard itself (tests/dashboards); a user on their request logs.
    assert admin_client.get("/").status_code == 200
    assert bi_client.get("/").status_code == 200
    assert user_client.get("/").url == "/logs/"
    assert anon_client.get("/").url == "/login/?next=/"


def test_home_tells_a_user_without_a_role_to_ask_an_admin(django_user_model):
    client = Client()
    client.force_login(django_user_model.objects.create_user(username="norole", password="x"))

    response = client.get("/")

    assert response.status_code == 200
    assert "Welcome, norole" in response.content.decode()
    assert "Ask an admin" in response.content.decode()


def test_login_page_renders_and_logs_in(anon_client, admin_user):
    page = anon_client.get("/login/")
    bad = anon_client.post("/login/", {"username": "alice", "password": "wrong"})
    good = anon_client.post("/login/", {"username": "alice", "password": "correct-horse-battery"})

    assert page.status_code == 200 and 'name="username"' in page.content.decode()
    assert "Please enter a correct username and password" in bad.content.decode()
    assert good.status_code == 302 and good.url == "/"


# ---------- Role matrix ----------


def _console_requests(chain) -> list[tuple[str, str, dict]]:
    return [
        ("get", LIST_URL, {}),
        ("get", reverse("health:index"), {}),
        ("get", reverse("chains:create"), {}),
        ("post", reverse("chains:create"), form_data(name="made by a role")),
        ("get", edit_url(chain), {}),
        ("post", edit_url(chain), form_data(name="edited by a role", version=str(chain.version))),
        ("post", toggle_url(chain), {"enabled": "0"}),
        ("get", delete_url(chain), {}),
        ("post", delete_url(chain), {}),
    ]


@pytest.mark.parametrize("index", range(9))
def test_role_matrix_for_every_fallback_url(role_client, chain_catalog, index):
    role, client = role_client
    chain = ChainFactory(name="target", source_model=chain_catalog["haiku"], entries=[chain_catalog["mini"]])
    method, url, data = _console_requests(chain)[index]

    response = getattr(client, method)(url, data)

    if role == "admin":
        assert response.status_code in (200, 302)
        if response.status_code == 302:
            assert response.url.startswith("/fallback/")
    elif role == "anonymous":
        assert response.status_code == 302
        assert response.url.startswith("/login/?next=")
    else:
        assert response.status_code == 403
    if role != "admin":
        chain.refresh_from_db()
        assert (chain.name, chain.enabled) == ("target", True)
        assert FallbackChain.objects.count() == 1
        assert AuditEvent.objects.count() == 0


def test_fallback_root_redirects_to_the_chains_tab(admin_client):
    response = admin_client.get("/fallback/")

    assert response.status_code == 302
    assert response.url == LIST_URL


def test_anonymous_htmx_request_gets_hx_redirect_to_login(anon_client):
    response = anon_client.get(LIST_URL, headers=HX)

    assert response.status_code == 204
    assert response["HX-Redirect"] == "/login/?next=/fallback/chains/"


def test_forbidden_page_explains_and_keeps_frame(bi_client):
    response = bi_client.get(LIST_URL)

    assert response.status_code == 403
    assert "Your role does not allow this page." in response.content.decode()
    assert is_full_page(response)


# ---------- List: HTMX partials ----------


def test_list_over_htmx_returns_only_the_table(admin_client):
    chain = ChainFactory(name="primary")

    response = admin_client.get(LIST_URL, {"q": "prim"}, headers={**HX, "HX-Target": "chain-table"})

    html = response.content.decode()
    assert response.status_code == 200
    assert html.lstrip().startswith('<div id="chain-table"')
    assert not is_full_page(response) and "<html" not in html and 'id="fallback-page"' not in html
    assert row_ids(response) == [chain.pk]
    assert response["HX-Push-Url"] == "/fallback/chains/?q=prim"
    # The sort kept by the search form outside the table is refreshed out of band.
    assert 'id="chain-sort" value="" hx-swap-oob="true"' in html
    assert "HX-Request" in response["Vary"]


def test_tab_switch_over_htmx_returns_the_fallback_page_region(admin_client):
    response = admin_client.get(LIST_URL, headers={**HX, "HX-Target": "fallback-page"})

    html = response.content.decode()
    assert html.lstrip().startswith('<div id="fallback-page"')
    assert 'id="chain-table"' in html
    assert "<html" not in html


def test_history_restore_gets_the_full_page(admin_client):
    response = admin_client.get(LIST_URL, headers={**HX, "HX-History-Restore-Request": "true"})

    assert is_full_page(response)


def test_health_tab_full_page_and_partial(admin_client):
    full = admin_client.get(reverse("health:index"))
    partial = admin_client.get(reverse("health:index"), headers={**HX, "HX-Target": "fallback-page"})

    assert is_full_page(full)
    assert "No circuits tracked yet" in full.content.decode()
    assert 'aria-current="page">Provider Health</a>' in full.content.decode()
    assert partial.content.decode().lstrip().startswith('<div id="fallback-page"')
    assert "<html" not in partial.content.decode()


# ---------- List: search, sort, paging ----------


def test_empty_list_says_what_to_do(admin_client):
    response = admin_client.get(LIST_URL)

    html = response.content.decode()
    assert "No chains yet — " in html
    assert '<a href="/fallback/chains/new/">Add Chain</a>' in html


def test_search_is_multi_word_and_over_name_and_source(admin_client, chain_catalog):
    hit = ChainFactory(name="payments primary", source_model=chain_catalog["source"], entries=[chain_catalog["mini"]])
    ChainFactory(name="payments backup", source_model=chain_catalog["haiku"], entries=[chain_catalog["mini"]])
    ChainFactory(name="search", source_model=chain_catalog["opus"], entries=[chain_catalog["mini"]])

    response = admin_client.get(LIST_URL, {"q": "payments gpt-4o"})

    assert row_ids(response) == [hit.pk]
    assert 'value="payments gpt-4o"' in response.content.decode()


def test_search_without_match_shows_its_own_empty_state(admin_client):
    ChainFactory(name="primary")

    response = admin_client.get(LIST_URL, {"q": "nothing-like-this"})

    assert row_ids(response) == []
    assert "No chains match “nothing-like-this”" in response.content.decode()


def test_default_order_is_newest_first(admin_client):
    chains = [ChainFactory(name=f"chain {i}") for i in range(3)]

    response = admin_client.get(LIST_URL)

    assert row_ids(response) == [c.pk for c in reversed(chains)]


def test_sort_by_name_both_directions_with_arrows(admin_client):
    b = ChainFactory(name="bravo")
    a = ChainFactory(name="alpha")
    c = ChainFactory(name="charlie")

    ascending = admin_client.get(LIST_URL, {"sort": "name"})
    descending = admin_client.get(LIST_URL, {"sort": "-name"})

    assert row_ids(ascending) == [a.pk, b.pk, c.pk]
    assert row_ids(descending) == [c.pk, b.pk, a.pk]
    asc_html = ascending.content.decode()
    assert '<th scope="col" aria-sort="ascending">' in asc_html
    # The active header links to the opposite direction; it is a real link with an href.
    link = 'href="/fallback/chains/?sort=-name" hx-get="/fallback/chains/?sort=-name" id="sort-name">'
    assert link + 'Name <span aria-hidden="true">▲</span>' in asc_html
    assert '<span aria-hidden="true">▼</span>' in descending.content.decode()


def test_sort_by_status_and_unknown_sort_falls_back_to_newest(admin_client):
    on = ChainFactory(name="on", enabled=True)
    off = ChainFactory(name="off", enabled=False)

    by_status = admin_client.get(LIST_URL, {"sort": "status"})
    unknown = admin_client.get(LIST_URL, {"sort": "drop table"})

    assert row_ids(by_status) == [off.pk, on.pk]
    assert row_ids(unknown) == [off.pk, on.pk]


def test_paging_default_25_and_page_sizes(admin_client):
    chains = [ChainFactory(name=f"chain {i:02}") for i in range(30)]
    newest_first = [c.pk for c in reversed(chains)]

    first = admin_client.get(LIST_URL)
    second = admin_client.get(LIST_URL, {"page": 2})
    ten = admin_client.get(LIST_URL, {"page_size": 10, "page": 3})
    odd_size = admin_client.get(LIST_URL, {"page_size": 7})
    past_end = admin_client.get(LIST_URL, {"page": 99})

    assert row_ids(first) == newest_first[:25]
    assert row_ids(second) == newest_first[25:]
    assert row_ids(ten) == newest_first[20:30]
    assert row_ids(odd_size) == newest_first[:25]
    assert row_ids(past_end) == newest_first[25:]
    assert "1–25 of 30 chains" in first.content.decode()
    assert 'href="/fallback/chains/?page=2" hx-get="/fallback/chains/?page=2" rel="next"' in first.content.decode()
    assert 'href="/fallback/chains/?page_size=10&amp;page=2"' in ten.content.decode()


def test_sort_links_keep_search_and_size_but_reset_page(admin_client):
    for i in range(12):
        ChainFactory(name=f"alpha {i}")

    response = admin_client.get(LIST_URL, {"q": "alpha", "page_size": 10, "page": 2})

    assert 'href="/fallback/chains/?q=alpha&amp;page_size=10&amp;sort=name"' in response.content.decode()


@pytest.mark.parametrize("rows", [1, 3])
def test_list_query_count_does_not_grow_with_rows(admin_client, django_assert_num_queries, rows):
    teams = [TeamFactory() for _ in range(rows)]
    for team in teams:
        ChainFactory(scope_type=ScopeType.TEAM, scope_id=team.pk, entries=[LlmModelFactory(), LlmModelFactory()])
    admin_client.get(LIST_URL)  # warm the session

    # session, user, roles, count, chains, entries, team names
    with django_assert_num_queries(7):
        response = admin_client.get(LIST_URL, headers={**HX, "HX-Target": "chain-table"})

    assert len(row_ids(response)) == rows
    assert f"Team: {teams[0].name}" in response.content.decode()


def test_chain_cell_shows_order_and_full_chain_on_hover(admin_client, chain_catalog):
    bedrock = ProviderFactory(name="bedrock")
    chain = ChainFactory(
        name="c", source_model=chain_catalog["source"], entries=[chain_catalog["mini"], chain_catalog["haiku"]]
    )
    entry = chain.entries.get(position=1)
    entry.provider = bedrock
    entry.save()

    html = admin_client.get(LIST_URL).content.decode()

    assert (
        '<td class="truncate chain-cell" data-label="Chain" '
        'title="1. gpt-4o-mini via openai → 2. claude-haiku via bedrock (override)">'
        "gpt-4o-mini → claude-haiku</td>"
    ) in html


def test_user_supplied_strings_are_escaped(admin_client, chain_catalog):
    ChainFactory(
        name="<script>alert(1)</script>", source_model=chain_catalog["source"], entries=[chain_catalog["mini"]]
    )

    list_html = admin_client.get(LIST_URL).content.decode()
    chain = FallbackChain.objects.get()
    edit_html = admin_client.get(edit_url(chain)).content.decode()

    for html in (list_html, edit_html):
        assert "<script>alert(1)</script>" not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


# ---------- Toggle ----------


def test_toggle_over_htmx_returns_the_row(admin_client):
    chain = ChainFactory(enabled=True)

    response = admin_client.post(toggle_url(chain), {"enabled": "0"}, headers=HX)

    chain.refresh_from_db()
    html = response.content.decode()
    assert chain.enabled is False
    assert html.lstrip().startswith(f'<tr id="chain-row-{chain.pk}">')
    assert '<span class="pill pill-disabled">Disabled</span>' in html
    assert not is_full_page(response)
    assert "disabled." in response["HX-Trigger"] and '"messages"' in response["HX-Trigger"]
    assert list(AuditEvent.objects.values_list("action", flat=True)) == ["chain.disable"]


def test_toggle_without_htmx_redirects_with_a_message(admin_client):
    chain = ChainFactory(name="primary", enabled=False)

    response = admin_client.post(toggle_url(chain), {"enabled": "1"})
    page = admin_client.get(response.url)

    chain.refresh_from_db()
    assert response.status_code == 302 and response.url == LIST_URL
    assert chain.enabled is True
    assert "Chain “primary” enabled." in page.content.decode()


def test_toggle_posts_the_wanted_state_so_a_double_click_is_harmless(admin_client):
    chain = ChainFactory(enabled=True)

    admin_client.post(toggle_url(chain), {"enabled": "0"}, headers=HX)
    admin_client.post(toggle_url(chain), {"enabled": "0"}, headers=HX)

    chain.refresh_from_db()
    assert chain.enabled is False
    assert AuditEvent.objects.count() == 1


def test_toggle_get_is_not_allowed_and_unknown_chain_is_404(admin_client):
    chain = ChainFactory()

    assert admin_client.get(toggle_url(chain)).status_code == 405
    assert admin_client.post("/fallback/chains/999999/toggle/", {"enabled": "0"}).status_code == 404


# ---------- Delete ----------


def test_delete_confirm_names_the_action_and_target(admin_client):
    chain = ChainFactory(name="primary")

    list_html = admin_client.get(LIST_URL).content.decode()
    confirm = admin_client.get(delete_url(chain))

    assert f'<dialog id="delete-dialog-{chain.pk}"' in list_html
    button = f'<button type="submit" class="btn-danger-solid" id="chain-delete-confirm-{chain.pk}">'
    assert button + "Delete chain primary</button>" in list_html
    assert f'data-dialog-open="delete-dialog-{chain.pk}"' in list_html
    assert is_full_page(confirm)
    assert "Delete chain primary</button>" in confirm.content.decode()


def test_delete_over_htmx_returns_the_table_for_the_current_view(admin_client):
    keep = [ChainFactory(name=f"alpha {i}") for i in range(2)]
    doomed = ChainFactory(name="alpha doomed")
    ChainFactory(name="beta")

    response = admin_client.post(
        delete_url(doomed), headers={**HX, "HX-Current-URL": "http://testserver/fallback/chains/?q=alpha&sort=name"}
    )

    html = response.content.decode()
    assert not FallbackChain.objects.filter(pk=doomed.pk).exists()
    assert html.lstrip().startswith('<div id="chain-table"')
    assert row_ids(response) == [keep[0].pk, keep[1].pk]
    assert "<html" not in html
    assert "deleted." in response["HX-Trigger"]
    assert list(AuditEvent.objects.values_list("action", flat=True)) == ["chain.delete"]


def test_delete_without_htmx_redirects_with_a_message(admin_client):
    chain = ChainFactory(name="primary")

    response = admin_client.post(delete_url(chain))
    page = admin_client.get(response.url)

    assert response.status_code == 302 and response.url == LIST_URL
    assert FallbackChain.objects.count() == 0
    assert "Chain “primary” deleted." in page.content.decode()


# ---------- Editor ----------


def test_create_page_full_with_source_select_and_one_entry(admin_client, chain_catalog):
    response = admin_client.get(reverse("chains:create"))

    html = response.content.decode()
    assert is_full_page(response)
    assert '<option value="gpt-4o">gpt-4o (openai)</option>' in html
    assert 'name="entries-0-model"' in html and 'name="entries-1-model"' not in html
    assert 'data-entry-move="up"' in html and 'data-entry-move="down"' in html
    assert 'class="drag-handle"' in html
    assert "/static/vendor/Sortable.min.js" in html
    assert '<input type="checkbox" id="id_enabled" name="enabled" hx-preserve="true" checked>' in html


def test_create_saves_entries_in_posted_order_and_redirects(admin_client, chain_catalog):
    # Field order is the on-screen order; the index only pairs a model with its provider.
    data = [
        ("name", "gpt-4o fallback"),
        ("source_model", "gpt-4o"),
        ("entries-1-model", "claude-opus"),
        ("entries-1-provider", ""),
        ("entries-0-model", "gpt-4o-mini"),
        ("entries-0-provider", "bedrock"),
        ("scope_type", "global"),
        ("enabled", "on"),
        ("op", "save"),
    ]
    body = "&".join(f"{k}={v}" for k, v in data)

    response = admin_client.post(reverse("chains:create"), body, content_type="application/x-www-form-urlencoded")

    chain = FallbackChain.objects.get()
    assert response.status_code == 302 and response.url == LIST_URL
    assert [(e.model.name, e.provider and e.provider.name) for e in chain.entries.all()] == [
        ("claude-opus", None),
        ("gpt-4o-mini", "bedrock"),
    ]
    assert chain.enabled is True
    assert list(AuditEvent.objects.values_list("action", flat=True)) == ["chain.create"]


def test_create_with_team_scope(admin_client, chain_catalog):
    team = TeamFactory(name="payments")

    admin_client.post(reverse("chains:create"), form_data(scope_type="team", scope_id=str(team.pk), enabled=None))

    chain = FallbackChain.objects.get()
    assert (chain.scope_type, chain.scope_id, chain.enabled) == ("team", team.pk, False)


# Where the error summary's link for a field error points.
SUMMARY_ANCHORS = {
    "id_entries-0": "id_entries-0-model",
    "id_entries-1": "id_entries-1-model",
    "id_scope_id": "id_scope_type",
}


@pytest.mark.parametrize(
    ("overrides", "field_id", "message"),
    [
        ({"name": ""}, "id_name", "Name is required and cannot be only whitespace."),
        ({"name": "   "}, "id_name", "Name is required and cannot be only whitespace."),
        ({"name": "x" * 201}, "id_name", "Name is at most 200 characters."),
        ({"source_model": ""}, "id_source_model", "Source model is required and cannot be only whitespace."),
        ({"source_model": "no-such-model"}, "id_source_model", "Unknown model “no-such-model”."),
        (
            {"entries-0-model": "  "},
            "id_entries-0",
            "Entry 1: model is required and cannot be only whitespace.",
        ),
        (
            {"entries-1-model": "gpt-4o"},
            "id_entries-1",
            "Entry 2: gpt-4o is the source model; a chain cannot fall back to itself.",
        ),
        (
            {"entries-1-model": "gpt-4o-mini"},
            "id_entries-1",
            "Entry 2 repeats entry 1 (gpt-4o-mini via openai).",
        ),
        ({"entries-0-provider": "nobody"}, "id_entries-0", "Entry 1: unknown provider “nobody”."),
        ({"scope_type": "team", "scope_id": ""}, "id_scope_id", "Choose the team this applies to."),
        ({"scope_type": "team", "scope_id": "987654"}, "id_scope_id", "No team with id 987654 exists."),
        ({"scope_type": "team", "scope_id": "abc"}, "id_scope_id", "Target id must be an integer."),
    ],
)
def test_validation_errors_inline_and_in_summary(admin_client, chain_catalog, overrides, field_id, message):
    response = admin_client.post(reverse("chains:create"), form_data(**overrides))

    html = response.content.decode()
    assert response.status_code == 200
    assert FallbackChain.objects.count() == 0
    assert error_text(response, field_id) == [message]
    anchor = SUMMARY_ANCHORS.get(field_id, field_id)
    assert f'<li><a href="#{anchor}">{message}</a></li>' in html
    assert 'value="gpt-4o fallback"' in html or "name" in overrides


def test_no_entries_is_refused_inline(admin_client, chain_catalog):
    response = admin_client.post(
        reverse("chains:create"), form_data(**{"entries-0-model": None, "entries-1-model": None})
    )

    html = response.content.decode()
    assert '<span class="error" id="entry-list-error">A chain needs at least one entry.</span>' in html
    assert FallbackChain.objects.count() == 0


def test_more_than_ten_entries_is_refused_inline(admin_client, chain_catalog):
    extra = {f"entries-{i}-model": LlmModelFactory().name for i in range(11)}

    response = admin_client.post(reverse("chains:create"), form_data(**extra))

    assert (
        '<span class="error" id="entry-list-error">A chain has at most 10 entries (got 11).</span>'
        in response.content.decode()
    )


def test_second_chain_for_same_source_and_scope_is_refused(admin_client, chain_catalog):
    ChainFactory(name="existing", source_model=chain_catalog["source"], entries=[chain_catalog["mini"]])

    response = admin_client.post(reverse("chains:create"), form_data())

    assert error_text(response, "id_source_model") == [
        "Chain “existing” already covers gpt-4o in this scope; edit it instead."
    ]


def test_warnings_are_shown_in_amber_and_do_not_block(admin_client, chain_catalog):
    RoutingRuleFactory(name="cheap-route", source_model=chain_catalog["source"], target_model=chain_catalog["mini"])
    data = form_data(**{"entries-1-model": "claude-haiku"})

    preview = admin_client.post(reverse("chains:create"), {**data, "op": "refresh"}, headers=HX)
    saved = admin_client.post(reverse("chains:create"), data)

    html = preview.content.decode()
    assert '<div class="alert alert-warning" id="chain-warnings">' in html
    assert (
        "Routing rule “cheap-route” rewrites gpt-4o to gpt-4o-mini in an overlapping scope, "
        "so callers there never reach this chain." in html
    )
    assert "claude-haiku lacks vision that gpt-4o has" in html
    assert saved.status_code == 302
    assert FallbackChain.objects.count() == 1


def test_refresh_over_htmx_returns_the_form_partial_with_cost_hints(admin_client, chain_catalog):
    response = admin_client.post(reverse("chains:create"), {**form_data(), "op": "refresh"}, headers=HX)

    html = response.content.decode()
    assert html.lstrip().startswith('<form id="chain-form"')
    assert "<html" not in html
    assert '<span class="cost-hint cost-cheaper" data-cost-hint>0.2× source cost</span>' in html
    assert '<span class="cost-hint cost-pricier" data-cost-hint>3× source cost</span>' in html
    assert 'id="error-summary"' not in html
    assert FallbackChain.objects.count() == 0


def test_editing_buttons_work_without_javascript(admin_client, chain_catalog):
    url = reverse("chains:create")

    added = admin_client.post(url, {**form_data(), "op": "add"})
    moved = admin_client.post(url, {**form_data(), "op": "down:0"})
    removed = admin_client.post(url, {**form_data(), "op": "remove:0"})

    assert is_full_page(added)
    assert 'name="entries-2-model"' in added.content.decode()
    moved_html = moved.content.decode()
    assert re.findall(r'<option value="([^"]+)" selected>', moved_html)[1:] == ["claude-opus", "gpt-4o-mini", "global"]
    removed_html = removed.content.decode()
    assert 'name="entries-1-model"' not in removed_html
    assert FallbackChain.objects.count() == 0


def test_edit_prefills_and_saves_a_new_version(admin_client, chain_catalog):
    chain = ChainFactory(
        name="old", source_model=chain_catalog["source"], entries=[chain_catalog["mini"], chain_catalog["opus"]]
    )

    page = admin_client.get(edit_url(chain))
    response = admin_client.post(
        edit_url(chain),
        form_data(name="new", version="1", **{"entries-0-model": "claude-opus", "entries-1-model": "gpt-4o-mini"}),
    )

    chain.refresh_from_db()
    html = page.content.decode()
    assert 'value="old"' in html and '<input type="hidden" name="version" value="1">' in html
    assert response.status_code == 302
    assert (chain.name, chain.version) == ("new", 2)
    assert [e.model.name for e in chain.entries.all()] == ["claude-opus", "gpt-4o-mini"]
    event = AuditEvent.objects.get()
    assert event.action == "chain.update"
    assert event.before == {
        "name": "old",
        "entries": [{"model": "gpt-4o-mini", "provider": None}, {"model": "claude-opus", "provider": None}],
    }


def test_stale_version_shows_conflict_and_keeps_input(admin_client, admin_user, chain_catalog):
    chain = ChainFactory(name="shared", source_model=chain_catalog["source"], entries=[chain_catalog["mini"]])
    chain_update(
        actor=admin_user,
        chain_id=chain.pk,
        version=1,
        data=ChainInput(name="someone else", source_model="gpt-4o", entries=[EntryInput("claude-opus")]),
    )

    response = admin_client.post(edit_url(chain), form_data(name="my edit", version="1"))

    html = response.content.decode()
    chain.refresh_from_db()
    assert response.status_code == 200
    assert "This chain was changed by someone else (you edited version 1, it is now at version 2)." in html
    assert 'value="my edit"' in html
    assert '<input type="hidden" name="version" value="1">' in html
    assert f'<a href="{edit_url(chain)}">Open the current version</a>' in html
    assert chain.name == "someone else"


def test_edit_unknown_chain_is_404(admin_client):
    assert admin_client.get("/fallback/chains/999999/edit/").status_code == 404


# ---------- CSRF ----------


def test_post_without_csrf_token_is_refused(admin_user):
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)
    chain = ChainFactory(enabled=True)

    response = client.post(toggle_url(chain), {"enabled": "0"}, headers=HX)

    chain.refresh_from_db()
    assert response.status_code == 403
    assert chain.enabled is True


def test_post_with_csrf_header_from_the_page_succeeds(admin_user):
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)
    chain = ChainFactory(enabled=True)
    page = client.get(LIST_URL).content.decode()
    token = re.search(r'hx-headers=\'\{"X-CSRFToken": "([^"]+)"\}\'', page).group(1)

    response = client.post(toggle_url(chain), {"enabled": "0"}, headers={**HX, "X-CSRFToken": token})

    chain.refresh_from_db()
    assert response.status_code == 200
    assert chain.enabled is False
