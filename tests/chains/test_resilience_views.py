"""The console's resilience policy: the chain editor's Resilience step (knobs, errors, prefill, the HTMX
refresh and its timeline preview) and the global defaults page (optimistic version, roles, audit)."""

import re
from itertools import pairwise

import pytest

from audit.models import AuditEvent
from chains.models import FallbackChain, ResilienceDefaults
from chains.services import resilience_defaults_update
from tests.chains.test_views import HX, LIST_URL, edit_url, error_text, form_data, is_full_page
from tests.factories import ChainFactory

CREATE_URL = "/fallback/chains/new/"
DEFAULTS_URL = "/fallback/chains/resilience/"


def policy_data(**knobs: str) -> dict[str, str]:
    """The Resilience step as posted: the marker, the checkbox when given, and every knob ("" = empty)."""
    data = {
        "resilience-present": "1",
        **{
            f"resilience-{name}": ""
            for name in (
                "max_retries",
                "backoff_base_ms",
                "backoff_floor_ms",
                "backoff_cap_ms",
                "retry_after_cap_seconds",
                "max_attempts",
                "connect_timeout_seconds",
                "first_token_timeout_seconds",
                "idle_timeout_seconds",
                "deadline_seconds",
            )
        },
    }
    data.update({f"resilience-{name}": value for name, value in knobs.items()})
    return data


def knob_input(html: str, name: str) -> str:
    match = re.search(rf'<input type="number" id="id_resilience-{name}"[^>]*>', html, re.S)
    assert match, f"no input for {name}"
    return match.group(0)


def checkbox_checked(html: str) -> bool:
    match = re.search(r'<input type="checkbox" id="id_resilience-enabled"[^>]*>', html, re.S)
    assert match
    return " checked" in match.group(0)


def timeline(html: str) -> list[str]:
    """The preview's story, one "when — what" string per step (the dash is drawn by CSS)."""
    pairs = re.findall(r'<span class="timeline-when">(.*?)</span> <span class="timeline-text">(.*?)</span>', html, re.S)
    return [f"{when} — {text}" for when, text in pairs]


RETRY = "backoff with jitter, at least 50 ms after the previous call) → 503 again"


# ---------- The chain editor ----------


def test_create_page_shows_the_step_off_with_the_global_defaults_as_placeholders(admin_client, chain_catalog):
    response = admin_client.get(CREATE_URL)

    html = response.content.decode()
    assert '<legend><span class="step-no">3</span>Resilience' in html
    assert html.index("Fallback entries, in order") < html.index("Resilience") < html.index("Scope</legend>")
    assert not checkbox_checked(html)
    assert 'placeholder="1"' in knob_input(html, "max_retries")
    assert 'min="1" max="20" step="1"' in knob_input(html, "max_attempts")
    assert 'min="0.1" max="60" step="any"' in knob_input(html, "connect_timeout_seconds")
    assert "Off by default: the chain only takes over once the source model's circuit breaker opens" in html
    assert f'<a href="{DEFAULTS_URL}">global defaults</a>' in html
    assert timeline(html)[1].startswith("then — the client gets the 503")


def test_create_page_starts_from_the_global_defaults(admin_client, admin_user, chain_catalog):
    resilience_defaults_update(actor=admin_user, version=1, policy={"enabled": True, "max_retries": 3})

    html = admin_client.get(CREATE_URL).content.decode()

    assert checkbox_checked(html)
    assert 'placeholder="3"' in knob_input(html, "max_retries")
    assert 'value=""' in knob_input(html, "max_retries")
    assert timeline(html)[3] == f"≤ 0.8 s later — retry the source model (3 of 3; {RETRY}"


def test_create_with_policy_stores_only_the_knobs_filled_in(admin_client, chain_catalog):
    data = {**form_data(), **policy_data(max_retries="2", deadline_seconds="30.5"), "resilience-enabled": "on"}

    response = admin_client.post(CREATE_URL, data)

    chain = FallbackChain.objects.get()
    assert response.status_code == 302 and response.url == LIST_URL
    assert chain.resilience == {"enabled": True, "max_retries": 2, "deadline_seconds": 30.5}
    event = AuditEvent.objects.get()
    assert event.action == "chain.create"
    assert event.after["resilience"] == {"enabled": True, "max_retries": 2, "deadline_seconds": 30.5}


def test_empty_knobs_save_nothing_but_the_checkbox(admin_client, chain_catalog):
    admin_client.post(CREATE_URL, {**form_data(), **policy_data()})

    assert FallbackChain.objects.get().resilience == {"enabled": False}


@pytest.mark.parametrize(
    ("knobs", "field", "message"),
    [
        ({"max_attempts": "50"}, "max_attempts", "Must be between 1 and 20 (got 50)."),
        ({"max_retries": "1.5"}, "max_retries", "Must be a whole number between 0 and 5."),
        ({"connect_timeout_seconds": "soon"}, "connect_timeout_seconds", "Must be a number between 0.1 and 60."),
        (
            {"backoff_floor_ms": "500", "backoff_cap_ms": "100"},
            "backoff_floor_ms",
            "The backoff floor (500 ms) cannot exceed the backoff cap (100 ms).",
        ),
    ],
)
def test_a_bad_knob_shows_its_message_next_to_it_and_saves_nothing(admin_client, chain_catalog, knobs, field, message):
    data = {**form_data(), **policy_data(**knobs), "resilience-enabled": "on"}

    response = admin_client.post(CREATE_URL, data)

    html = response.content.decode()
    assert response.status_code == 200 and is_full_page(response)
    assert error_text(response, f"id_resilience-{field}") == [message]
    assert f'<li><a href="#id_resilience-{field}">{message}</a></li>' in html
    assert 'aria-invalid="true"' in knob_input(html, field)
    assert checkbox_checked(html)  # what was typed is kept
    assert FallbackChain.objects.count() == 0
    assert AuditEvent.objects.count() == 0


def test_out_of_range_knob_keeps_the_typed_value(admin_client, chain_catalog):
    response = admin_client.post(CREATE_URL, {**form_data(), **policy_data(max_attempts="50", max_retries="2")})

    html = response.content.decode()
    assert 'value="50"' in knob_input(html, "max_attempts")
    assert 'value="2"' in knob_input(html, "max_retries")


def test_edit_shows_the_chain_knobs_and_keeps_them_on_save(admin_client, chain_catalog):
    chain = ChainFactory(
        name="old",
        source_model=chain_catalog["source"],
        entries=[chain_catalog["mini"]],
        resilience={"enabled": True, "max_retries": 3, "retry_after_cap_seconds": 2.5},
    )

    page = admin_client.get(edit_url(chain)).content.decode()
    data = {
        **form_data(name="new", version="1", **{"entries-1-model": None, "entries-1-provider": None}),
        **policy_data(max_retries="3", retry_after_cap_seconds="2.5"),
        "resilience-enabled": "on",
    }
    response = admin_client.post(edit_url(chain), data)

    chain.refresh_from_db()
    assert checkbox_checked(page)
    assert 'value="3"' in knob_input(page, "max_retries")
    assert 'value="2.5"' in knob_input(page, "retry_after_cap_seconds")
    assert 'value=""' in knob_input(page, "max_attempts")
    assert response.status_code == 302
    assert chain.resilience == {"enabled": True, "max_retries": 3, "retry_after_cap_seconds": 2.5}
    event = AuditEvent.objects.get()
    assert (event.before, event.after) == ({"name": "old"}, {"name": "new"})


def test_edit_that_empties_a_knob_removes_it_and_audits_the_policy(admin_client, chain_catalog):
    chain = ChainFactory(
        name="kept",
        source_model=chain_catalog["source"],
        entries=[chain_catalog["mini"]],
        resilience={"enabled": True, "max_retries": 3},
    )
    data = {
        **form_data(name="kept", version="1", **{"entries-1-model": None, "entries-1-provider": None}),
        **policy_data(),
        "resilience-enabled": "on",
    }

    admin_client.post(edit_url(chain), data)

    chain.refresh_from_db()
    assert (chain.resilience, chain.version) == ({"enabled": True}, 2)
    event = AuditEvent.objects.get()
    assert event.before == {"resilience": {"enabled": True, "max_retries": 3}}
    assert event.after == {"resilience": {"enabled": True}}


def test_a_post_without_the_resilience_step_keeps_the_policy(admin_client, chain_catalog):
    chain = ChainFactory(
        source_model=chain_catalog["source"], entries=[chain_catalog["mini"]], resilience={"enabled": True}
    )

    admin_client.post(edit_url(chain), form_data(name="renamed", version="1"))

    chain.refresh_from_db()
    assert (chain.name, chain.resilience) == ("renamed", {"enabled": True})


def test_an_untouched_inherited_checkbox_stays_inherited(admin_client, admin_user, chain_catalog):
    resilience_defaults_update(actor=admin_user, version=1, policy={"enabled": True})
    chain = ChainFactory(source_model=chain_catalog["source"], entries=[chain_catalog["mini"]], resilience={})
    base = form_data(name="renamed", version="1", **{"entries-1-model": None, "entries-1-provider": None})

    page = admin_client.get(edit_url(chain)).content.decode()
    admin_client.post(edit_url(chain), {**base, **policy_data(), "resilience-enabled": "on"})
    chain.refresh_from_db()
    kept = chain.resilience
    admin_client.post(edit_url(chain), {**base, **policy_data(), "version": "2"})  # unticked: now pinned off
    chain.refresh_from_db()

    assert checkbox_checked(page)  # the global default says on
    assert kept == {}
    assert chain.resilience == {"enabled": False}


def test_refresh_keeps_every_resilience_field_and_updates_the_timeline(admin_client, chain_catalog):
    data = {
        **form_data(),
        **policy_data(max_retries="2", max_attempts="4"),
        "resilience-enabled": "on",
        "op": "refresh",
    }

    response = admin_client.post(CREATE_URL, data, headers=HX)

    html = response.content.decode()
    assert html.lstrip().startswith('<form id="chain-form"')
    assert '<input type="hidden" name="resilience-present" value="1">' in html
    assert checkbox_checked(html)
    assert 'value="2"' in knob_input(html, "max_retries")
    assert 'value="4"' in knob_input(html, "max_attempts")
    assert 'hx-preserve="true"' in knob_input(html, "max_retries")
    assert timeline(html) == [
        "0 s — call gpt-4o (primary) → 503",
        f"≤ 0.2 s later — retry gpt-4o (1 of 2; {RETRY}",
        f"≤ 0.4 s later — retry gpt-4o (2 of 2; {RETRY}",
        "then, at once — move to gpt-4o-mini (entry 1) → 503",
        "then — stop: 4 calls made, the attempt cap; the client gets the last 503.",
        "always — at most 4 calls; gives up at 60 s "
        "(no call starts after the request&#x27;s deadline, whatever is left).",
    ]
    assert FallbackChain.objects.count() == 0


def test_refresh_with_an_invalid_knob_previews_the_default_and_shows_no_error(admin_client, chain_catalog):
    data = {**form_data(), **policy_data(max_retries="9"), "resilience-enabled": "on", "op": "refresh"}

    html = admin_client.post(CREATE_URL, data, headers=HX).content.decode()

    assert 'value="9"' in knob_input(html, "max_retries")
    assert 'id="id_resilience-max_retries-error"' not in html
    assert "retry gpt-4o once" in timeline(html)[1]


def test_timeline_names_the_prefill_entry_and_escapes_labels(admin_client, chain_catalog):
    chain_catalog["opus"].capabilities = ["text", "assistant_prefill"]
    chain_catalog["opus"].save()
    data = {
        **form_data(**{"entries-0-provider": "<b>x</b>"}),
        **policy_data(),
        "resilience-enabled": "on",
        "op": "refresh",
    }

    html = admin_client.post(CREATE_URL, data, headers=HX).content.decode()

    assert "move to gpt-4o-mini via &lt;b&gt;x&lt;/b&gt; (entry 1)" in html
    assert "<b>x</b>" not in html
    assert "continues on claude-opus (entry 2), the next entry whose model supports assistant prefill" in html


def test_the_buttons_without_javascript_keep_the_knobs(admin_client, chain_catalog):
    data = {**form_data(), **policy_data(max_retries="4"), "resilience-enabled": "on", "op": "add"}

    html = admin_client.post(CREATE_URL, data).content.decode()

    assert 'name="entries-2-model"' in html
    assert 'value="4"' in knob_input(html, "max_retries")
    assert checkbox_checked(html)


# ---------- The global defaults page ----------


def test_list_links_to_the_defaults_page(admin_client):
    html = admin_client.get(LIST_URL).content.decode()

    assert f'<a class="btn" href="{DEFAULTS_URL}">Resilience defaults</a>' in html


def test_defaults_page_shows_built_in_placeholders_and_the_version(admin_client):
    html = admin_client.get(DEFAULTS_URL).content.decode()

    assert "<h1>Resilience defaults</h1>" in html
    assert '<input type="hidden" name="version" value="1">' in html
    assert 'placeholder="6"' in knob_input(html, "max_attempts")
    assert "hx-post" not in knob_input(html, "max_attempts")
    assert not checkbox_checked(html)
    assert "never changed, every knob is built in" in html


def test_defaults_save_stores_what_was_set_and_audits(admin_client, chain_catalog):
    data = {**policy_data(max_retries="3", deadline_seconds="45"), "resilience-enabled": "on", "version": "1"}

    response = admin_client.post(DEFAULTS_URL, data)
    page = admin_client.get(DEFAULTS_URL).content.decode()
    editor = admin_client.get(CREATE_URL).content.decode()

    row = ResilienceDefaults.objects.get()
    assert response.status_code == 302 and response.url == DEFAULTS_URL
    assert (row.policy, row.version) == ({"enabled": True, "max_retries": 3, "deadline_seconds": 45.0}, 2)
    event = AuditEvent.objects.get()
    assert event.action == "resilience_defaults.update"
    assert event.after["policy"] == {"enabled": True, "max_retries": 3, "deadline_seconds": 45.0}
    assert "Default resilience policy saved." in page
    assert 'value="3"' in knob_input(page, "max_retries")
    assert '<input type="hidden" name="version" value="2">' in page
    # The chain editor now starts from them.
    assert checkbox_checked(editor)
    assert 'placeholder="45"' in knob_input(editor, "deadline_seconds")


def test_defaults_saved_unchanged_write_nothing(admin_client):
    response = admin_client.post(DEFAULTS_URL, {**policy_data(), "version": "1"})

    row = ResilienceDefaults.objects.get()
    assert response.status_code == 302
    assert (row.policy, row.version) == ({}, 1)
    assert AuditEvent.objects.count() == 0
    assert "Nothing changed in the default resilience policy." in admin_client.get(DEFAULTS_URL).content.decode()


def test_defaults_stale_version_is_refused_and_keeps_the_input(admin_client, admin_user):
    resilience_defaults_update(actor=admin_user, version=1, policy={"max_attempts": 8})

    response = admin_client.post(DEFAULTS_URL, {**policy_data(max_attempts="3"), "version": "1"})

    html = response.content.decode()
    row = ResilienceDefaults.objects.get()
    assert response.status_code == 200
    assert (
        "The default resilience policy was changed by someone else (you edited version 1, it is now at version 2)."
        in html
    )
    assert 'value="3"' in knob_input(html, "max_attempts")
    assert f'<a href="{DEFAULTS_URL}">Open the current version</a>' in html
    assert (row.policy, row.version) == ({"max_attempts": 8}, 2)
    assert AuditEvent.objects.count() == 1  # the first update only


def test_defaults_field_error_next_to_the_knob_and_nothing_saved(admin_client):
    response = admin_client.post(DEFAULTS_URL, {**policy_data(max_attempts="0"), "version": "1"})

    assert response.status_code == 200
    assert error_text(response, "id_resilience-max_attempts") == ["Must be between 1 and 20 (got 0)."]
    assert not ResilienceDefaults.objects.exists()
    assert AuditEvent.objects.count() == 0


@pytest.mark.parametrize("method", ["get", "post"])
def test_defaults_page_is_for_admins_only(role_client, method):
    role, client = role_client

    response = getattr(client, method)(DEFAULTS_URL, {**policy_data(max_retries="2"), "version": "1"})

    if role == "admin":
        assert response.status_code in (200, 302)
    elif role == "anonymous":
        assert response.status_code == 302 and response.url.startswith("/login/?next=")
    else:
        assert response.status_code == 403
        assert "Your role does not allow this page." in response.content.decode()
    if role != "admin":
        assert not ResilienceDefaults.objects.exists()
        assert AuditEvent.objects.count() == 0


def test_editor_headings_never_skip_a_level(admin_client, chain_catalog):
    """axe's heading-order: the Resilience step's "Knobs" heading follows the page's h1 (the steps are legends),
    so it is an h2, and the preview's headings go one level down from it."""
    chain = ChainFactory(source_model=chain_catalog["source"])
    for url in (CREATE_URL, edit_url(chain)):
        html = admin_client.get(url).content.decode()
        main = html.split('<main id="main">')[1]
        levels = [int(level) for level in re.findall(r"<h([1-6])[\s>]", main)]
        assert levels[0] == 1, (url, levels)
        skips = [(a, b) for a, b in pairwise(levels) if b > a + 1]
        assert skips == [], (url, levels)
        assert re.search(r'<h2 class="knobs-title">Knobs', html), url
