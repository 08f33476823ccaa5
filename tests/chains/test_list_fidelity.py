"""Issue 14, the Fallback Chains list as documented: "Enabled" / "Disabled" (the console's state-pill words), the
Chain column sorting by its first
entry, the per-user dismissible notice on how a chain picks an entry, and the rewrite warning covering guardrails."""

import re

import pytest
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse

from access.enums import Notice
from access.models import DismissedNotice
from audit.models import AuditEvent
from catalog.enums import ScopeType
from catalog.scopes import Scope
from chains.selectors import chain_list, chain_warnings
from tests.conftest import PASSWORD
from tests.factories import ChainFactory, GuardrailFactory, LlmModelFactory, TeamFactory

HX = {"HX-Request": "true"}
LIST_URL = "/fallback/chains/"
DISMISS_URL = "/fallback/chains/notice/dismiss/"
NOTICE = 'id="selection-notice"'


def row_names(response) -> list[str]:
    return re.findall(r'<td class="truncate" data-label="Name" title="([^"]*)"', response.content.decode())


# ---------- Status ----------


def test_status_reads_enabled_or_disabled_and_the_toggle_says_which(admin_client):
    ChainFactory(name="on-chain", enabled=True)
    ChainFactory(name="off-chain", enabled=False)

    html = admin_client.get(LIST_URL).content.decode()

    assert '<span class="pill pill-enabled">Enabled</span>' in html
    assert '<span class="pill pill-disabled">Disabled</span>' in html
    assert ">Active<" not in html and "(now Active)" not in html
    assert 'aria-label="Disable chain on-chain (now Enabled)">Disable</button>' in html
    assert 'aria-label="Enable chain off-chain (now Disabled)">Enable</button>' in html


def test_the_toggled_row_reads_disabled_then_enabled(admin_client):
    chain = ChainFactory(name="flip", enabled=True)
    url = reverse("chains:toggle", args=[chain.pk])

    off = admin_client.post(url, {"enabled": "0"}, headers=HX).content.decode()
    on = admin_client.post(url, {"enabled": "1"}, headers=HX).content.decode()

    assert '<span class="pill pill-disabled">Disabled</span>' in off
    assert "(now Disabled)" in off
    assert '<span class="pill pill-enabled">Enabled</span>' in on
    assert "(now Enabled)" in on


# ---------- Sorting by the first entry ----------


@pytest.fixture
def three_chains(db):
    """Names, first entries and second entries all in different orders, so each sort is told apart."""
    alpha, beta, gamma, zeta = (LlmModelFactory(name=n) for n in ("alpha", "beta", "gamma", "zeta"))
    ChainFactory(name="c-one", entries=[gamma, alpha])
    ChainFactory(name="c-two", entries=[alpha, zeta])
    ChainFactory(name="c-three", entries=[beta, alpha])


def test_chain_list_sorts_by_the_first_entrys_model_name(three_chains):
    ascending = [c.name for c in chain_list(ordering="chain")]
    descending = [c.name for c in chain_list(ordering="-chain")]

    assert ascending == ["c-two", "c-three", "c-one"]  # alpha, beta, gamma
    assert descending == ["c-one", "c-three", "c-two"]


def test_the_first_entry_is_the_lowest_position_not_the_first_row_written(db):
    """Reordering rewrites positions: the annotation must follow position, not insertion order."""
    alpha, omega = LlmModelFactory(name="alpha"), LlmModelFactory(name="omega")
    moved = ChainFactory(name="moved", entries=[alpha, omega])
    ChainFactory(name="steady", entries=[LlmModelFactory(name="mu")])
    first, second = moved.entries.order_by("position")
    first.position, second.position = 9, 0  # omega now leads; alpha's row is still the first one written
    first.save()
    second.save()

    assert [c.name for c in chain_list(ordering="chain")] == ["steady", "moved"]  # mu < omega


def test_the_chain_header_is_a_sort_link_with_aria_sort_on_the_active_column(admin_client, three_chains):
    default = admin_client.get(LIST_URL).content.decode()
    by_chain = admin_client.get(LIST_URL, {"sort": "chain"})
    flipped = admin_client.get(LIST_URL, {"sort": "-chain"}).content.decode()

    assert (
        '<a class="sort-link" title="Sort by the model of the first entry" href="/fallback/chains/?sort=chain"'
        in default
    )
    assert 'aria-sort="ascending"' not in default and 'aria-sort="descending"' not in default
    assert row_names(by_chain) == ["c-two", "c-three", "c-one"]
    html = by_chain.content.decode()
    assert html.count("aria-sort=") == 1
    active = (
        r'<th scope="col" aria-sort="{}">\s*<a class="sort-link" title="Sort by the model of the first entry" href="{}"'
    )
    assert re.search(active.format("ascending", r"/fallback/chains/\?sort=-chain"), html)
    assert 'hx-get="/fallback/chains/?sort=-chain" id="sort-chain">Chain <span aria-hidden="true">▲</span></a>' in html
    assert re.search(active.format("descending", r"/fallback/chains/\?sort=chain"), flipped)
    assert (
        'hx-get="/fallback/chains/?sort=chain" id="sort-chain">Chain <span aria-hidden="true">▼</span></a>' in flipped
    )
    # Every column header but the actions one offers the neutral ↕ (the default sort, newest first, is no column).
    neutral = '<span aria-hidden="true">↕</span></a>'
    assert default.count(neutral) == 5
    assert html.count(neutral) == 4


# ---------- The "how a chain picks an entry" notice ----------


def test_the_notice_explains_the_selection_model_and_links_the_resilience_defaults(admin_client):
    html = admin_client.get(LIST_URL).content.decode()

    assert NOTICE in html
    assert "First healthy entry wins." in html
    assert "No round-robin, no weighting." in html
    assert "No retry within a request</strong> unless the chain's resilience policy is enabled" in html
    assert f'<a href="{reverse("chains:resilience")}">Resilience defaults</a>' in html
    assert "“optimistic primary”" in html and "unless an operator holds it" in html
    assert f'hx-post="{DISMISS_URL}" hx-target="#selection-notice" hx-swap="delete"' in html


def test_dismissing_over_htmx_answers_empty_and_hides_it_for_that_user_only(admin_client, django_user_model):
    other = django_user_model.objects.create_user(username="bob", password=PASSWORD)
    other.groups.add(Group.objects.get_or_create(name="admin")[0])
    other_client = Client()
    other_client.force_login(other)

    response = admin_client.post(DISMISS_URL, headers=HX)

    assert response.status_code == 200 and response.content == b""
    assert NOTICE not in admin_client.get(LIST_URL).content.decode()
    assert NOTICE in other_client.get(LIST_URL).content.decode()
    assert DismissedNotice.objects.filter(notice=Notice.FALLBACK_SELECTION).count() == 1


def test_the_dismissal_outlives_the_session_and_is_not_audited(admin_user):
    first = Client()
    assert first.login(username=admin_user.username, password=PASSWORD)
    events_before = AuditEvent.objects.count()

    redirect = first.post(DISMISS_URL)
    first.post(DISMISS_URL)  # a second dismissal (another tab) changes nothing
    first.logout()
    second = Client()  # a new session, as on another device
    assert second.login(username=admin_user.username, password=PASSWORD)

    assert redirect.status_code == 302 and redirect["Location"] == reverse("chains:list")
    assert NOTICE not in second.get(LIST_URL).content.decode()
    assert DismissedNotice.objects.filter(user=admin_user).count() == 1
    assert AuditEvent.objects.count() == events_before


def test_dismissing_needs_a_csrf_token(admin_user):
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)

    refused = client.post(DISMISS_URL, headers=HX)
    page = client.get(LIST_URL)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.content.decode()).group(1)
    accepted = client.post(DISMISS_URL, {"csrfmiddlewaretoken": token}, headers=HX)

    assert refused.status_code == 403
    assert accepted.status_code == 200
    assert DismissedNotice.objects.filter(user=admin_user).count() == 1


def test_dismissing_is_post_only_and_for_admins(admin_client, bi_client, anon_client):
    assert admin_client.get(DISMISS_URL).status_code == 405
    assert bi_client.post(DISMISS_URL).status_code == 403
    assert anon_client.post(DISMISS_URL).status_code == 302
    assert DismissedNotice.objects.count() == 0


# ---------- Guardrails that rewrite the source ----------


@pytest.fixture
def source_and_entry(db):
    return LlmModelFactory(name="gpt-4o"), LlmModelFactory(name="gpt-4o-mini")


def kinds_and_messages(warnings) -> list[tuple[str, str]]:
    return [(w.kind, w.message) for w in warnings]


def test_a_rewriting_guardrail_on_the_source_warns_like_a_routing_rule(source_and_entry):
    source, entry = source_and_entry
    GuardrailFactory(name="cost-cap", model=source, action="rewrite", target_model=entry)

    warnings = chain_warnings(source=source, entries=[], scope=Scope.global_())

    assert kinds_and_messages(warnings) == [
        (
            "routing_rule",
            "Guardrail “cost-cap” rewrites gpt-4o to gpt-4o-mini in an overlapping scope, "
            "so callers there never reach this chain.",
        )
    ]


def test_a_catch_all_rewrite_guardrail_warns_too(source_and_entry):
    source, entry = source_and_entry
    GuardrailFactory(name="everything-cheap", model=None, action="rewrite", target_model=entry)

    warnings = chain_warnings(source=source, entries=[], scope=Scope.global_())

    assert [w.message for w in warnings] == [
        "Guardrail “everything-cheap” rewrites every model, gpt-4o included, to gpt-4o-mini in an overlapping "
        "scope, so callers there never reach this chain."
    ]


def test_guardrails_that_do_not_rewrite_the_source_away_do_not_warn(source_and_entry):
    source, entry = source_and_entry
    other = LlmModelFactory(name="other")
    GuardrailFactory(name="deny", model=source, action="deny")
    GuardrailFactory(name="off", model=source, action="rewrite", target_model=entry, enabled=False)
    GuardrailFactory(name="elsewhere", model=other, action="rewrite", target_model=entry)
    GuardrailFactory(name="to-itself", model=None, action="rewrite", target_model=source)

    assert chain_warnings(source=source, entries=[], scope=Scope.global_()) == []


def test_a_guardrail_in_a_disjoint_scope_does_not_warn(source_and_entry):
    source, entry = source_and_entry
    red, blue = TeamFactory(), TeamFactory()
    GuardrailFactory(
        name="red-only", model=source, action="rewrite", target_model=entry, scope_type=ScopeType.TEAM, scope_id=red.pk
    )

    red_warnings = chain_warnings(source=source, entries=[], scope=Scope(ScopeType.TEAM, red.pk))
    blue_warnings = chain_warnings(source=source, entries=[], scope=Scope(ScopeType.TEAM, blue.pk))

    assert [w.kind for w in red_warnings] == ["routing_rule"]
    assert blue_warnings == []


def test_the_wizard_shows_the_guardrail_warning(admin_client, chain_catalog):
    GuardrailFactory(
        name="cost-cap", model=chain_catalog["source"], action="rewrite", target_model=chain_catalog["mini"]
    )
    data = {
        "name": "gpt-4o fallback",
        "source_model": "gpt-4o",
        "entries-0-model": "gpt-4o-mini",
        "entries-0-provider": "",
        "scope_type": "global",
        "scope_id": "",
        "enabled": "on",
        "version": "",
        "op": "refresh",
    }

    html = admin_client.post(reverse("chains:create"), data, headers=HX).content.decode()

    assert '<li data-warning="routing_rule">Guardrail “cost-cap” rewrites gpt-4o to gpt-4o-mini' in html
